#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ddprun/store/wire_protocol.hpp"
#include "parse_chunked.hpp"

using namespace ddprun::store::wire;
using ddprun::testing::parse_chunked;

namespace {

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

std::string le64(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), 8); }

std::string encode(const Request& r, Dialect d) {
  std::string out;
  encode_request(r, d, out);
  return out;
}

Request make(Op op, std::string key = {}, std::string value = {}) {
  Request r;
  r.op = op;
  r.key = std::move(key);
  r.value = std::move(value);
  return r;
}

}  // namespace

TEST_CASE("codec: legacy SET is byte-exact with torch 1.13's client", "[codec]") {
  // reference/torchrun.md section 8: store.set("ab", b"xy") from Debian's torch 1.13.
  const std::string expected = bytes(
      {0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x2f, 0x61, 0x62, 0x02, 0, 0, 0, 0, 0, 0, 0, 0x78, 0x79});
  CHECK(encode(make(Op::kSet, "/ab", "xy"), Dialect::kLegacy) == expected);

  RequestParser parser;
  auto reqs = parse_chunked(expected, expected.size(), parser);
  REQUIRE(reqs.size() == 1);
  CHECK(parser.dialect() == Dialect::kLegacy);
  CHECK(reqs[0].op == Op::kSet);
  CHECK(reqs[0].key == "/ab");
  CHECK(reqs[0].value == "xy");
}

TEST_CASE("codec: modern handshake is VALIDATE with the magic then PING", "[codec]") {
  Request validate = make(Op::kValidate);
  validate.u32 = kValidationMagic;
  Request ping = make(Op::kPing);
  ping.u32 = 0x01020304;
  CHECK(encode(validate, Dialect::kModern) == bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C}));
  CHECK(encode(ping, Dialect::kModern) == bytes({13, 0x04, 0x03, 0x02, 0x01}));

  RequestParser parser;
  auto reqs = parse_chunked(encode(validate, Dialect::kModern) + encode(ping, Dialect::kModern), 64,
                            parser);
  REQUIRE(reqs.size() == 2);
  CHECK(parser.dialect() == Dialect::kModern);
  CHECK(reqs[0].op == Op::kValidate);
  CHECK(reqs[0].u32 == kValidationMagic);
  CHECK(reqs[1].op == Op::kPing);
  CHECK(reqs[1].u32 == 0x01020304);
}

TEST_CASE("codec: opcodes match torch's enums in each dialect", "[codec]") {
  const std::vector<std::pair<Op, int>> legacy = {
      {Op::kSet, 0},       {Op::kCompareSet, 1}, {Op::kGet, 2},        {Op::kAdd, 3},
      {Op::kCheck, 4},     {Op::kWait, 5},       {Op::kGetNumKeys, 6}, {Op::kWatchKey, 7},
      {Op::kDeleteKey, 8}, {Op::kAppend, -1},    {Op::kPing, -1},      {Op::kCancelWait, -1}};
  for (auto [op, code] : legacy) {
    INFO(op_name(op));
    CHECK(opcode_of(op, Dialect::kLegacy) == code);
  }
  const std::vector<std::pair<Op, int>> modern = {
      {Op::kValidate, 0},     {Op::kSet, 1},
      {Op::kCompareSet, 2},   {Op::kGet, 3},
      {Op::kAdd, 4},          {Op::kCheck, 5},
      {Op::kWait, 6},         {Op::kGetNumKeys, 7},
      {Op::kDeleteKey, 8},    {Op::kAppend, 9},
      {Op::kMultiGet, 10},    {Op::kMultiSet, 11},
      {Op::kCancelWait, 12},  {Op::kPing, 13},
      {Op::kQueuePush, 14},   {Op::kQueuePop, 15},
      {Op::kQueueLen, 16},    {Op::kListKeys, 17},
      {Op::kBarrier, 18},     {Op::kWatchKey, -1},
      {Op::kWatch, 200},      {Op::kSetOwned, 201},
      {Op::kKeepAlive, 202},  {Op::kGetPrefix, 203},
      {Op::kServerInfo, 204}, {Op::kCompareSetOwned, 205}};
  for (auto [op, code] : modern) {
    INFO(op_name(op));
    CHECK(opcode_of(op, Dialect::kModern) == code);
  }
}

