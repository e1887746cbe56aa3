#!/usr/bin/env bash
# A long fault campaign (tests/chaos/campaign.py): fresh seeds for N minutes on both backends, one
# line per trial, a failing trial's seed and kept logs, and a summary table at the end.
#
#   scripts/chaos.sh --minutes 60 [--backend c10d|etcd|both] [--keep DIR]
#   scripts/chaos.sh --seeds 17,4242 --backend c10d        # replay seeds
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
args=("$@")
[[ " ${args[*]} " == *" --backend "* ]] || args+=(--backend both)
exec /usr/bin/python3 tests/chaos/campaign.py build/launcher/ddprun build/rendezvous/store/ddprund "${args[@]}"
