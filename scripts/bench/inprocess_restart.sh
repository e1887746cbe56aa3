#!/usr/bin/env bash
# In-process restart (--restart_mode=in_process) against ddprun's process restart (--preload) and
# torch 2.14's torchrun, on a job under torch.compile (scripts/bench/inprocess_restart.py has the
# details): the time from a rank's failure until the job is back at the failed step. Inductor
# compiles C++ on the CPU: the torch 2.14 root gets g++ and libtorch-dev (Debian packages) first.
# The last line gives the ratios against the targets.
#   scripts/bench/inprocess_restart.sh    (RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
root=$(bash scripts/torch2-root.sh)
if [[ ! -e $root/usr/include/torch/csrc/inductor/cpp_prefix.h || ! -x $root/usr/bin/g++ ]]; then
  chroot "$root" bash -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ libtorch-dev' >&2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
exec /usr/bin/python3 scripts/bench/inprocess_restart.py build/launcher/ddprun \
  "$PWD/scripts/torch2/python" "$PWD" "${RUNS:-3}"
