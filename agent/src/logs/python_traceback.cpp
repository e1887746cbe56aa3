#include "logs/python_traceback.hpp"

namespace ddprun::agent {

std::optional<PythonTraceback> last_python_traceback(std::string_view output) {
  constexpr std::string_view kStart = "Traceback (most recent call last):";
  size_t at = output.rfind(kStart);
  while (at != std::string_view::npos && at != 0 && output[at - 1] != '\n') {
    at = output.rfind(kStart, at - 1);  // one in the middle of a line is not Python's
  }
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = output.substr(at);
  PythonTraceback tb;
  bool first = true;
  while (!rest.empty()) {
    const size_t end = rest.find('\n');
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first || line.empty() || line.front() == ' ' || line.front() == '\t') {
      tb.traceback.append(line).push_back('\n');
      first = false;
      continue;
    }
    tb.exception = std::string(line);
    while (!tb.traceback.empty() && tb.traceback.back() == '\n') tb.traceback.pop_back();
    return tb;
  }
  return std::nullopt;  // cut off before the exception's line
}

std::string last_line(std::string_view output) {
  const size_t end = output.find_last_not_of("\r\n");
  if (end == std::string_view::npos) return {};
  const size_t begin = output.find_last_of('\n', end);
  const size_t from = begin == std::string_view::npos ? 0 : begin + 1;
  return std::string(output.substr(from, end - from + 1));
}

}  // namespace ddprun::agent
