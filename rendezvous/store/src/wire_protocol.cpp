#include "ddprun/store/wire_protocol.hpp"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace ddprun::store::wire {
namespace {

// The fields of each operation's request, in wire order. Parser and encoder both walk this table,
// so a frame layout is written down exactly once.
enum class Field : uint8_t {
  kU8,            // Request::mode
  kU32,           // Request::u32
  kI64,           // Request::number
  kKey,           // Request::key
  kValue,         // Request::value
  kDesired,       // Request::desired
  kKeyList,       // u64 count, then count keys into Request::keys
  kKeyValueList,  // u64 count, then count (key, value) pairs into Request::keys / values
};

using Layout = std::span<const Field>;

Layout layout_of(Op op) {
  using F = Field;
  static constexpr F kU32Only[] = {F::kU32};
  static constexpr F kKeyOnly[] = {F::kKey};
  static constexpr F kKeyValue[] = {F::kKey, F::kValue};
  static constexpr F kKeyValueDesired[] = {F::kKey, F::kValue, F::kDesired};
  static constexpr F kKeyNumber[] = {F::kKey, F::kI64};
  static constexpr F kKeys[] = {F::kKeyList};
  static constexpr F kPairs[] = {F::kKeyValueList};
  static constexpr F kModeKey[] = {F::kU8, F::kKey};
  static constexpr F kNumber[] = {F::kI64};
  static constexpr F kValueOnly[] = {F::kValue};
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
      return kU32Only;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
    case Op::kSetOwned:
    case Op::kAuthBegin:
      return kKeyValue;
    case Op::kAuthProve:
      return kValueOnly;
    case Op::kCompareSet:
    case Op::kCompareSetOwned:
      return kKeyValueDesired;
    case Op::kGet:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kWatchKey:
    case Op::kGetPrefix:
      return kKeyOnly;
    case Op::kAdd:
    case Op::kBarrier:
      return kKeyNumber;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return kKeys;
    case Op::kMultiSet:
      return kPairs;
    case Op::kWatch:
      return kModeKey;
    case Op::kKeepAlive:
      return kNumber;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
    case Op::kServerInfo:
    case Op::kServerTime:
      return {};
  }
  return {};
}

constexpr std::array<Op, 9> kLegacyOps = {Op::kSet,        Op::kCompareSet, Op::kGet,
                                          Op::kAdd,        Op::kCheck,      Op::kWait,
                                          Op::kGetNumKeys, Op::kWatchKey,   Op::kDeleteKey};
constexpr std::array<Op, 19> kModernOps = {
    Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,
    Op::kCheck,    Op::kWait,     Op::kGetNumKeys, Op::kDeleteKey, Op::kAppend,
    Op::kMultiGet, Op::kMultiSet, Op::kCancelWait, Op::kPing,      Op::kQueuePush,
    Op::kQueuePop, Op::kQueueLen, Op::kListKeys,   Op::kBarrier};

bool op_from_opcode(uint8_t opcode, Dialect dialect, Op& out) {
  if (dialect == Dialect::kLegacy) {
    if (opcode >= kLegacyOps.size()) return false;
    out = kLegacyOps[opcode];
    return true;
  }
  if (opcode < kModernOps.size()) {
    out = kModernOps[opcode];
    return true;
  }
  switch (opcode) {
    case kExtWatch:
      out = Op::kWatch;
      return true;
    case kExtSetOwned:
      out = Op::kSetOwned;
      return true;
    case kExtKeepAlive:
      out = Op::kKeepAlive;
      return true;
    case kExtGetPrefix:
      out = Op::kGetPrefix;
      return true;
    case kExtServerInfo:
      out = Op::kServerInfo;
      return true;
    case kExtCompareSetOwned:
      out = Op::kCompareSetOwned;
      return true;
    case kExtAuthBegin:
      out = Op::kAuthBegin;
      return true;
    case kExtAuthProve:
      out = Op::kAuthProve;
      return true;
    case kExtServerTime:
      out = Op::kServerTime;
      return true;
    default:
      return false;
  }
}

bool allowed_before_auth(Op op) {
  return op == Op::kValidate || op == Op::kPing || op == Op::kServerInfo || op == Op::kAuthBegin ||
         op == Op::kAuthProve || op == Op::kServerTime;
}

}  // namespace

