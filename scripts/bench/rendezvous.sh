#!/usr/bin/env bash
# Rendezvous benchmark (static backend, the multi-node backend ddprun has so far): N agents as real
# processes on this machine, node 0 hosting the store, one worker each that records when it started.
# Time = from the last agent's start to the last worker's start (median of RUNS). torchrun (Debian's
# torch 1.13, static backend) beside it for the N this machine holds. The last line states the ratio.
#   scripts/bench/rendezvous.sh            (NS="2 8 32 128 256", TORCHRUN_NS="2 8", RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"2 8 32 128 256"}
TORCHRUN_NS=${TORCHRUN_NS:-"2 8"}
RUNS=${RUNS:-3}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-"bash $(cd .. && pwd)/shared/tools/torchrun-ref"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

one_run() {  # $1 launcher kind, $2 N; prints ms from the last agent start to the last worker start
  local kind=$1 n=$2 d port
  d=$(mktemp -d -p "$work")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local pids=()
  for ((r = n - 1; r >= 0; r--)); do
    if [[ $kind == ddprun ]]; then
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
  python3 - "$d" "$n" <<'PY'
import glob, sys
d, n = sys.argv[1], int(sys.argv[2])
starts = [int(open(p).read()) for p in glob.glob(f"{d}/w.*")]
assert len(starts) == n, (len(starts), n)
print(f"{(max(starts) - int(open(f'{d}/last_agent').read())) / 1e6:.1f}")
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "# rendezvous benchmark (static backend): last agent started -> every worker started (ms, median of $RUNS)"
printf '%-6s %12s %12s\n' N torchrun ddprun
for n in $NS; do
  d=$(for _ in $(seq "$RUNS"); do one_run ddprun "$n"; done | median)
  t=-
  [[ " $TORCHRUN_NS " == *" $n "* ]] && t=$(for _ in $(seq "$RUNS"); do one_run torchrun "$n"; done | median)
  printf '%-6s %12s %12s\n' "$n" "$t" "$d"
  [[ $n == 8 ]] && { d8=$d; t8=$t; }
done
echo "rendezvous (static): at N=8 ddprun takes ${d8} ms, torchrun ${t8} ms ($(awk -v a="$t8" -v b="$d8" 'BEGIN{printf "%.0f", a/b}')x)"
