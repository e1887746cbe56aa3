#pragma once
// Turns a worker's stream into console lines, each with the worker's prefix: a line ends at '\n' or
// at '\r' (a progress bar's update, shown as it comes, as torchrun shows it), and a line longer
// than `max_line` bytes is cut into pieces of at most that size, each its own console line. Memory
// stays bounded by `max_line` whatever the worker prints. With a `keep` predicate, only the lines
// (or pieces) it accepts are returned.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace ddprun::agent {

class ConsoleLines {
 public:
  ConsoleLines(std::string prefix, size_t max_line,
               std::function<bool(std::string_view)> keep = nullptr);
  // The console text for `data`: every line that ended in it (or ran over `max_line`), prefixed,
  // with its terminator ('\n' or '\r'; a cut piece gets '\n').
  std::string feed(std::string_view data);
  // What is left of an unterminated last line, prefixed and ended with '\n'; "" when nothing is.
  std::string finish();

 private:
  void emit(std::string& out, std::string_view text, char end);

  std::string prefix_;
  size_t max_line_;
  std::function<bool(std::string_view)> keep_;
  std::string partial_;  // text after the last line end
};

}  // namespace ddprun::agent
