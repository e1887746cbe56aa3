#pragma once
// torchrun's --duplicate-stdout-filters / --duplicate-stderr-filters: one file per attempt and
// stream (<attempt folder>/filtered_stdout.log, filtered_stderr.log), created when the attempt
// starts, holding the console lines of every teed worker (prefix included) that contain any of
// the filter strings. Shared by the log pumps of the attempt's workers; each line is written whole.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::agent {

class FilteredLog {
 public:
  // Creates or truncates `path`. Throws std::system_error when it cannot.
  FilteredLog(const std::string& path, std::vector<std::string> needles);
  ~FilteredLog();
  FilteredLog(const FilteredLog&) = delete;
  FilteredLog& operator=(const FilteredLog&) = delete;

  // Whether `line` contains any filter string.
  bool matches(std::string_view line) const;
  // Appends `text` (whole lines) and flushes.
  void write(std::string_view text);

 private:
  std::FILE* file_ = nullptr;
  std::vector<std::string> needles_;
};

}  // namespace ddprun::agent
