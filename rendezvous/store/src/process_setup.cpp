#include "ddprun/store/process_setup.hpp"

#include <sys/resource.h>

#include <csignal>

namespace ddprun::store {

void prepare_server_process() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  std::signal(SIGPIPE, SIG_IGN);
}

}  // namespace ddprun::store
