#pragma once
// The defaults of a job's timeouts (torchrun's where it has one), in their one home: both job-store
// backends' specs and the rendezvous configuration start from these.
#include <chrono>

namespace ddprun::rendezvous {

// How long a node waits for a round to admit it (rdzv_conf join_timeout).
inline constexpr std::chrono::milliseconds kDefaultJoinTimeout{600'000};
// How long a silent node stays a member (rdzv_conf heartbeat_timeout).
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{5'000};
// How long a store that went away is waited for, workers running (rdzv_conf reconnect_timeout).
inline constexpr std::chrono::milliseconds kDefaultReconnectTimeout{30'000};

}  // namespace ddprun::rendezvous
