#!/usr/bin/env bash
# The speed of the MAC every checkpoint copy between agents carries where the job has a token
# (GMAC) against the HMAC-SHA256 it replaced and a plain pass over the same bytes: one core, 1 GiB
# in 1 MiB pieces, medians of ROUNDS (scripts/bench/copy_mac_bench.cpp). The last line gives the
# ratios.
#   scripts/bench/copy_mac.sh    (ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target copy_mac_bench >/dev/null
build/scripts/bench/copy_mac_bench "${ROUNDS:-5}"
