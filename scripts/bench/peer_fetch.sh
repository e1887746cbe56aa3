#!/usr/bin/env bash
# A lost node's restore transfer on its own, without a job around it: one rank's slot fetched from
# another agent's checkpoint service on loopback, into new pages and over the pages a waiting spare
# holds for it (restore_room.hpp), against plain TCP transfers of the same bytes
# into a buffer (the link), into a new /dev/shm file, and into one whose pages were allocated
# beforehand (scripts/bench/peer_fetch_bench.cpp). checkpoint_node_loss.sh measures the same
# fetch inside a real job's restore. The last line gives the ratios (target: the fetch over a
# spare's pages within 2x of the link).
#   scripts/bench/peer_fetch.sh    (MIB=240; ROUNDS=9; MAC=1: the copy carries its MAC)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target peer_fetch_bench >/dev/null
build/scripts/bench/peer_fetch_bench "${MIB:-240}" "${ROUNDS:-9}" "$([ "${MAC:-0}" = 1 ] && echo mac || echo plain)"
