#!/usr/bin/env bash
# The main job, from a fresh clone: installs what is missing, builds, and trains data-parallel on 2
# worker processes under `ddprun --standalone`:
#   1. train_cpu, a C++ program on ddprun's worker SDK (libddp: Gloo all-reduce, GradientSync), and
#      train_cuda (NCCL) with one worker per GPU where the machine has GPUs;
#   2. examples/ddp_train.py, PyTorch DDP over gloo whose processes rendezvous through ddprun's store.
# Each prints its loss going down and checks that the replicas end bit-identical (exit 1 if not).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun train_cpu
echo "== train_cpu (C++, libddp) under ddprun"
build/launcher/ddprun --standalone --nproc_per_node=2 -t 3 --no_python build/worker_sdk/train_cpu
if ls /dev/nvidia[0-9]* >/dev/null 2>&1 && [[ -d /usr/local/cuda ]]; then
  gpus=$(ls /dev/nvidia[0-9]* | wc -l)
  cmake --build build --target train_cuda
  echo "== train_cuda (C++, libddp over NCCL) under ddprun on $gpus GPU(s)"
  build/launcher/ddprun --standalone --nproc_per_node="$gpus" -t 3 --no_python build/worker_sdk/train_cuda
fi
echo "== examples/ddp_train.py (PyTorch DDP) under ddprun"
PYTHON_EXEC=/usr/bin/python3 build/launcher/ddprun --standalone --nproc_per_node=2 -t 3 \
  examples/ddp_train.py
