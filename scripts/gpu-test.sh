#!/usr/bin/env bash
# The checks that need a GPU (scripts/test.sh runs everything else, on any machine).
#
#   scripts/gpu-test.sh            build here (CUDA on) and run the GPU checks on this machine
#   scripts/gpu-test.sh bundle     build here and gather the programs and the shared libraries they
#                                  need beyond glibc into .gpu-bundle/, for a bare, offline GPU machine
#   scripts/gpu-test.sh run        on the GPU machine: run the GPU checks from .gpu-bundle/, each one
#                                  whatever became of the others, and a line per check at the end
#   scripts/gpu-test.sh run CHECK… only those (names from all_checks below, such as
#                                  node_check_on_gpu), to rerun them within a short GPU lease
#
# The checks, under ddprun with one worker per GPU: the SDK's collectives and GradientSync checks
# (the ones CI runs on Gloo) on NCCL and device buffers written late on the default stream, and
# train_cuda; more workers than GPUs failing with NCCL's reason, in bounded time; with that
# machine's python3 and torch 2.x: examples/ddp_train.py over NCCL under ddprun, the TCPStore
# client (modern dialect) against ddprund, and gloo all-reduce through ddprund; --nproc_per_node=gpu
# and --numa-binding against what torch computes on that machine; the NVML health check on its GPUs;
# --preload=auto workers on CUDA, before and after a restart; in-memory checkpoints of CUDA tensors
# (plain and through torch.distributed.checkpoint); --node_check's compute probe on the GPU (cuBLAS),
# two nodes of one job taking turns on it; the straggler check's step times of DDP over NCCL
# (bit-identical training, the overhead).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-local}
bundle=.gpu-bundle
programs=(build/launcher/ddprun build/launcher/ddprun-node-probe build/rendezvous/store/ddprund
  build/worker_sdk/nccl_collectives_check build/worker_sdk/nccl_gradient_sync_check
  build/worker_sdk/train_cuda build/tests/gpu_health_test)

build() {
  bash scripts/install-deps.sh
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_WITH_CUDA=ON >/dev/null
  cmake --build build --target "${programs[@]##*/}"
}

# --nproc_per_node=gpu starts as many workers as torch.cuda.device_count() sees, whatever
# CUDA_VISIBLE_DEVICES says (tests/unit/visible_gpus_test.cpp holds the rules measured here).
gpu_count_matches_torch() {  # $1: folder holding ddprun
  local uuid want got failed=0
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  echo "== --nproc_per_node=gpu against torch.cuda.device_count() for CUDA_VISIBLE_DEVICES values"
  for v in unset 0 0,0 '' -1 0,-1 1 1,0 0,1 +0 ' 0' 00 0x abc 0,abc gpu0 "$uuid" "${uuid:0:8}" \
    "$uuid,0" "0,$uuid" GPU-ffffffff; do
    local env=(env CUDA_VISIBLE_DEVICES="$v")
    [[ $v == unset ]] && env=(env -u CUDA_VISIBLE_DEVICES)
    want=$("${env[@]}" python3 -c 'import torch; print(torch.cuda.device_count())')
    got=$("${env[@]}" "$1/ddprun" --nproc_per_node=gpu --master_port=0 --no_python true 2>&1 |
      sed -n 's/.* \([0-9]*\) workers.*/\1/p' | head -1 || true)  # no GPU: ddprun exits 2
    if [[ $want != "${got:-0}" ]]; then
      echo "CUDA_VISIBLE_DEVICES='$v': torch sees $want GPU(s), ddprun starts ${got:-0} workers"
      failed=1
    fi
  done
  [[ $failed == 0 ]] || { echo "gpu-test: --nproc_per_node=gpu differs from torch"; exit 1; }
}

