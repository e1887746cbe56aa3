#pragma once
// tests/data/region_v3.golden read (its format is in its first lines): the region's bytes, and
// each word or text it names, for the tests that hold the agent's and libddp's readers and writers
// to it. The file's path is DDPRUN_GOLDEN_REGION, a definition the build gives those tests.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

namespace ddprun::test {

struct GoldenRegion {
  std::string bytes;
  std::map<std::string, uint64_t> words;  // u64 and i64 lines (an i64 as its two's complement)
  std::map<std::string, std::string> texts;

  uint64_t word(const std::string& name) const { return words.at(name); }
  int64_t signed_word(const std::string& name) const {
    return static_cast<int64_t>(words.at(name));
  }
  const std::string& text(const std::string& name) const { return texts.at(name); }
};

inline GoldenRegion read_golden_region(const std::string& path = DDPRUN_GOLDEN_REGION) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  GoldenRegion g;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.front() == '#') continue;
    std::istringstream fields(line);
    std::string first, kind, value, name;
    fields >> first;
    if (first == "size") {
      size_t size = 0;
      fields >> size;
      g.bytes.assign(size, '\0');
      continue;
    }
    if (!(fields >> kind >> value >> name)) throw std::runtime_error(path + ": bad line: " + line);
    const size_t at = std::stoull(first);
    const size_t length = kind == "text" ? value.size() : 8;
    if (kind != "text" && kind != "u64" && kind != "i64") {
      throw std::runtime_error(path + ": unknown kind in: " + line);
    }
    if (at + length > g.bytes.size()) {
      throw std::runtime_error(path + ": beyond the size line (or before it): " + line);
    }
    if (kind == "text") {
      g.bytes.replace(at, length, value);
      g.texts[name] = value;
      continue;
    }
    const uint64_t word = kind == "i64" ? static_cast<uint64_t>(std::stoll(value))
                                        : static_cast<uint64_t>(std::stoull(value));
    if (kind == "u64" && value.front() == '-') {
      throw std::runtime_error(path + ": a negative u64 in: " + line);
    }
    std::memcpy(g.bytes.data() + at, &word, sizeof word);
    g.words[name] = word;
  }
  if (g.bytes.empty()) throw std::runtime_error(path + " has no size line");
  return g;
}

// Checks a reader's record of slot `slot` (the agent's SlotRecord, libddp's Record: the same eight
// fields) against the golden one.
template <typename Record>
void check_record(const GoldenRegion& g, int slot, const Record& r) {
  const std::string s = "slot" + std::to_string(slot) + ".";
  CHECK(r.state == g.word(s + "state"));
  CHECK(r.step == g.signed_word(s + "step"));
  CHECK(r.size == g.word(s + "size"));
  CHECK(r.checksum == g.word(s + "checksum"));
  CHECK(r.sequence == g.word(s + "sequence"));
  CHECK(r.structure_size == g.word(s + "structure_size"));
  CHECK(r.metadata_size == g.word(s + "metadata_size"));
  CHECK(r.world_size == g.word(s + "world_size"));
}

}  // namespace ddprun::test
