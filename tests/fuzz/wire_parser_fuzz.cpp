// Fuzzes the request parser. Properties, beyond "no crash, no sanitizer report":
//   - chunking does not matter: byte-at-a-time and whole-buffer parsing give the same requests and
//     the same verdict;
//   - every accepted request re-encodes to a frame that parses back to itself.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "ddprun/store/wire_protocol.hpp"
#include "parse_chunked.hpp"

using namespace ddprun::store::wire;
using ddprun::testing::parse_chunked;

namespace {

Limits small_limits() {
  Limits l;
  l.max_key_bytes = 64;
  l.max_value_bytes = 4096;
  l.max_keys_per_request = 16;
  l.max_request_bytes = 16384;
  return l;
}

std::string encoded(const Request& r, Dialect d) {
  std::string out;
  encode_request(r, d, out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 13;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  RequestParser whole(small_limits());
  RequestParser pieces(small_limits());
  const auto a = parse_chunked(input, input.size() + 1, whole);
  const auto b = parse_chunked(input, chunk, pieces);
  if (a.size() != b.size() || whole.failed() != pieces.failed()) std::abort();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string frame = encoded(a[i], whole.dialect());
    if (frame != encoded(b[i], pieces.dialect())) std::abort();
    // Re-parse on a parser that already knows the dialect (a leading VALIDATE fixes it for modern).
    RequestParser again(small_limits());
    std::string stream = frame;
    if (whole.dialect() == Dialect::kModern) {
      Request hello;
      hello.op = Op::kValidate;
      hello.u32 = kValidationMagic;
      stream = encoded(hello, Dialect::kModern) + frame;
    }
    const auto back = parse_chunked(stream, stream.size(), again);
    if (again.failed() || back.empty() || encoded(back.back(), again.dialect()) != frame)
      std::abort();
  }
  return 0;
}
