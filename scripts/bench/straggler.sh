#!/usr/bin/env bash
# A node that turns slow while a real DDP job trains (scripts/bench/straggler.py has the details):
# 3 nodes x 1 rank in network namespaces, node 2's worker under a 40% CPU quota from step 25; the
# steps until ddprun names it, the time the slow node costs with --straggler_action=report and
# =replace (a spare waiting) against torch 2.14's torchrun (which runs on at the slow speed), and
# the check's overhead on a healthy job. The last line gives the ratios against the targets.
#   scripts/bench/straggler.sh    (RUNS=3, STEPS=150)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
exec /usr/bin/python3 scripts/bench/straggler.py build/launcher/ddprun build/rendezvous/store/ddprund \
  "$PWD/scripts/torch2/python" "$PWD" "${RUNS:-3}" "${STEPS:-150}"
