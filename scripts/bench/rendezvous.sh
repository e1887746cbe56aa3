#!/usr/bin/env bash
# Rendezvous benchmark: N agents as real processes on this machine, one worker each that records when
# it started. Time = from the last agent's start to the last worker's start (median of RUNS), for the
# c10d backend (--nnodes=N:N, the store in a standalone ddprund; torchrun's c10d store in its first
# agent) and the static backend (node 0 hosting the store). torchrun is Debian's torch 1.13, run for the
# N this machine holds. The last line states the c10d ratio at N=8.
#   scripts/bench/rendezvous.sh            (NS="2 8 32 128 256", TORCHRUN_NS="2 8", RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"2 8 32 128 256"}
TORCHRUN_NS=${TORCHRUN_NS:-"2 8"}
RUNS=${RUNS:-3}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-"bash $(cd .. && pwd)/shared/tools/torchrun-ref"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

one_run() {  # $1 launcher kind, $2 N, $3 backend; prints ms from the last agent start to the last worker start
  local kind=$1 n=$2 backend=$3 d port store_pid=
  d=$(mktemp -d -p "$work")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if [[ $backend == c10d && $kind == ddprun ]]; then
    # Listening before any agent starts (an agent would otherwise host the local endpoint itself).
    build/rendezvous/ddprund --host 127.0.0.1 --port 0 --log-level error >"$d/store.port" &
    store_pid=$!
    until [[ -s $d/store.port ]]; do kill -0 "$store_pid"; sleep 0.01; done
    port=$(head -1 "$d/store.port")
  fi
  local pids=()
  for ((r = n - 1; r >= 0; r--)); do
    if [[ $backend == c10d ]]; then
      local launcher=$DDPRUN
      [[ $kind == torchrun ]] && launcher="$TORCHRUN --monitor_interval=0.1"
      $launcher --nnodes="$n:$n" --nproc_per_node=1 --rdzv_backend=c10d --rdzv_id=bench \
        --rdzv_endpoint="127.0.0.1:$port" --rdzv_conf=join_timeout=120 \
        --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK" >/dev/null 2>&1 &
    elif [[ $kind == ddprun ]]; then
      $DDPRUN --nnodes="$n" --node_rank=$r --nproc_per_node=1 --master_port="$port" \
        --rdzv_conf=join_timeout=120 --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK" \
        >/dev/null 2>&1 &
    else
      $TORCHRUN --nnodes="$n" --node_rank=$r --nproc_per_node=1 --master_port="$port" \
        --monitor_interval=0.1 --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK" \
        >/dev/null 2>&1 &
    fi
    pids+=($!)
  done
  date +%s%N >"$d/last_agent"
  wait "${pids[@]}"
  [[ -n $store_pid ]] && kill "$store_pid"
  python3 - "$d" "$n" <<'PY'
import glob, sys
d, n = sys.argv[1], int(sys.argv[2])
starts = [int(open(p).read()) for p in glob.glob(f"{d}/w.*")]
assert len(starts) == n, (len(starts), n)
print(f"{(max(starts) - int(open(f'{d}/last_agent').read())) / 1e6:.1f}")
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "# rendezvous benchmark: last agent started -> every worker started (ms, median of $RUNS)"
printf '%-6s %14s %14s %14s %14s\n' N torchrun-c10d ddprun-c10d torchrun-static ddprun-static
for n in $NS; do
  row=()
  for backend in c10d static; do
    t=-
    if [[ " $TORCHRUN_NS " == *" $n "* ]]; then
      t=$(for _ in $(seq "$RUNS"); do one_run torchrun "$n" $backend; done | median)
    fi
    d=$(for _ in $(seq "$RUNS"); do one_run ddprun "$n" $backend; done | median)
    row+=("$t" "$d")
    [[ $n == 8 && $backend == c10d ]] && { d8=$d; t8=$t; }
  done
  printf '%-6s %14s %14s %14s %14s\n' "$n" "${row[@]}"
done
echo "rendezvous (c10d): at N=8 ddprun takes ${d8} ms, torchrun ${t8} ms ($(awk -v a="$t8" -v b="$d8" 'BEGIN{printf "%.0f", a/b}')x)"
