#!/usr/bin/env bash
# The checks that need a GPU (scripts/test.sh runs everything else, on any machine).
#
#   scripts/gpu-test.sh            build here (CUDA on) and run the GPU checks on this machine
#   scripts/gpu-test.sh bundle     build here and gather the programs and the shared libraries they
#                                  need beyond glibc into .gpu-bundle/, for a bare, offline GPU machine
#   scripts/gpu-test.sh run        on the GPU machine: run the GPU checks from .gpu-bundle/
#
# The checks: the NCCL backend (every collective on device buffers, GradientSync on device buffers)
# and train_cuda under ddprun with one worker per GPU; torch 2.x's TCPStore client (modern dialect)
# against ddprund, and torch gloo all-reduce through ddprund, with that machine's python3.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-local}
bundle=.gpu-bundle

build() {
  bash scripts/install-deps.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_WITH_CUDA=ON >/dev/null
  cmake --build build --target ddprun ddprund nccl_check train_cuda
}

checks() {  # $1: folder holding ddprun, ddprund, nccl_check, train_cuda
  local bin=$1 gpus
  gpus=$(nvidia-smi -L | wc -l)
  echo "== $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo "== NCCL backend: every collective and GradientSync on device buffers"
  "$bin/ddprun" --standalone --nproc_per_node="$gpus" --no_python "$bin/nccl_check"
  echo "== train_cuda"
  "$bin/ddprun" --standalone --nproc_per_node="$gpus" --no_python "$bin/train_cuda" 200
  echo "== torch $(python3 -c 'import torch; print(torch.__version__)') TCPStore client against ddprund"
  python3 tests/interop/torch_store_ops.py "$bin/ddprund"
  python3 tests/interop/torch_gloo_all_reduce.py "$bin/ddprund"
  echo "gpu-test: passed"
}

case $mode in
  local)
    build
    mkdir -p "$bundle/bin"
    for p in build/launcher/ddprun build/rendezvous/ddprund build/worker_sdk/nccl_check \
      build/worker_sdk/train_cuda; do cp "$p" "$bundle/bin/"; done
    checks "$bundle/bin"
    ;;
  bundle)
    build
    rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
    progs=(build/launcher/ddprun build/rendezvous/ddprund build/worker_sdk/nccl_check
      build/worker_sdk/train_cuda)
    cp "${progs[@]}" "$bundle/bin/"
    # Everything they load except glibc's own libraries, the GPU driver, and NCCL (about 200 MB;
    # torch 2.x on the GPU machine ships a libnccl.so.2 of the same ABI, used at run time).
    ldd "${progs[@]}" | awk '/=> \// {print $3}' | sort -u |
      grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libnccl)\.so' |
      xargs -I{} cp -L {} "$bundle/lib/"
    du -sh "$bundle"
    ;;
  run)
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))')
    export LD_LIBRARY_PATH=$PWD/$bundle/lib:$nccl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    checks "$bundle/bin"
    ;;
  *)
    echo "usage: scripts/gpu-test.sh [bundle|run]" >&2
    exit 2
    ;;
esac
