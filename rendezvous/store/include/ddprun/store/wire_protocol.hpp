#pragma once
// PyTorch's TCPStore wire protocol, in both dialects, plus ddprun's extension operations.
//
// Framing (identical in both dialects): a request is `[u8 opcode][fields...]`. Scalars are raw
// little-endian memory (u32, i64/u64); a string or byte value is `[u64 length][bytes]`; a key list
// is
// `[u64 count]` followed by that many strings. Responses are raw scalars or `[u64 length][bytes]`.
//
// Dialects, told apart per connection from its first bytes:
//   legacy (torch <= ~2.1, Debian's 1.13): SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5
//     GETNUMKEYS=6 WATCH_KEY=7 DELETE_KEY=8; no handshake.
//   modern (torch >= 2.3): first message VALIDATE=0 + u32 0x3C85F7CE, then SET=1 COMPARE_SET=2
//     GET=3 ADD=4 CHECK=5 WAIT=6 GETNUMKEYS=7 DELETE_KEY=8 APPEND=9 MULTI_GET=10 MULTI_SET=11
//     CANCEL_WAIT=12 PING=13 QUEUE_PUSH=14 QUEUE_POP=15 QUEUE_LEN=16 LIST_KEYS=17 BARRIER=18.
// A modern client's first five bytes are always `00 CE F7 85 3C`; a legacy SET would put a u64 key
// length there, which no key within Limits can have, so the detection is unambiguous.
//
// ddprun extensions (modern dialect only, opcodes far above torch's so that no torch client sends
// them):
//   WATCH=200       [u8 mode: 0 key, 1 prefix][key]. Turns the connection into a watch connection:
//                   from then on the server sends only watch frames on it (see WatchEvent) and the
//                   client may send only further WATCH requests. The server first sends an EXISTING
//                   frame for every matching key (a snapshot), then REGISTERED, then live events.
//   SET_OWNED=201   [key][value]. Like SET, and the key is bound to this connection: it is
//                   deleted when the connection closes or misses its keep-alive. A later plain
//                   write of the key by anyone makes it permanent; a SET_OWNED from another
//                   connection moves the ownership.
//   KEEPALIVE=202   [i64 timeout_ms]. Replies u8 0. If no byte arrives on this connection for
//                   timeout_ms (the server's monotonic clock), the server closes it. 0 turns it
//                   off. PING is the cheapest heartbeat.
//   GET_PREFIX=203  [prefix]. Replies [u64 count] then count (key, value) pairs, in key order:
//                   every key that starts with the prefix, so that a client reads one job's keys
//                   without listing the whole store.
//   SERVER_INFO=204 No fields. Replies [u64 instance][u8 flags]: `instance` is drawn at random
//                   when the server starts, so a client that reconnects can tell a restarted
//                   server (which lost every key) from the one it knew; flags bit 0 set means the
//                   server lives inside an agent and ends with it (ServerOptions::in_agent).
//   COMPARE_SET_OWNED=205 [key][expected][desired]. COMPARE_SET (same reply), and a key it writes
//                   is bound to this connection as by SET_OWNED: how an agent claims a role that
//                   must end with it (the job's leader).
//   AUTH_BEGIN=206  [scope][client nonce]. Replies [server nonce] (32 bytes), or an empty value
//                   when the server has no secret (it cannot prove itself: see auth.hpp).
//   AUTH_PROVE=207  [proof]. Replies [u8 0][server's proof] when the proof holds for the scope;
//                   otherwise [u8 1], and the server closes the connection.
// On a server with a secret, a connection may send only VALIDATE, PING, SERVER_INFO and the two
// AUTH requests until AUTH_PROVE succeeds; anything else (a legacy client included) closes it.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::store::wire {

static_assert(
    std::endian::native == std::endian::little,
    "the TCPStore protocol sends raw host-order scalars; ddprun supports little-endian hosts");

constexpr uint32_t kValidationMagic = 0x3C85F7CE;

enum class Dialect : uint8_t { kUnknown, kLegacy, kModern };

// Every operation, independent of how a dialect numbers it.
enum class Op : uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
  kQueuePush,
  kQueuePop,
  kQueueLen,
  kListKeys,
  kBarrier,
  kWatchKey,         // legacy dialect only: watch one key, legacy event frames
  kWatch,            // extension
  kSetOwned,         // extension
  kKeepAlive,        // extension
  kGetPrefix,        // extension
  kServerInfo,       // extension
  kCompareSetOwned,  // extension
  kAuthBegin,        // extension
  kAuthProve,        // extension
  kServerTime        // extension
};
constexpr size_t kOpCount = static_cast<size_t>(Op::kServerTime) + 1;

constexpr uint8_t kExtWatch = 200;
constexpr uint8_t kExtSetOwned = 201;
constexpr uint8_t kExtKeepAlive = 202;
constexpr uint8_t kExtGetPrefix = 203;
constexpr uint8_t kExtServerInfo = 204;
constexpr uint8_t kExtCompareSetOwned = 205;
constexpr uint8_t kExtAuthBegin = 206;
constexpr uint8_t kExtAuthProve = 207;
// SERVER_TIME's reply: i64, the server's wall clock in µs since the epoch.
constexpr uint8_t kExtServerTime = 208;
constexpr uint8_t kServerInAgent = 1;    // SERVER_INFO flags
constexpr uint8_t kServerNeedsAuth = 2;  // the server has a secret
constexpr uint8_t kServerTellsTime = 4;  // the server answers SERVER_TIME

// Reply bytes.
constexpr uint8_t kCheckReady = 0;
constexpr uint8_t kCheckNotReady = 1;
constexpr uint8_t kStopWaiting = 0;
constexpr uint8_t kWaitCanceled = 1;
constexpr uint8_t kKeepAliveOk = 0;
constexpr uint8_t kAuthAccepted = 0;
constexpr uint8_t kAuthRefused = 1;

