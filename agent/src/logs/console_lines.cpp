#include "ddprun/agent/console_lines.hpp"

namespace ddprun::agent {

ConsoleLines::ConsoleLines(std::string prefix, size_t max_line,
                           std::function<bool(std::string_view)> keep)
    : prefix_(std::move(prefix)), max_line_(max_line == 0 ? 1 : max_line), keep_(std::move(keep)) {}

void ConsoleLines::emit(std::string& out, std::string_view text, char end) {
  if (keep_) {
    const std::string line = partial_ + std::string(text) + end;
    partial_.clear();
    if (keep_(line)) out += prefix_ + line;
    return;
  }
  out += prefix_;
  out += partial_;
  out += text;
  out += end;
  partial_.clear();
}

std::string ConsoleLines::feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    const size_t room = max_line_ - partial_.size();
    const size_t end = data.find_first_of("\n\r");
    if (end != std::string_view::npos && end <= room) {
      emit(out, data.substr(0, end), data[end]);
      data.remove_prefix(end + 1);
    } else if (data.size() >= room) {
      emit(out, data.substr(0, room), '\n');  // a piece of a line too long to hold
      data.remove_prefix(room);
    } else {
      partial_.append(data);
      break;
    }
  }
  return out;
}

std::string ConsoleLines::finish() {
  if (partial_.empty()) return "";
  std::string out;
  emit(out, "", '\n');
  return out;
}

}  // namespace ddprun::agent
