#pragma once
// A fresh folder under the temporary directory (or another folder), removed with everything in it
// with the object.
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace ddprun::test {

struct TempFolder {
  std::filesystem::path path;
  explicit TempFolder(const std::string& prefix = "ddprun-test")
      : TempFolder(std::filesystem::temp_directory_path(), prefix) {}
  // Under `under` (a folder of another file system, say).
  TempFolder(const std::filesystem::path& under, const std::string& prefix) {
    std::string name = (under / (prefix + "-XXXXXX")).string();
    if (::mkdtemp(name.data()) == nullptr) throw std::runtime_error("mkdtemp " + name);
    path = name;
  }
  ~TempFolder() { std::filesystem::remove_all(path); }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
};

}  // namespace ddprun::test