# --numa-binding: each worker's allowed CPUs are those torch.numa.binding computes for its GPU on this
# machine, in every mode (torch 2.9+; on an older torch the check says so and is skipped).
numa_binding_matches_torch() {  # $1: folder holding ddprun
  local mode want got failed=0
  if ! python3 -c 'import torch.numa.binding' 2>/dev/null; then
    echo "== --numa-binding: this torch has no torch.numa.binding, not compared"
    return
  fi
  echo "== --numa-binding against torch.numa.binding, every mode, one worker per GPU"
  for mode in node socket exclusive core-complex; do
    want=$(python3 -c '
import inspect, sys, torch, torch.numa.binding as nb
o = nb.NumaOptions(affinity_mode=nb.AffinityMode(sys.argv[1]))
f = nb._get_logical_cpus_to_bind_to  # its index keyword: gpu_index up to 2.11, device_index later
index = "device_index" if "device_index" in inspect.signature(f).parameters else "gpu_index"
for d in range(torch.cuda.device_count()):
    print(d, nb._get_ranges_str_from_ints(f(**{index: d}, numa_options=o)))
' "$mode" 2>&1 || true)
    got=$("$1/ddprun" --numa-binding="$mode" --nproc_per_node=gpu --master_port=0 --no_python \
      sh -c 'echo "$LOCAL_RANK $(sed -n "s/^Cpus_allowed_list:\t*//p" /proc/self/status)"' 2>&1 |
      grep -E '^[0-9]+ ' | sort -n || true)
    echo "$mode: $(echo "$got" | tr '\n' ';')"
    if [[ $want != "$got" ]]; then
      echo "--numa-binding=$mode: torch binds [$want], ddprun bound [$got]"
      failed=1
    fi
  done
  [[ $failed == 0 ]] || { echo "gpu-test: --numa-binding differs from torch"; exit 1; }
}

# --preload=auto: workers forked from the warm interpreter initialise CUDA and all-reduce over NCCL,
# and after a worker that used CUDA failed, the restarted ones are still forked warm.
preload_forks_cuda_workers() {  # $1: folder holding ddprun
  local out status=0 gpus
  gpus=$(nvidia-smi -L | wc -l)
  echo "== --preload=auto: warm workers on CUDA over NCCL, before and after a restart"
  out=$(timeout 180 "$1/ddprun" --standalone --nproc_per_node=gpu --max_restarts=1 --preload=auto \
    tests/gpu/preload_cuda_worker.py 2>&1) || status=$?
  grep -E 'attempt [0-9]|--preload' <<<"$out" || true
  if [[ $status != 0 ]] || ! grep -q -- '--preload: workers start from a warm interpreter' <<<"$out" ||
    grep -q -- '--preload: workers start cold' <<<"$out" ||
    [[ $(grep -c 'attempt 1 rank .* warm=True .*all_reduce_ok=True' <<<"$out") != "$gpus" ]]; then
    echo "$out"
    echo "gpu-test: --preload did not fork CUDA workers warm (exit status $status)"
    exit 1
  fi
}

# In-memory checkpoints of CUDA tensors: saved, the worker SIGKILLed, restored on the GPU bit for
# bit by the restarted worker; a 1 GiB save and load timed against a plain copy to host memory.
checkpoint_holds_cuda_tensors() {  # $1: folder holding ddprun
  echo "== ddprun.checkpoint with CUDA tensors, across a worker's SIGKILL"
  timeout 300 "$1/ddprun" --standalone --nproc_per_node=1 --max_restarts=1 \
    tests/gpu/checkpoint_cuda_worker.py
  echo "== torch.distributed.checkpoint of CUDA tensors in memory, across a worker's SIGKILL"
  timeout 300 "$1/ddprun" --standalone --nproc_per_node=1 --max_restarts=1 \
    tests/gpu/checkpoint_dcp_cuda_worker.py
}

# --node_check on a GPU machine: the probe's cuBLAS kernel alone, then a 2-node job (both nodes on
# this machine, so on its GPU 0 in turn) whose check runs that kernel and keeps neither node out.
node_check_on_gpu() {  # $1: folder holding ddprun
  local out port
  out=$(mktemp -d)
  echo "== --node_check: the compute probe with cuBLAS on GPU 0, and a 2-node job's check"
  "$1/ddprund" --host 127.0.0.1 --port 0 --log-level warn >"$out/port" &
  local store=$!
  trap "kill $store 2>/dev/null || true" EXIT  # (expanded now: the check's subshell may end early)
  for _ in $(seq 100); do [[ -s $out/port ]] && break; sleep 0.05; done
  port=$(head -1 "$out/port")
  timeout 60 "$1/ddprun-node-probe" --rank 0 --nodes 1 --store "127.0.0.1:$port" --run gpu \
    --round 0 --report "$out/report" --timeout-ms 30000 --gpu 0
  kill "$store"
  cat "$out/report"
  grep -q '^compute gpu ' "$out/report" || { echo "gpu-test: the probe did not run on the GPU"; exit 1; }
  port=$((20000 + RANDOM % 10000))
  for r in 0 1; do
    timeout 120 "$1/ddprun" --nnodes=2 --node_rank=$r --nproc_per_node=1 --master_addr=127.0.0.1 \
      --master_port=$port --node_check --event_log="$out/events.jsonl" --no_python true \
      >"$out/node.$r.log" 2>&1 &
  done
  wait
  grep 'node check' "$out/node.0.log" || true
  grep -q '"event":"node_check".*"compute_kind":"gpu"' "$out/events.jsonl" &&
    grep -q 'node check: 2 nodes within 2x' "$out/node.0.log" ||
    { cat "$out"/node.*.log; echo "gpu-test: --node_check did not pass on the GPU"; exit 1; }
}

# The SDK on NCCL under ddprun, one worker per GPU, then one worker too many.
sdk_collectives() {  # $1: folder holding the programs
  local gpus out status run
  gpus=$(nvidia-smi -L | wc -l)
  run=("$1/ddprun" --standalone --nproc_per_node="$gpus" --no_python)
  echo "== NCCL backend: every collective, dtype and reduction at 0, 1, odd and 64 MiB"
  timeout 300 "${run[@]}" "$1/nccl_collectives_check" --with-64mib
  echo "== NCCL backend: GradientSync"
  timeout 120 "${run[@]}" "$1/nccl_gradient_sync_check"
  echo "== train_cuda"
  timeout 120 "${run[@]}" "$1/train_cuda" 200
  echo "== $((gpus + 1)) workers on $gpus GPU(s): a clear error, in bounded time"
  status=0
  out=$(timeout 120 "$1/ddprun" --standalone --nproc_per_node=$((gpus + 1)) --no_python \
    "$1/nccl_collectives_check" 2>&1) || status=$?
  echo "$out" | grep -E 'traceback' | head -2
  [[ $status == 1 ]] || { echo "gpu-test: exit status $status, expected 1"; exit 1; }
  grep -q 'traceback : ddp::CommError: NCCL communicator creation failed: .*Duplicate GPU' <<<"$out" ||
    { echo "gpu-test: the summary does not give NCCL's reason"; echo "$out"; exit 1; }
}

nvml_health() {  # $1: folder holding the programs
  echo "== the built-in health check: NVML reads every GPU, and finds them healthy"
  "$1/gpu_health_test"
}

torch_ddp_over_nccl() {  # $1: folder holding ddprun
  echo "== torch $(python3 -c 'import torch; print(torch.__version__)') DDP over NCCL under ddprun (--nproc_per_node=gpu)"
  timeout 180 "$1/ddprun" --standalone --nproc_per_node=gpu examples/ddp_train.py --backend nccl
}

step_times_over_nccl() {  # $1: folder holding ddprun (unused: the package comes from python/)
  echo "== the straggler check's step times: DDP over NCCL, timed against not"
  timeout 300 python3 tests/gpu/step_times_nccl.py "$PWD/python"
}

inprocess_restart_over_nccl() {  # $1: folder holding ddprun
  echo "== in-process restart over NCCL: the process group aborted and made again, CUDA kept"
  timeout 400 python3 tests/gpu/inprocess_nccl.py "$1/ddprun"
}

torch_store_interop() {  # $1: folder holding ddprund
  echo "== torch $(python3 -c 'import torch; print(torch.__version__)') TCPStore client against ddprund"
  timeout 120 python3 tests/interop/torch_store_ops.py "$1/ddprund"
  timeout 120 python3 tests/interop/torch_gloo_all_reduce.py "$1/ddprund"
}

# Every check, in this order (the newest and quickest first, so that a short lease sees them).
all_checks=(sdk_collectives nvml_health preload_forks_cuda_workers checkpoint_holds_cuda_tensors
  node_check_on_gpu inprocess_restart_over_nccl step_times_over_nccl torch_ddp_over_nccl
  numa_binding_matches_torch torch_store_interop gpu_count_matches_torch)

# Runs the checks named (all of them by default), each in a subshell of its own under set -e, each
# whatever became of the others, and ends with one line per check: its result and its seconds.
checks() {  # $1: folder holding the programs, then the checks' names
  local bin=$1 check began status failed=0 summary=()
  shift
  (($#)) || set -- "${all_checks[@]}"
  for check in "$@"; do
    [[ " ${all_checks[*]} " == *" $check "* ]] ||
      { echo "gpu-test: no check '$check' (one of: ${all_checks[*]})" >&2; exit 2; }
  done
  echo "== $(nvidia-smi -L | wc -l) GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  for check in "$@"; do
    began=$SECONDS
    status=0
    set +e
    (set -e; "$check" "$bin")
    status=$?
    set -e
    [[ $status == 0 ]] || failed=1
    summary+=("$(printf '%-32s %s %4d s' "$check" "$([[ $status == 0 ]] && echo passed || echo "FAILED ($status)")" $((SECONDS - began)))")
  done
  printf 'gpu-test: %s\n' "${summary[@]}"
  [[ $failed == 0 ]] || { echo "gpu-test: failed"; exit 1; }
  echo "gpu-test: passed"
}

case $mode in
  local)
    build
    mkdir -p "$bundle/bin"
    cp "${programs[@]}" "$bundle/bin/"
    checks "$bundle/bin" "${@:2}"
    ;;
  bundle)
    build
    rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
    cp "${programs[@]}" "$bundle/bin/"
    # Everything they load except glibc's own libraries, the GPU driver, and NCCL (about 200 MB;
    # torch 2.x on the GPU machine ships a libnccl.so.2 of the same ABI, used at run time).
    ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u |
      grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libcuda|libnccl)\.so' |
      xargs -I{} cp -L {} "$bundle/lib/"
    # Without debug information: the bundle travels to the GPU machine under a size limit.
    strip --strip-debug "$bundle"/bin/* "$bundle"/lib/*
    du -sh "$bundle"
    ;;
  run)
    # NCCL and cuBLAS from the machine's torch (the wheel's layout differs between CUDA 12 and 13
    # builds).
    packages=$(python3 -c 'import site; print("\n".join(site.getsitepackages()))')
    nccl=$(dirname "$(xargs -I{} find {} -name 'libnccl.so.2' <<<"$packages" 2>/dev/null | head -1)")
    [[ -f $nccl/libnccl.so.2 ]] || { echo "gpu-test: no libnccl.so.2 in python3's packages" >&2; exit 1; }
    cublas=$(dirname "$(xargs -I{} find {} -name 'libcublas.so.1*' <<<"$packages" 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH=$PWD/$bundle/lib:$nccl:$cublas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    checks "$bundle/bin" "${@:2}"
    ;;
  *)
    echo "usage: scripts/gpu-test.sh [bundle|run]" >&2
    exit 2
    ;;
esac
