#pragma once
// The comma-separated lists of the command line and the environment, cut into their pieces.
#include <string_view>
#include <vector>

namespace ddprun::agent {

// The pieces of `text` between `separator`s, in order, untrimmed: "a,,b" -> a, "", b; an empty
// text is one empty piece. The views point into `text`.
inline std::vector<std::string_view> split(std::string_view text, char separator = ',') {
  std::vector<std::string_view> pieces;
  for (size_t start = 0;;) {
    const size_t end = text.find(separator, start);
    pieces.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return pieces;
    start = end + 1;
  }
}

// `text` without the whitespace at either end that Python's str.strip(), int() and float() read
// past (space, tab, newline, return, form feed, vertical tab): what torchrun makes of a value it
// reads (" is_host=1", "0, 1", "30\n").
inline std::string_view trimmed(std::string_view text) {
  constexpr std::string_view kBlanks = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(kBlanks) - first + 1);
}

}  // namespace ddprun::agent
