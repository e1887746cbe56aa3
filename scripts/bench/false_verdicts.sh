#!/usr/bin/env bash
# How often the node check and the straggler check name a healthy node under load
# (scripts/bench/false_verdicts.py has the details): every node healthy, a busy loop per core
# meanwhile. There is no reference to run side by side (torchrun has neither check). The last line
# gives the rates.
#   scripts/bench/false_verdicts.sh    (CHECKS=20 node checks, JOBS=3 DDP jobs of STEPS=200 steps,
#                                       LOAD=one busy loop per core)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund ddprun-node-probe >/dev/null
echo "# false verdicts benchmark; $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
exec /usr/bin/python3 scripts/bench/false_verdicts.py build/launcher/ddprun \
  build/rendezvous/store/ddprund "$PWD/scripts/torch2/python" "$PWD" "${CHECKS:-20}" \
  "${JOBS:-3}" "${STEPS:-200}" "${LOAD:-$(nproc)}"
