// Numbers read as Python's float() and int() read them, checked against the real thing: each text
// goes through /usr/bin/python3 and through python_number.hpp, and the answers must agree.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "python_number.hpp"

using ddprun::launcher::python_float;
using ddprun::launcher::python_int;

namespace {

const std::vector<std::string> kTexts = {"0",
                                         "7",
                                         " 7 ",
                                         "\t30\n",
                                         "+5",
                                         "-5",
                                         "007",
                                         "1_000",
                                         "1_0",
                                         "1__0",
                                         "_1",
                                         "1_",
                                         "1_.5",
                                         "1._5",
                                         "1.5_5",
                                         ".5",
                                         "5.",
                                         ".",
                                         "",
                                         " ",
                                         "-",
                                         "+.5e3",
                                         "1e3",
                                         "1E-3",
                                         "1e+3",
                                         "1e",
                                         "1e_3",
                                         "1e1_0",
                                         "1e999",
                                         "1e-999",
                                         "0x10",
                                         "0b1",
                                         "0o7",
                                         "inf",
                                         "-Infinity",
                                         "INF",
                                         "nan",
                                         "-NaN",
                                         "infinit",
                                         "1.5",
                                         "1,5",
                                         "1 5",
                                         "++1",
                                         "9223372036854775807",
                                         "1.0",
                                         "٣",
                                         "1\v",
                                         "\f2",
                                         "-0",
                                         "1e-320",
                                         "2.5e-324",
                                         "1e308",
                                         "1.8e308",
                                         "0.1",
                                         "1_0.2_5e-1_0",
                                         "1" + std::string(400, '0') + "e-10",
                                         "0." + std::string(400, '0') + "1"};

// Python's answers for each text: {"float": the bits of x or null, "int": n or null}, with inf
// and nan as the strings "inf", "-inf" and "nan". (Finite floats compare to the last bit, the sign
// of zero too.)
nlohmann::json pythons_answers() {
  nlohmann::json texts = kTexts;
  const std::string program =
      "import json, math, struct, sys\n"
      "def f(t):\n"
      "    try:\n"
      "        x = float(t)\n"
      "    except ValueError:\n"
      "        return None\n"
      "    return struct.unpack(\"<q\", struct.pack(\"<d\", x))[0] if math.isfinite(x) else "
      "repr(x)\n"
      "def i(t):\n"
      "    try:\n"
      "        return int(t)\n"
      "    except ValueError:\n"
      "        return None\n"
      "print(json.dumps([{\"float\": f(t), \"int\": i(t)} for t in json.load(sys.stdin)]))\n";
  char input[] = "/tmp/python_number_test.XXXXXX";
  const int fd = ::mkstemp(input);
  REQUIRE(fd >= 0);
  const std::string json = texts.dump();
  REQUIRE(::write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()));
  ::close(fd);
  const std::string command = "/usr/bin/python3 -c '" + program + "' < " + std::string(input);
  std::FILE* out = ::popen(command.c_str(), "r");
  REQUIRE(out != nullptr);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) text.append(buf, n);
  REQUIRE(::pclose(out) == 0);
  std::remove(input);
  return nlohmann::json::parse(text);
}

std::string shown(std::optional<double> x) {
  if (!x) return "error";
  if (std::isnan(*x)) return "nan";
  if (std::isinf(*x)) return *x > 0 ? "inf" : "-inf";
  return std::to_string(std::bit_cast<int64_t>(*x));
}

std::string shown(const nlohmann::json& x) {
  if (x.is_null()) return "error";
  if (x.is_string()) return x.get<std::string>();
  return std::to_string(x.get<int64_t>());
}

}  // namespace

TEST_CASE("python number: float() and int() of each text give what Python's give", "[cli]") {
  const nlohmann::json answers = pythons_answers();
  REQUIRE(answers.size() == kTexts.size());
  for (size_t k = 0; k < kTexts.size(); ++k) {
    const std::string& t = kTexts[k];
    const nlohmann::json& want = answers[k];
    // (Python's int() and float() take non-ASCII digits; these are refused here.)
    const bool ascii = std::all_of(t.begin(), t.end(), [](char c) { return (c & 0x80) == 0; });
    if (!ascii) {
      CHECK_FALSE(python_float(t));
      CHECK_FALSE(python_int(t));
      continue;
    }
    INFO("text '" << t << "'");
    CHECK(shown(python_float(t)) == shown(want["float"]));
    const std::optional<long> n = python_int(t);
    if (want["int"].is_null()) {
      CHECK_FALSE(n);
    } else {
      REQUIRE(n);
      CHECK(*n == want["int"].get<long>());
    }
  }
}
