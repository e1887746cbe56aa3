#include "store_metrics.hpp"

#include <cctype>

#include <fmt/format.h>

#include "ddprun/store/metrics_server.hpp"

namespace ddprun::store {

std::string store_metrics(StoreServer& server) {
  const KeyValueStore& store = server.store();
  const StoreServer::Counters& c = server.counters();
  std::string out;
  out += prometheus_sample("ddprund_connections", "gauge", "Open client connections.",
                           static_cast<double>(server.connection_count()));
  out +=
      prometheus_sample("ddprund_keys", "gauge", "Keys held.", static_cast<double>(store.size()));
  out += prometheus_sample(
      "ddprund_owned_keys", "gauge",
      "Keys bound to a connection's lifetime (agents' presence, the leader's claim).",
      static_cast<double>(store.owned_key_count()));
  out += prometheus_sample("ddprund_value_bytes", "gauge", "Bytes of every value held.",
                           static_cast<double>(store.value_bytes()));
  out += prometheus_sample("ddprund_buffered_bytes", "gauge",
                           "Partial requests, queued replies and held input of every connection.",
                           static_cast<double>(server.buffered_bytes()));
  out += prometheus_sample("ddprund_waits_pending", "gauge",
                           "WAIT and BARRIER requests not yet answered.",
                           static_cast<double>(store.waiter_count()));
  bool first = true;
  for (size_t i = 0; i < c.requests.size(); ++i) {
    std::string op = wire::op_name(static_cast<wire::Op>(i));
    for (char& ch : op) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out += prometheus_sample("ddprund_requests_total", "counter",
                             first ? "Requests served, by operation." : "",
                             static_cast<double>(c.requests[i]), fmt::format("op=\"{}\"", op));
    first = false;
  }
  out += prometheus_sample("ddprund_received_bytes_total", "counter", "Bytes read from clients.",
                           static_cast<double>(c.bytes_received));
  out += prometheus_sample("ddprund_sent_bytes_total", "counter",
                           "Bytes written to clients: replies, watch events, wake-ups.",
                           static_cast<double>(c.bytes_sent));
  out += prometheus_sample("ddprund_connections_accepted_total", "counter", "Connections accepted.",
                           static_cast<double>(c.connections_accepted));
  out += prometheus_sample("ddprund_connections_refused_total", "counter",
                           "Connections refused: --max-connections were open.",
                           static_cast<double>(c.connections_refused));
  out += prometheus_sample("ddprund_connections_dropped_total", "counter",
                           "Connections closed for bad input, a slow reader, a missed keep-alive "
                           "or the memory budget.",
                           static_cast<double>(c.connections_dropped));
  return out;
}

}  // namespace ddprun::store
