#pragma once
// A live job's state read from its rendezvous store without joining it (`ddprun status`): one read
// of the job's keys, interpreted by the layout the handlers write.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/rendezvous/rendezvous_config.hpp"

namespace ddprun::rendezvous {

struct NodeStatus {
  std::string id;  // a node rank (static) or host_pid_nonce (elastic)
  std::string host;
  int nproc = 0;
  int node_rank = -1;                  // -1: not in the current round (a spare)
  int first_rank = 0, last_rank = -1;  // its global ranks in the current round
  bool present = true;                 // its agent is in the job now (false: it left or died)
  std::optional<int64_t> since_ms;     // when its agent joined (wall clock)
  std::string checkpoints;             // its agent's account of its checkpoints (JSON); "" none
  std::string last_restart;            // its agent's last restart's phases (JSON); "" none
};

struct JobStatus {
  bool found = false;    // the store holds keys of this run id
  int round = -1;        // the latest round formed (-1: none yet)
  bool forming = false;  // a newer round is being formed
  int world_size = 0;
  int restarts = 0;
  std::optional<int> max_restarts;  // as the job's first node fixed it
  std::string nnodes;               // "N" or "MIN:MAX", as fixed by the first node
  std::vector<NodeStatus> nodes;    // the current round's, by node rank
  std::vector<NodeStatus> spares;   // present, waiting for a round with room
  std::string leader;               // elastic: the id of the agent that decides the rounds
  std::string leader_host;          // its host, while its presence key is there
  bool closed = false;
  std::string closed_reason;               // "succeeded", "failed", ...
  std::vector<std::string> last_failures;  // each node's failure record of the latest failed round
  std::string node_check;  // the latest node check's verdict (JSON, with its round); "" none
  std::string straggler;   // the latest straggler verdict (JSON, with its round); "" none
};

// Reads the job `c.run_id` from its store (c.backend, endpoint or etcd endpoints, TLS, prefix),
// bounded by c.join_timeout. Throws StoreError when the store cannot be read.
JobStatus read_job_status(const RendezvousConfig& c);

// The interpretation alone, of the job's keys as (key, value) pairs relative to the job's prefix.
JobStatus interpret_job_keys(Backend backend,
                             const std::vector<std::pair<std::string, std::string>>& keys);

}  // namespace ddprun::rendezvous
