#include "workers/inprocess_channel.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The generation a worker's file starts with ("G" or "G\n..."), if it is a number.
std::optional<uint64_t> generation_of(const std::string& text) {
  try {
    size_t used = 0;
    const uint64_t g = std::stoull(text, &used);
    if (used == text.size() || text[used] == '\n') return g;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

}  // namespace

InProcessChannel::InProcessChannel(const std::string& dir, int local_rank)
    : path_(dir + "/inprocess." + std::to_string(local_rank)) {}

std::unique_ptr<InProcessChannel> InProcessChannel::for_standby(const std::string& dir,
                                                                uint64_t number) {
  return std::unique_ptr<InProcessChannel>(
      new InProcessChannel(dir + "/standby." + std::to_string(number)));
}

void InProcessChannel::clear() {
  for (const char* suffix : {".ready", ".raised", ".parked", ".stack"}) {
    std::remove((path_ + suffix).c_str());
  }
}

void InProcessChannel::started(uint64_t generation) {
  clear();
  write(nlohmann::json{{"generation", generation}, {"state", "run"}}.dump());
}

void InProcessChannel::standing_by() {
  clear();
  write(nlohmann::json{{"generation", 0}, {"state", "standby"}}.dump());
}

bool InProcessChannel::ready() const { return read_file(path_ + ".ready").has_value(); }

std::optional<std::string> InProcessChannel::raised(uint64_t generation) const {
  return text_of(".raised", generation);
}

void InProcessChannel::abort(uint64_t generation, bool stack) {
  nlohmann::json told = {{"generation", generation}, {"state", "abort"}};
  if (stack) told["stack"] = true;
  write(told.dump());
}

std::optional<std::string> InProcessChannel::stack(uint64_t generation) const {
  return text_of(".stack", generation);
}

std::optional<std::string> InProcessChannel::text_of(const char* suffix,
                                                     uint64_t generation) const {
  const std::optional<std::string> text = read_file(path_ + suffix);
  if (!text || generation_of(*text) != generation) return std::nullopt;
  const size_t eol = text->find('\n');
  return eol == std::string::npos ? std::string() : text->substr(eol + 1);
}

bool InProcessChannel::parked(uint64_t generation) const {
  const std::optional<std::string> text = read_file(path_ + ".parked");
  return text && generation_of(*text) == generation;
}

void InProcessChannel::resume(uint64_t generation, const Environment& env, const Environment& was) {
  nlohmann::json unset = nlohmann::json::array();
  for (const auto& [name, value] : was) {
    if (!env.contains(name)) unset.push_back(name);
  }
  write(nlohmann::json{{"generation", generation}, {"state", "run"}, {"env", env}, {"unset", unset}}
            .dump());
}

void InProcessChannel::write(const std::string& json) {
  const std::string temp = path_ + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << json;
    if (!out.flush()) {
      throw std::system_error(errno, std::generic_category(), "cannot write " + temp);
    }
  }
  if (std::rename(temp.c_str(), path_.c_str()) != 0) {
    throw std::system_error(errno, std::generic_category(), "cannot rename " + temp);
  }
}

}  // namespace ddprun::agent
