#!/usr/bin/env bash
# Rendezvous benchmark: N agents as real processes on this machine, one worker each that records when
# it started. Time = from the last agent's start to the last worker's start (median of RUNS), for the
# c10d backend (--nnodes=N:N, the store in a standalone ddprund; torchrun's c10d store in its first
# agent) and the static backend (node 0 hosting the store). torchrun is torch 2.6's (Debian trixie's,
# through scripts/torch2/python; the headline) and torch 1.13's (Debian bookworm's), run for the N this
# machine holds. The last line states the c10d ratio against torch 2.6 at N=8.
#   scripts/bench/rendezvous.sh            (NS="2 8 32 128 256", TORCHRUN_NS="2 8", RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"2 8 32 128 256"}
TORCHRUN_NS=${TORCHRUN_NS:-"2 8"}
RUNS=${RUNS:-3}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-"bash $(cd .. && pwd)/shared/tools/torchrun-ref"}
TORCHRUN2="$PWD/scripts/torch2/python -m torch.distributed.run"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

one_run() {  # $1 ddprun|torchrun|torchrun2, $2 N, $3 backend; prints ms from the last agent start to the last worker start
  local kind=$1 n=$2 backend=$3 d port store_pid= launcher=$DDPRUN
  [[ $kind == torchrun ]] && launcher="$TORCHRUN --monitor_interval=0.1"
  [[ $kind == torchrun2 ]] && launcher="$TORCHRUN2 --monitor_interval=0.1"
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
      $launcher --nnodes="$n:$n" --nproc_per_node=1 --rdzv_backend=c10d --rdzv_id=bench \
        --rdzv_endpoint="127.0.0.1:$port" --rdzv_conf=join_timeout=120 \
        --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK" >/dev/null 2>&1 &
    else
      $launcher --nnodes="$n" --node_rank=$r --nproc_per_node=1 --master_port="$port" \
        --rdzv_conf=join_timeout=120 --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK" \
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
printf '%-6s %13s %13s %13s %13s %13s %13s\n' N 2.6-c10d 1.13-c10d ddprun-c10d 2.6-static \
  1.13-static ddprun-static
for n in $NS; do
  row=()
  for backend in c10d static; do
    t2=- t1=-
    if [[ " $TORCHRUN_NS " == *" $n "* ]]; then
      t2=$(for _ in $(seq "$RUNS"); do one_run torchrun2 "$n" $backend; done | median)
      t1=$(for _ in $(seq "$RUNS"); do one_run torchrun "$n" $backend; done | median)
    fi
    d=$(for _ in $(seq "$RUNS"); do one_run ddprun "$n" $backend; done | median)
    row+=("$t2" "$t1" "$d")
    [[ $n == 8 && $backend == c10d ]] && { d8=$d; t8=$t2; }
  done
  printf '%-6s %13s %13s %13s %13s %13s %13s\n' "$n" "${row[@]}"
done
echo "rendezvous (c10d): at N=8 ddprun takes ${d8} ms, torch 2.6's torchrun ${t8} ms" \
  "($(awk -v a="$t8" -v b="$d8" 'BEGIN{printf "%.0f", a/b}')x)"
