#!/usr/bin/env bash
# On a machine without a GPU, a worker asking for the NCCL backend fails at once with a message that
# says why, and ddprun's summary shows it. Skipped (77) where a GPU is present: gpu-test.sh covers it.
set -euo pipefail
ddprun=$1
nccl_check=$2  # any program of the SDK that asks for the NCCL backend
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then exit 77; fi
set +e
out=$(timeout 60 "$ddprun" --standalone --nproc_per_node=1 --no_python "$nccl_check" 2>&1)
status=$?
set -e
test "$status" -eq 1 || { echo "exit status $status, expected 1"; echo "$out"; exit 1; }
grep -q "traceback : ddp::CommError: cudaGetDeviceCount" <<<"$out" || { echo "$out"; exit 1; }
echo "NCCL backend without a GPU: a clear error in the summary: passed"
