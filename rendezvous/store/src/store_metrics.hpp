#pragma once
// A store server's state and counters in Prometheus' text format (ddprund's GET /metrics):
// connections, keys, bytes held, requests by operation, waits pending, connections accepted,
// refused (over --max-connections) and dropped (bad input, slow readers, the memory budget).
#include <string>

#include "ddprun/store/store_server.hpp"

namespace ddprun::store {

std::string store_metrics(StoreServer& server);

}  // namespace ddprun::store
