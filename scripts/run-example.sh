#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds ddprun, and trains a real model
# data-parallel on 2 worker processes under `ddprun --standalone` (PyTorch DDP over gloo, whose
# processes rendezvous through ddprun's own store).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun
PYTHON_EXEC=/usr/bin/python3 exec build/launcher/ddprun --standalone --nproc_per_node=2 -t 3 \
  examples/ddp_train.py
