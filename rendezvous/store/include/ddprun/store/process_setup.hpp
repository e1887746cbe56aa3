#pragma once
// Process-wide settings for programs that host a store (ddprund, ddprun's agent).

namespace ddprun::store {

// Raises the soft descriptor limit to the hard one (every connection costs a descriptor) and
// ignores SIGPIPE, so that a closed console or peer is an error code, not the death of the process.
// Children started afterwards must restore SIGPIPE's default themselves.
void prepare_server_process();

}  // namespace ddprun::store
