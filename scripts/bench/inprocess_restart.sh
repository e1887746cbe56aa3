#!/usr/bin/env bash
# In-process restart (--restart_mode=in_process) against ddprun's process restart (--preload) and
# torch 2.14's torchrun, on a job under torch.compile (scripts/bench/inprocess_restart.py has the
# details): the time from a rank's failure until the job is back at the failed step. Inductor
# compiles C++ on the CPU with the torch 2.14 root's g++ and torch's headers.
# The last line gives the ratios against the targets.
#   scripts/bench/inprocess_restart.sh    (RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
exec /usr/bin/python3 scripts/bench/inprocess_restart.py build/launcher/ddprun \
  "$PWD/scripts/torch2/python" "$PWD" "${RUNS:-3}"
