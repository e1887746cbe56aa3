// StoreConnection's request handling: one function per family of operations (the session's own,
// writes, reads, waits, queues), dispatched by handle().
#include <stdexcept>

#include <fmt/format.h>

#include "ddprun/store/wall_clock.hpp"
#include "store_connection.hpp"

namespace ddprun::store {
using wire::Op;

bool StoreConnection::handle(wire::Request& req) {
  ++state_->counters.requests[static_cast<size_t>(req.op)];
  if (watch_only_ && req.op != Op::kWatch && req.op != Op::kWatchKey) {
    close(fmt::format("sent {} on a watch connection", wire::op_name(req.op)));
    return false;
  }
  if (!in_scope(req)) {
    close(fmt::format("sent {} outside its scope '{}'", wire::op_name(req.op), scope_));
    return false;
  }
  bool open = true;
  try {
    switch (req.op) {
      case Op::kValidate:
      case Op::kPing:
      case Op::kServerInfo:
      case Op::kServerTime:
      case Op::kWatch:
      case Op::kWatchKey:
      case Op::kKeepAlive:
        open = handle_session(req);
        break;
      case Op::kAuthBegin:
      case Op::kAuthProve:
        open = handle_auth(req);
        break;
      case Op::kSet:
      case Op::kSetOwned:
      case Op::kCompareSet:
      case Op::kCompareSetOwned:
      case Op::kAdd:
      case Op::kAppend:
      case Op::kMultiSet:
      case Op::kDeleteKey:
        handle_write(req);
        break;
      case Op::kGet:
      case Op::kMultiGet:
      case Op::kGetNumKeys:
      case Op::kListKeys:
      case Op::kGetPrefix:
        open = handle_read(req);
        break;
      case Op::kCheck:
      case Op::kWait:
      case Op::kCancelWait:
      case Op::kBarrier:
        handle_wait(req);
        break;
      case Op::kQueuePush:
      case Op::kQueuePop:
      case Op::kQueueLen:
        handle_queue(req);
        break;
    }
  } catch (const std::invalid_argument& e) {
    reply_.clear();
    close(e.what());
    return false;
  }
  if (!open) {
    reply_.clear();
    return false;
  }
  queue_reply();
  if (out_.size() > state_->options.max_pending_output_bytes) {
    close("does not read its replies");
    return false;
  }
  return true;
}

void StoreConnection::queue_reply() {
  out_.append(reply_);
  reply_.clear();
}

bool StoreConnection::handle_session(const wire::Request& req) {
  switch (req.op) {
    case Op::kValidate:
      if (req.u32 != wire::kValidationMagic) {
        close(fmt::format("VALIDATE with the wrong magic number {:#x}", req.u32));
        return false;
      }
      return true;
    case Op::kPing:
      wire::put_u32(reply_, req.u32);
      return true;
    case Op::kServerInfo:
      wire::put_i64(reply_, static_cast<int64_t>(state_->instance));
      wire::put_u8(reply_, (state_->options.in_agent ? wire::kServerInAgent : 0) |
                               (state_->options.secret ? wire::kServerNeedsAuth : 0) |
                               wire::kServerTellsTime);
      return true;
    case Op::kServerTime:
      wire::put_i64(reply_, wall_clock_micros());
      return true;
    case Op::kKeepAlive:
      if (req.number < 0) {
        close(fmt::format("KEEPALIVE with a negative timeout {}", req.number));
        return false;
      }
      keepalive_ = std::chrono::milliseconds(req.number);
      wire::put_u8(reply_, wire::kKeepAliveOk);
      return true;
    default:  // kWatch, kWatchKey
      if (req.op == Op::kWatch && req.mode > static_cast<uint8_t>(wire::WatchMode::kPrefix)) {
        close(fmt::format("WATCH with unknown mode {}", req.mode));
        return false;
      }
      watch_only_ = true;
      state_->store.watch(*this, static_cast<wire::WatchMode>(req.mode), req.key,
                          req.op == Op::kWatchKey);
      return true;
  }
}

void StoreConnection::handle_write(wire::Request& req) {
  KeyValueStore& store = state_->store;
  switch (req.op) {
    case Op::kSet:
      store.set(req.key, std::move(req.value));
      break;
    case Op::kSetOwned:
      store.set(req.key, std::move(req.value), this);
      break;
    case Op::kCompareSet:
      wire::put_bytes(reply_, store.compare_set(req.key, req.value, std::move(req.desired)));
      break;
    case Op::kCompareSetOwned:
      wire::put_bytes(reply_, store.compare_set(req.key, req.value, std::move(req.desired), this));
      break;
    case Op::kAdd:
      wire::put_i64(reply_, store.add(req.key, req.number));
      break;
    case Op::kAppend:
      store.append(req.key, req.value);
      break;
    case Op::kMultiSet:
      for (size_t i = 0; i < req.keys.size(); ++i) store.set(req.keys[i], std::move(req.values[i]));
      break;
    default:  // kDeleteKey
      wire::put_i64(reply_, store.erase(req.key) ? 1 : 0);
      break;
  }
}

bool StoreConnection::handle_read(const wire::Request& req) {
  KeyValueStore& store = state_->store;
  switch (req.op) {
    case Op::kGet:
      if (KeyValueStore::Value v = store.shared(req.key)) {
        wire::put_i64(reply_, static_cast<int64_t>(v->size()));
        queue_reply();
        out_.append(std::move(v));  // by reference when large: no copy on the event loop
      } else if (parser_.dialect() == wire::Dialect::kLegacy) {
        // torch's legacy server drops a client that GETs a missing key; its clients WAIT first.
        close(fmt::format("GET of missing key '{}'", req.key));
        return false;
      } else {
        wire::put_bytes(reply_, {});
      }
      return true;
    case Op::kMultiGet:
      for (const auto& k : req.keys) {
        KeyValueStore::Value v = store.shared(k);
        wire::put_i64(reply_, v ? static_cast<int64_t>(v->size()) : 0);
        queue_reply();
        out_.append(std::move(v));
      }
      return true;
    case Op::kGetNumKeys:
      wire::put_i64(reply_, static_cast<int64_t>(store.size()));
      return true;
    case Op::kListKeys: {
      const auto keys = store.keys();
      wire::put_i64(reply_, static_cast<int64_t>(keys.size()));
      for (const auto& k : keys) wire::put_bytes(reply_, k);
      return true;
    }
    default: {  // kGetPrefix
      const auto entries = store.with_prefix(req.key);
      wire::put_i64(reply_, static_cast<int64_t>(entries.size()));
      for (const auto& [k, v] : entries) {
        wire::put_bytes(reply_, k);
        wire::put_bytes(reply_, v);
      }
      return true;
    }
  }
}

void StoreConnection::handle_wait(const wire::Request& req) {
  KeyValueStore& store = state_->store;
  switch (req.op) {
    case Op::kCheck:
      wire::put_u8(reply_, store.check(req.keys) ? wire::kCheckReady : wire::kCheckNotReady);
      break;
    case Op::kWait:
      if (store.wait(req.keys, *this)) wire::put_u8(reply_, wire::kStopWaiting);
      break;
    case Op::kCancelWait:
      store.cancel_wait(*this);
      wire::put_u8(reply_, wire::kWaitCanceled);
      break;
    default:  // kBarrier
      if (store.barrier(req.key, req.number, *this)) wire::put_u8(reply_, wire::kStopWaiting);
      break;
  }
}

void StoreConnection::handle_queue(wire::Request& req) {
  KeyValueStore& store = state_->store;
  switch (req.op) {
    case Op::kQueuePush:
      store.queue_push(req.key, std::move(req.value));
      break;
    case Op::kQueuePop: {
      auto [len, value] = store.queue_pop(req.key);
      wire::put_i64(reply_, len);
      if (value) wire::put_bytes(reply_, *value);
      break;
    }
    default:  // kQueueLen
      wire::put_i64(reply_, store.queue_len(req.key));
      break;
  }
}

}  // namespace ddprun::store