int opcode_of(Op op, Dialect dialect) {
  if (dialect == Dialect::kLegacy) {
    auto it = std::find(kLegacyOps.begin(), kLegacyOps.end(), op);
    return it == kLegacyOps.end() ? -1 : static_cast<int>(it - kLegacyOps.begin());
  }
  auto it = std::find(kModernOps.begin(), kModernOps.end(), op);
  if (it != kModernOps.end()) return static_cast<int>(it - kModernOps.begin());
  switch (op) {
    case Op::kWatch:
      return kExtWatch;
    case Op::kSetOwned:
      return kExtSetOwned;
    case Op::kKeepAlive:
      return kExtKeepAlive;
    case Op::kGetPrefix:
      return kExtGetPrefix;
    case Op::kServerInfo:
      return kExtServerInfo;
    case Op::kCompareSetOwned:
      return kExtCompareSetOwned;
    case Op::kAuthBegin:
      return kExtAuthBegin;
    case Op::kAuthProve:
      return kExtAuthProve;
    case Op::kServerTime:
      return kExtServerTime;
    default:
      return -1;
  }
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kValidate:
      return "VALIDATE";
    case Op::kSet:
      return "SET";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kGetNumKeys:
      return "GETNUMKEYS";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kAppend:
      return "APPEND";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kCancelWait:
      return "CANCEL_WAIT";
    case Op::kPing:
      return "PING";
    case Op::kQueuePush:
      return "QUEUE_PUSH";
    case Op::kQueuePop:
      return "QUEUE_POP";
    case Op::kQueueLen:
      return "QUEUE_LEN";
    case Op::kListKeys:
      return "LIST_KEYS";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kWatchKey:
      return "WATCH_KEY";
    case Op::kWatch:
      return "WATCH";
    case Op::kSetOwned:
      return "SET_OWNED";
    case Op::kKeepAlive:
      return "KEEPALIVE";
    case Op::kGetPrefix:
      return "GET_PREFIX";
    case Op::kServerInfo:
      return "SERVER_INFO";
    case Op::kCompareSetOwned:
      return "COMPARE_SET_OWNED";
    case Op::kAuthBegin:
      return "AUTH_BEGIN";
    case Op::kAuthProve:
      return "AUTH_PROVE";
    case Op::kServerTime:
      return "SERVER_TIME";
  }
  return "?";
}

RequestParser::RequestParser(Limits limits) : limits_(limits) {}

Request RequestParser::take_request() {
  complete_ = false;
  return std::exchange(req_, Request{});
}

bool RequestParser::fail(std::string message) {
  error_ = std::move(message);
  return false;
}

bool RequestParser::start_request(uint8_t opcode) {
  if (!op_from_opcode(opcode, dialect_, req_.op)) {
    return fail(fmt::format("unknown opcode {} in the {} dialect", opcode,
                            dialect_ == Dialect::kLegacy ? "legacy" : "modern"));
  }
  if (handshake_only_ && !allowed_before_auth(req_.op)) {
    return fail(fmt::format("sent {} before authenticating", op_name(req_.op)));
  }
  return true;
}

bool RequestParser::detect_dialect(std::string_view bytes) {
  if (bytes.empty()) return false;
  // A TLS record header (handshake, version 3.x): no opcode of either dialect is 0x16.
  if (bytes.size() >= 2 && static_cast<uint8_t>(bytes[0]) == 0x16 &&
      static_cast<uint8_t>(bytes[1]) == 0x03) {
    began_tls_ = true;
    return fail("began a TLS handshake, and this store serves no TLS");
  }
  if (static_cast<uint8_t>(bytes[0]) != 0) {
    dialect_ = Dialect::kLegacy;
  } else {
    if (bytes.size() < 5) return false;
    uint32_t magic = 0;
    std::memcpy(&magic, bytes.data() + 1, 4);
    dialect_ = magic == kValidationMagic ? Dialect::kModern : Dialect::kLegacy;
  }
  if (handshake_only_ && dialect_ == Dialect::kLegacy) {
    return fail("spoke the legacy dialect (torch <= 2.1), which cannot authenticate");
  }
  return true;
}

bool RequestParser::read_scalar(Input& in, void* dst, size_t n) {
  if (in.available() < n) return false;
  std::memcpy(dst, in.bytes.data() + in.pos, n);
  in.pos += n;
  frame_bytes_ += n;
  return true;
}

bool RequestParser::read_length(Input& in, size_t limit, const char* what, uint64_t& len) {
  if (!read_scalar(in, &len, 8)) return false;
  if (handshake_only_) limit = std::min(limit, kHandshakeFieldBytes);
  if (len > limit) {
    return fail(fmt::format("{} {} of {} bytes exceeds the limit of {}", op_name(req_.op), what,
                            len, limit));
  }
  if (frame_bytes_ + len > limits_.max_request_bytes) {
    return fail(fmt::format("{} request exceeds the limit of {} bytes", op_name(req_.op),
                            limits_.max_request_bytes));
  }
  return true;
}

void RequestParser::begin_string(std::string& target, uint64_t len) {
  target.reserve(std::min<uint64_t>(len, 64 * 1024));
  string_target_ = &target;
  string_left_ = len;
  in_string_ = true;
}

bool RequestParser::continue_string(Input& in) {
  const size_t n = std::min<uint64_t>(in.available(), string_left_);
  string_target_->append(in.bytes.data() + in.pos, n);
  in.pos += n;
  frame_bytes_ += n;
  string_left_ -= n;
  if (string_left_ > 0) return false;
  in_string_ = false;
  // A finished string completes a plain field, or one element of a list.
  const Field f = layout_of(req_.op)[step_];
  if (f == Field::kKeyList) {
    --remaining_;
  } else if (f == Field::kKeyValueList) {
    if (req_.values.size() == req_.keys.size()) --remaining_;
  } else {
    ++step_;
  }
  return true;
}