// A watch frame: [u8 event][key][old value][new value] (the layout of torch 1.13's watch
// callbacks). A legacy WATCH_KEY is acknowledged by the single byte kRegistered; EXISTING is
// ddprun's snapshot.
enum class WatchEvent : uint8_t {
  kKeyUpdated = 0,
  kKeyCreated = 1,
  kKeyDeleted = 2,
  kRegistered = 3,
  kExisting = 4
};
enum class WatchMode : uint8_t { kKey = 0, kPrefix = 1 };

// Returns the opcode `op` has in `dialect`, or -1 if that dialect lacks it.
int opcode_of(Op op, Dialect dialect);
const char* op_name(Op op);

// One decoded request. Only the fields its operation uses are meaningful.
struct Request {
  Op op = Op::kValidate;
  std::string key;      // the scope of AUTH_BEGIN
  std::string value;    // SET, APPEND, QUEUE_PUSH, SET_OWNED, AUTH nonce and proof; the expected
                        // value of COMPARE_SET
  std::string desired;  // COMPARE_SET
  int64_t number = 0;   // ADD delta, BARRIER world size, KEEPALIVE milliseconds
  uint32_t u32 = 0;     // VALIDATE magic, PING nonce
  uint8_t mode = 0;     // WATCH mode
  std::vector<std::string> keys;    // CHECK, WAIT, MULTI_GET, MULTI_SET
  std::vector<std::string> values;  // MULTI_SET
};

// What a server accepts from one connection. Exceeding any is a protocol error that closes the
// connection; a length is checked when its prefix arrives, before any of its bytes are stored.
struct Limits {
  size_t max_key_bytes = 64 * 1024;
  size_t max_value_bytes = 64 * 1024 * 1024;
  size_t max_keys_per_request = 128 * 1024;
  size_t max_request_bytes = 256 * 1024 * 1024;
};

// Incremental request decoder for one connection. Feed it the connection's bytes in any chunking.
//
//   size_t used = parser.consume(bytes);   // never more than bytes.size()
//   if (parser.failed()) -> close the connection, log parser.error()
//   if (parser.has_request()) -> handle(parser.take_request())
//
// consume() stops after each complete request. It may leave up to 8 bytes unconsumed when they do
// not yet make up a whole scalar (or the dialect cannot be decided yet); the caller presents those
// bytes again, followed by more. Partial string values are consumed and kept, so buffered input
// stays small.
class RequestParser {
 public:
  explicit RequestParser(Limits limits = {});

  size_t consume(std::string_view bytes);
  bool has_request() const { return complete_; }
  Request take_request();
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Failed because the connection began with a TLS handshake record (the peer speaks TLS).
  bool began_tls() const { return began_tls_; }
  Dialect dialect() const { return dialect_; }
  // While on, only the requests a connection may send before it authenticates are accepted, each
  // field at most kHandshakeFieldBytes long; anything else fails at its first byte.
  void handshake_only(bool on) { handshake_only_ = on; }
  static constexpr size_t kHandshakeFieldBytes = 1024;
  // True between requests: no partial request is held.
  bool idle() const { return !complete_ && step_ == 0 && !in_op_; }
  // Bytes of the request under way held so far (a partial request's memory).
  size_t held_bytes() const { return in_op_ ? frame_bytes_ : 0; }

 private:
  // The bytes given to one consume() call, and how far they are read.
  struct Input {
    std::string_view bytes;
    size_t pos = 0;
    size_t available() const { return bytes.size() - pos; }
  };

  // Each reader below returns false when it needs more bytes than `in` holds (then it has taken
  // none of them) or when the request is refused (then failed()).
  bool detect_dialect(std::string_view bytes);
  bool start_request(uint8_t opcode);
  bool read_scalar(Input& in, void* dst, size_t n);
  bool read_field(Input& in);
  // One element (or the count) of a key or key-value list.
  bool read_list_element(Input& in, bool pairs);
  // A string's length prefix, checked against `limit` and against the request's limit.
  bool read_length(Input& in, size_t limit, const char* what, uint64_t& len);
  // Starts filling `target` with the `len` bytes announced by read_length().
  void begin_string(std::string& target, uint64_t len);
  // Takes what `in` holds of the string under way; true when it is finished.
  bool continue_string(Input& in);
  void finish_request();
  bool fail(std::string message);

  Limits limits_;
  Dialect dialect_ = Dialect::kUnknown;
  Request req_;
  bool complete_ = false;
  bool in_op_ = false;
  size_t step_ = 0;  // index into the operation's field layout
  bool list_started_ = false;
  uint64_t remaining_ = 0;    // elements left in a key list
  uint64_t string_left_ = 0;  // bytes still to come of the string being read
  bool in_string_ = false;
  std::string* string_target_ = nullptr;
  size_t frame_bytes_ = 0;
  std::string error_;
  bool began_tls_ = false;
  bool handshake_only_ = false;
};

// Appends the frame of `req` in `dialect` to `out`. Throws std::invalid_argument if the dialect
// lacks the operation.
void encode_request(const Request& req, Dialect dialect, std::string& out);

// Little-endian scalar and length-prefixed writers for replies and requests.
inline void put_u8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
inline void put_u32(std::string& out, uint32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
inline void put_i64(std::string& out, int64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}
inline void put_bytes(std::string& out, std::string_view v) {
  put_i64(out, static_cast<int64_t>(v.size()));
  out.append(v);
}
void put_watch_frame(std::string& out, WatchEvent event, std::string_view key,
                     std::string_view old_value, std::string_view new_value);

}  // namespace ddprun::store::wire
