// Run under `ddprun --standalone --nproc_per_node=2 --no_python peer_loss_check [handler]`: rank 1
// leaves right after joining; rank 0's collectives then fail with CommError, as a torch worker's
// do, instead of SIGPIPE killing it. After init_process_group SIGPIPE is ignored; with `handler`
// the program installs its own first, and init_process_group leaves it. Exits 0 when all held.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ddp/errors.hpp"
#include "ddp/init.hpp"

namespace {

void own_handler(int) {}

}  // namespace

int main(int argc, char** argv) {
  const bool with_handler = argc > 1 && std::strcmp(argv[1], "handler") == 0;
  if (with_handler) std::signal(SIGPIPE, own_handler);
  ddp::InitOptions options;
  options.timeout = std::chrono::seconds(30);
  auto group = ddp::init_process_group(ddp::Backend::kGloo, options);
  struct sigaction now {};
  ::sigaction(SIGPIPE, nullptr, &now);
  if (now.sa_handler != (with_handler ? own_handler : SIG_IGN)) {
    std::fprintf(stderr, "rank %d: SIGPIPE's disposition is not %s\n", group->rank(),
                 with_handler ? "the program's handler" : "ignored");
    return 1;
  }
  std::vector<float> data(1 << 20, 1.0f);  // 4 MiB: more than the sockets' buffers hold
  group->all_reduce(data.data(), data.size(), ddp::DType::kFloat32, ddp::ReduceOp::kSum);
  if (group->rank() == 1) return 0;  // (its sockets close as it exits)
  for (int i = 0; i < 1000; ++i) {
    try {
      group->all_reduce(data.data(), data.size(), ddp::DType::kFloat32, ddp::ReduceOp::kSum);
    } catch (const ddp::CommError& e) {
      std::printf("rank 0: the peer's loss is an error: %s\n", e.what());
      return 0;
    }
  }
  std::fprintf(stderr, "rank 0: 1000 all-reduces succeeded without the peer\n");
  return 1;
}
