#pragma once
// A sysfs tree recorded by tests/unit/sysfs/record.sh ("<path under /sys> <content>" per line, '#'
// lines are comments), laid out under a fresh temporary root: root/sys/<path>. The root is removed
// with the object.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ddprun::test {

class SysfsFixture {
 public:
  explicit SysfsFixture(const std::filesystem::path& recording) {
    std::string templ = (std::filesystem::temp_directory_path() / "sysfs_XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp");
    root_ = templ;
    std::ifstream in(recording);
    if (!in) throw std::runtime_error("cannot read " + recording.string());
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line.front() == '#') continue;
      const size_t space = line.find(' ');
      const std::filesystem::path file = root_ / "sys" / line.substr(0, space);
      std::filesystem::create_directories(file.parent_path());
      std::ofstream(file) << (space == std::string::npos ? "" : line.substr(space + 1)) << "\n";
    }
  }
  ~SysfsFixture() { std::filesystem::remove_all(root_); }
  SysfsFixture(const SysfsFixture&) = delete;
  SysfsFixture& operator=(const SysfsFixture&) = delete;

  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path root_;
};

}  // namespace ddprun::test
