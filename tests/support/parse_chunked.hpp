#pragma once
// Feeds bytes to a RequestParser in fixed-size chunks, keeping unconsumed bytes as a server does,
// and collects the requests. Stops at the first protocol error (parser.failed()).
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/store/wire_protocol.hpp"

namespace ddprun::testing {

inline std::vector<store::wire::Request> parse_chunked(std::string_view data, size_t chunk,
                                                       store::wire::RequestParser& parser) {
  std::vector<store::wire::Request> out;
  std::string pending;
  size_t fed = 0;
  do {
    const size_t n = std::min(chunk, data.size() - fed);
    pending.append(data.substr(fed, n));
    fed += n;
    size_t pos = 0;
    for (;;) {
      pos += parser.consume(std::string_view(pending).substr(pos));
      if (parser.failed()) return out;
      if (!parser.has_request()) break;
      out.push_back(parser.take_request());
    }
    pending.erase(0, pos);
  } while (fed < data.size());
  return out;
}

}  // namespace ddprun::testing
