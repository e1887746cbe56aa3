#!/usr/bin/env bash
# Launch benchmark: ddprun against torchrun of torch 2.14 (Debian forky's, through scripts/torch2/python;
# the headline) and torch 1.13 (Debian bookworm's, via scripts/torch1/torchrun, or $TORCHRUN) on the
# same machine in one run. Ratios are the evidence; the last line states the headline.
#   1. whole-job wall time of `--standalone --nproc_per_node=N --no_python /bin/true`, N = 1, 8, 64
#      (hyperfine; torchrun with --monitor_interval 0.1), beside the machine's floor: a shell that
#      forks and reaps the same N processes. ddprun/floor says how close to the limit ddprun is;
#   2. restart latency: from a worker's failure (its own timestamp) to every worker of the restarted
#      group running (theirs), with 4 workers and --max_restarts 1. Median of RUNS runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-$PWD/scripts/torch1/torchrun}
TORCHRUN2="$PWD/scripts/torch2/python -m torch.distributed.run"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }

hyperfine_ms() {  # $1: runs, $2: command; prints the median in ms
  hyperfine -N -w 1 -r "$1" --export-json "$work/h.json" "$2" >/dev/null 2>&1
  python3 -c "import json; print(json.load(open('$work/h.json'))['results'][0]['median'] * 1000)"
}

echo "# launch benchmark: ddprun vs torchrun (torch 2.14 and 1.13); $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "## whole job: --standalone --nproc_per_node=N --no_python /bin/true (median ms, hyperfine)"
printf '%-4s %13s %13s %10s %10s %9s %12s\n' N "torchrun 2.14" "torchrun 1.13" ddprun floor \
  "vs 2.14" "ddprun/floor"
for n in 1 8 64; do
  t2=$(hyperfine_ms "$RUNS" "$TORCHRUN2 --standalone --nproc_per_node=$n --monitor_interval 0.1 --no_python /bin/true")
  t1=$(hyperfine_ms "$RUNS" "$TORCHRUN --standalone --nproc_per_node=$n --monitor_interval 0.1 --no_python /bin/true")
  d=$(hyperfine_ms $((RUNS * 4)) "$DDPRUN --standalone --nproc_per_node=$n --no_python /bin/true")
  f=$(hyperfine_ms $((RUNS * 4)) "bash -c 'for i in \$(seq $n); do /bin/true & done; wait'")
  printf '%-4s %13.1f %13.1f %10.2f %10.2f %8sx %11sx\n' "$n" "$t2" "$t1" "$d" "$f" \
    "$(ratio "$t2" "$d")" "$(ratio "$d" "$f")"
  if [[ $n == 8 ]]; then
    speedup8=$(ratio "$t2" "$d")
    floor8=$(ratio "$d" "$f")
  fi
done

restart_ms() {  # $@: launcher command; prints the restart latency of one run in ms
  local d
  d=$(mktemp -d -p "$work")
  "$@" --standalone --nproc_per_node=4 --max_restarts=1 --no_python \
    "$PWD/scripts/bench/restart_probe.sh" "$d" >/dev/null 2>&1
  python3 - "$d" <<'PY'
import glob, sys
d = sys.argv[1]
fail = int(open(f"{d}/fail").read())
starts = [int(open(p).read()) for p in glob.glob(f"{d}/start.*")]
assert len(starts) == 4, starts
print(f"{(max(starts) - fail) / 1e6:.2f}")
PY
}
echo
echo "## restart latency: worker failure -> all 4 restarted workers running (median ms of $RUNS)"
t2=$(for _ in $(seq "$RUNS"); do restart_ms $TORCHRUN2 --monitor_interval 0.1; done | median)
t1=$(for _ in $(seq "$RUNS"); do restart_ms $TORCHRUN --monitor_interval 0.1; done | median)
d=$(for _ in $(seq "$RUNS"); do restart_ms "$DDPRUN"; done | median)
echo "torchrun 2.14 ${t2} ms, torchrun 1.13 ${t1} ms, ddprun ${d} ms, $(ratio "$t2" "$d")x vs 2.14"
echo
echo "launch: ddprun is ${speedup8}x faster than torch 2.14's torchrun for a whole 8-worker job" \
  "(${floor8}x the fork-and-reap floor); restart in ${d} ms vs ${t2} ms"
