#include "ddp/init.hpp"

#include <fmt/format.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <csignal>

#include "ddp/errors.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/local_address.hpp"
#include "ddprun/store/store_client.hpp"
#include "gloo_process_group.hpp"
#include "gloo_store.hpp"
#ifdef DDP_WITH_NCCL
#include "nccl_process_group.hpp"
#endif

namespace ddp {
namespace {

std::string key_prefix(const WorkerEnv& env, const InitOptions& o, const char* backend) {
  return fmt::format("ddp/{}/attempt_{}/{}/{}/", env.run_id, env.restart_count, o.group_name,
                     backend);
}

ddprun::store::ClientOptions client_options(const InitOptions& o) {
  ddprun::store::ClientOptions copts;
  copts.timeout = o.timeout;
  return copts;
}

std::unique_ptr<ProcessGroup> init_gloo(const WorkerEnv& env, const InitOptions& o) {
  ddprun::store::StoreClient client(env.master_addr, static_cast<uint16_t>(env.master_port),
                                    client_options(o));
  GlooStore store(client, key_prefix(env, o, "gloo"), o.timeout);
  gloo::transport::tcp::attr attr;
  attr.hostname = o.local_addr.empty()
                      ? ddprun::store::local_address_towards(env.master_addr, env.master_port)
                      : o.local_addr;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
  context->setTimeout(o.timeout);
  context->connectFullMesh(store, device);
  return std::make_unique<GlooProcessGroup>(std::move(context), o.timeout);
}

// Python starts with SIGPIPE ignored, so a torch worker whose peer died gets an error from its
// collective; a C++ worker would be killed by the signal instead, silently, and often before the
// launcher has seen the peer's death that caused it. A handler the program set stays.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

std::unique_ptr<ProcessGroup> init_process_group(Backend backend, const WorkerEnv& env,
                                                 const InitOptions& options) {
  ignore_sigpipe_unless_handled();
  try {
    switch (backend) {
      case Backend::kGloo:
        return init_gloo(env, options);
      case Backend::kNccl: {
#ifdef DDP_WITH_NCCL
        ddprun::store::StoreClient client(env.master_addr, static_cast<uint16_t>(env.master_port),
                                          client_options(options));
        return std::make_unique<NcclProcessGroup>(env, client, key_prefix(env, options, "nccl"),
                                                  options.timeout,
                                                  static_cast<cudaStream_t>(options.cuda_stream));
#else
        throw Error("this libddp was built without CUDA: the NCCL backend is not available");
#endif
      }
    }
  } catch (const ddprun::store::StoreTimeout& e) {
    throw TimeoutError(fmt::format("rank {}: rendezvous of {} ranks timed out: {}", env.rank,
                                   env.world_size, e.what()));
  } catch (const ddprun::store::StoreError& e) {
    throw CommError(fmt::format("rank {}: cannot reach the store at {}:{}: {}", env.rank,
                                env.master_addr, env.master_port, e.what()));
  } catch (const gloo::Exception& e) {
    throw CommError(fmt::format("rank {}: gloo rendezvous failed: {}", env.rank, e.what()));
  }
  throw Error("unknown backend");
}

std::unique_ptr<ProcessGroup> init_process_group(Backend backend, const InitOptions& options) {
  return init_process_group(backend, WorkerEnv::from_environment(), options);
}

}  // namespace ddp
