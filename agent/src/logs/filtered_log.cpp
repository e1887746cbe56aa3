#include "logs/filtered_log.hpp"

#include <cerrno>
#include <system_error>

namespace ddprun::agent {

FilteredLog::FilteredLog(const std::string& path, std::vector<std::string> needles)
    : needles_(std::move(needles)) {
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) throw std::system_error(errno, std::generic_category(), "open " + path);
}

FilteredLog::~FilteredLog() { std::fclose(file_); }

bool FilteredLog::matches(std::string_view line) const {
  for (const std::string& n : needles_) {
    if (line.find(n) != std::string_view::npos) return true;
  }
  return false;
}

void FilteredLog::write(std::string_view text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
}

}  // namespace ddprun::agent