TEST_CASE("codec: every request round-trips through any chunking", "[codec]") {
  Request validate = make(Op::kValidate);
  validate.u32 = kValidationMagic;
  Request cas = make(Op::kCompareSet, "/k", "old");
  cas.desired = "new";
  Request cas_owned = make(Op::kCompareSetOwned, "/leader", "");
  cas_owned.desired = "me";
  Request add = make(Op::kAdd, "/n");
  add.number = -42;
  Request wait = make(Op::kWait);
  wait.keys = {"/a", "", std::string(300, 'x')};
  Request mset = make(Op::kMultiSet);
  mset.keys = {"/a", "/b"};
  mset.values = {"1", std::string(5000, '\0')};
  Request barrier = make(Op::kBarrier, "/bar");
  barrier.number = 8;
  Request watch = make(Op::kWatch, "/pre");
  watch.mode = 1;
  Request keepalive = make(Op::kKeepAlive);
  keepalive.number = 1500;
  const std::vector<Request> reqs = {validate,
                                     make(Op::kSet, "/k", std::string(100000, 'v')),
                                     cas,
                                     make(Op::kGet, "/k"),
                                     add,
                                     wait,
                                     make(Op::kGetNumKeys),
                                     make(Op::kCancelWait),
                                     mset,
                                     barrier,
                                     watch,
                                     keepalive,
                                     make(Op::kSetOwned, "/o", ""),
                                     make(Op::kGetPrefix, "/job/"),
                                     make(Op::kServerInfo),
                                     cas_owned};
  std::string wire;
  for (const auto& r : reqs) encode_request(r, Dialect::kModern, wire);

  for (size_t chunk : {size_t{1}, size_t{3}, size_t{7}, size_t{4096}, wire.size()}) {
    INFO("chunk " << chunk);
    RequestParser parser;
    auto got = parse_chunked(wire, chunk, parser);
    REQUIRE_FALSE(parser.failed());
    REQUIRE(got.size() == reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      CHECK(encode(got[i], Dialect::kModern) == encode(reqs[i], Dialect::kModern));
    }
    CHECK(parser.idle());
  }
}

TEST_CASE("codec: a first byte of 0 without the magic is a legacy SET", "[codec]") {
  RequestParser parser;
  const std::string frame = encode(make(Op::kSet, "/x", "1"), Dialect::kLegacy);
  CHECK(parser.consume(frame.substr(0, 4)) == 0);  // not decidable yet: bytes stay with the caller
  CHECK(parser.dialect() == Dialect::kUnknown);
  auto reqs = parse_chunked(frame, frame.size(), parser);
  REQUIRE(reqs.size() == 1);
  CHECK(parser.dialect() == Dialect::kLegacy);
}

TEST_CASE("codec: a length over the limit fails as soon as its prefix arrives", "[codec]") {
  Limits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 1024;
  limits.max_keys_per_request = 4;

  SECTION("key") {
    RequestParser parser(limits);
    parser.consume(bytes({0x00}) + le64(1ull << 62));
    CHECK(parser.failed());
    CHECK_THAT(parser.error(), Catch::Contains("exceeds the limit of 16"));
  }
  SECTION("value") {
    RequestParser parser(limits);
    parser.consume(bytes({0x00}) + le64(1) + "k" + le64(1025));
    CHECK(parser.failed());
  }
  SECTION("key count") {
    RequestParser parser(limits);
    parser.consume(bytes({0x05}) + le64(5));
    CHECK(parser.failed());
    CHECK_THAT(parser.error(), Catch::Contains("names 5 keys"));
  }
  SECTION("whole request") {
    limits.max_request_bytes = 80;
    RequestParser parser(limits);
    parser.consume(bytes({0x05}) + le64(4) + le64(10) + std::string(10, 'a') + le64(10) +
                   std::string(10, 'b') + le64(10) + std::string(10, 'c') + le64(16));
    CHECK(parser.failed());
  }
}

TEST_CASE("codec: an unknown opcode fails the connection", "[codec]") {
  RequestParser legacy;
  legacy.consume(bytes({9}));
  CHECK(legacy.failed());

  RequestParser modern;
  CHECK(parse_chunked(bytes({0x00, 0xCE, 0xF7, 0x85, 0x3C, 19}), 6, modern).size() == 1);
  CHECK(modern.failed());
  CHECK_THAT(modern.error(), Catch::Contains("unknown opcode 19"));
}

TEST_CASE("codec: the legacy dialect has no extension operations", "[codec]") {
  std::string out;
  CHECK_THROWS_AS(encode_request(make(Op::kSetOwned, "/k", "v"), Dialect::kLegacy, out),
                  std::invalid_argument);
  RequestParser parser;
  parser.consume(bytes({kExtSetOwned}));
  CHECK(parser.failed());
}
