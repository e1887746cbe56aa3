#!/usr/bin/env bash
# --node_check's time on this machine for 2, 4 and 8 nodes (each in a network namespace of its
# own, scripts/bench/node_check.py), beside the same jobs without the check. There is no reference
# to run side by side: torchrun has no node check, and DLRover's (about 20 s on healthy nodes, as
# published) needs its Kubernetes master. The last line states the time for 8 nodes.
#   RUNS  jobs per node count and variant (default 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund ddprun-node-probe >/dev/null
echo "# node check benchmark; $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
/usr/bin/python3 scripts/bench/node_check.py build/launcher/ddprun build/rendezvous/store/ddprund \
  "${RUNS:-5}"
