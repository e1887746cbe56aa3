#include <catch2/catch.hpp>

#include "workers/python_template.hpp"

using ddprun::agent::safe_substitute;

TEST_CASE("template: $name and ${name} are replaced where the name is known", "[template]") {
  const std::map<std::string, std::string> v = {{"local_rank", "3"}, {"rank", "7"}};
  CHECK(safe_substitute("--local-rank=${local_rank}", v) == "--local-rank=3");
  CHECK(safe_substitute("$rank/$local_rank", v) == "7/3");
  CHECK(safe_substitute("${rank}x", v) == "7x");
  CHECK(safe_substitute("$rankx", v) == "$rankx");  // the name is "rankx", unknown
}

TEST_CASE("template: $$ is a dollar and anything else stays as written", "[template]") {
  const std::map<std::string, std::string> v = {{"local_rank", "0"}};
  CHECK(safe_substitute("pid=$$", v) == "pid=$");
  CHECK(safe_substitute("$$$$", v) == "$$");
  CHECK(safe_substitute("$HOME ${HOME} ${local_rank", v) == "$HOME ${HOME} ${local_rank");
  CHECK(safe_substitute("cost $5, ${1x}, trailing $", v) == "cost $5, ${1x}, trailing $");
  CHECK(safe_substitute("$$local_rank", v) == "$local_rank");
  CHECK(safe_substitute("", v).empty());
}