bool RequestParser::read_field(Input& in) {
  uint64_t len = 0;
  const Field f = layout_of(req_.op)[step_];
  switch (f) {
    case Field::kU8:
      if (!read_scalar(in, &req_.mode, 1)) return false;
      break;
    case Field::kU32:
      if (!read_scalar(in, &req_.u32, 4)) return false;
      break;
    case Field::kI64:
      if (!read_scalar(in, &req_.number, 8)) return false;
      break;
    case Field::kKey:
      if (!read_length(in, limits_.max_key_bytes, "key", len)) return false;
      begin_string(req_.key, len);
      return true;
    case Field::kValue:
      if (!read_length(in, limits_.max_value_bytes, "value", len)) return false;
      begin_string(req_.value, len);
      return true;
    case Field::kDesired:
      if (!read_length(in, limits_.max_value_bytes, "value", len)) return false;
      begin_string(req_.desired, len);
      return true;
    case Field::kKeyList:
    case Field::kKeyValueList:
      return read_list_element(in, f == Field::kKeyValueList);
  }
  ++step_;  // a scalar field is done
  return true;
}

bool RequestParser::read_list_element(Input& in, bool pairs) {
  if (!list_started_) {
    uint64_t count = 0;
    if (!read_scalar(in, &count, 8)) return false;
    if (count > limits_.max_keys_per_request) {
      return fail(fmt::format("{} names {} keys, more than the limit of {}", op_name(req_.op),
                              count, limits_.max_keys_per_request));
    }
    list_started_ = true;
    remaining_ = count;
    req_.keys.reserve(std::min<uint64_t>(count, 1024));
    if (pairs) req_.values.reserve(std::min<uint64_t>(count, 1024));
  }
  if (remaining_ == 0) {
    list_started_ = false;
    ++step_;
    return true;
  }
  uint64_t len = 0;
  if (pairs && req_.keys.size() > req_.values.size()) {
    if (!read_length(in, limits_.max_value_bytes, "value", len)) return false;
    begin_string(req_.values.emplace_back(), len);
  } else {
    if (!read_length(in, limits_.max_key_bytes, "key", len)) return false;
    begin_string(req_.keys.emplace_back(), len);
  }
  return true;
}

void RequestParser::finish_request() {
  complete_ = true;
  in_op_ = false;
  step_ = 0;
  frame_bytes_ = 0;
}

size_t RequestParser::consume(std::string_view bytes) {
  if (complete_ || failed()) return 0;
  if (dialect_ == Dialect::kUnknown && !detect_dialect(bytes)) return 0;
  Input in{bytes};
  for (;;) {
    if (in_string_) {
      if (!continue_string(in)) return in.pos;
      continue;
    }
    if (!in_op_) {
      uint8_t opcode = 0;
      if (!read_scalar(in, &opcode, 1) || !start_request(opcode)) return in.pos;
      in_op_ = true;
      step_ = 0;
      remaining_ = 0;
    }
    if (step_ == layout_of(req_.op).size()) {
      finish_request();
      return in.pos;
    }
    if (!read_field(in)) return in.pos;
  }
}

void encode_request(const Request& req, Dialect dialect, std::string& out) {
  const int opcode = opcode_of(req.op, dialect);
  if (opcode < 0) {
    throw std::invalid_argument(fmt::format("{} does not exist in the {} dialect", op_name(req.op),
                                            dialect == Dialect::kLegacy ? "legacy" : "modern"));
  }
  put_u8(out, static_cast<uint8_t>(opcode));
  for (const Field f : layout_of(req.op)) {
    switch (f) {
      case Field::kU8:
        put_u8(out, req.mode);
        break;
      case Field::kU32:
        put_u32(out, req.u32);
        break;
      case Field::kI64:
        put_i64(out, req.number);
        break;
      case Field::kKey:
        put_bytes(out, req.key);
        break;
      case Field::kValue:
        put_bytes(out, req.value);
        break;
      case Field::kDesired:
        put_bytes(out, req.desired);
        break;
      case Field::kKeyList:
        put_i64(out, static_cast<int64_t>(req.keys.size()));
        for (const auto& k : req.keys) put_bytes(out, k);
        break;
      case Field::kKeyValueList:
        if (req.keys.size() != req.values.size()) {
          throw std::invalid_argument("MULTI_SET needs as many values as keys");
        }
        put_i64(out, static_cast<int64_t>(req.keys.size()));
        for (size_t i = 0; i < req.keys.size(); ++i) {
          put_bytes(out, req.keys[i]);
          put_bytes(out, req.values[i]);
        }
        break;
    }
  }
}

void put_watch_frame(std::string& out, WatchEvent event, std::string_view key,
                     std::string_view old_value, std::string_view new_value) {
  put_u8(out, static_cast<uint8_t>(event));
  put_bytes(out, key);
  put_bytes(out, old_value);
  put_bytes(out, new_value);
}

}  // namespace ddprun::store::wire
