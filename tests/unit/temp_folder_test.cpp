#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ddprun/agent/temp_folder.hpp"
#include "temp_folder.hpp"

using ddprun::agent::Environment;
using ddprun::agent::temp_folder;
namespace fs = std::filesystem;

TEST_CASE("temp folder: TMPDIR, then TEMP, then TMP, as Python's tempfile picks", "[temp_folder]") {
  ddprun::test::TempFolder base;
  for (const char* name : {"a", "b", "c"}) fs::create_directory(base.path / name);
  const std::string a = (base.path / "a").string(), b = (base.path / "b").string(),
                    c = (base.path / "c").string();
  CHECK(temp_folder({{"TMPDIR", a}, {"TEMP", b}, {"TMP", c}}) == a);
  CHECK(temp_folder({{"TEMP", b}, {"TMP", c}}) == b);
  CHECK(temp_folder({{"TMPDIR", ""}, {"TMP", c}}) == c);
  CHECK(temp_folder({}) == "/tmp");
}

TEST_CASE("temp folder: one that takes no file is passed over, and nothing is left in any",
          "[temp_folder]") {
  ddprun::test::TempFolder base;
  const fs::path file = base.path / "a-file", good = base.path / "good";
  std::ofstream(file) << "x";
  fs::create_directory(good);
  CHECK(temp_folder({{"TMPDIR", (base.path / "missing").string()},
                     {"TEMP", file.string()},
                     {"TMP", good.string()}}) == good);
  CHECK(fs::is_empty(good));
}

TEST_CASE("temp folder: a relative or slash-ended one is made absolute and normal",
          "[temp_folder]") {
  ddprun::test::TempFolder base;
  fs::create_directory(base.path / "t");
  struct InFolder {  // the working folder, restored however the case ends
    fs::path before = fs::current_path();
    explicit InFolder(const fs::path& to) { fs::current_path(to); }
    ~InFolder() { fs::current_path(before); }
  };
  fs::path relative;
  {
    const InFolder in(base.path);
    relative = temp_folder({{"TMPDIR", "./x/../t"}});
  }
  const fs::path slashed = temp_folder({{"TMPDIR", (base.path / "t").string() + "/"}});
  CHECK(relative == base.path / "t");
  CHECK(slashed == base.path / "t");
}
