#!/usr/bin/env bash
# Launch benchmark: ddprun against torchrun (Debian's torch 1.13 via shared/tools/torchrun-ref, or
# $TORCHRUN) on the same machine in one run. Ratios are the evidence; the last line states the headline.
#   1. whole-job wall time of `--standalone --nproc_per_node=N --no_python /bin/true`, N = 1, 8, 64
#      (hyperfine; torchrun with --monitor_interval 0.1);
#   2. restart latency: from a worker's failure (its own timestamp) to every worker of the restarted
#      group running (theirs), with 4 workers and --max_restarts 1. Median of RUNS runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-"bash $(cd .. && pwd)/shared/tools/torchrun-ref"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }

echo "# launch benchmark: ddprun vs torchrun (torch 1.13); $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "## whole job: --standalone --nproc_per_node=N --no_python /bin/true (median, hyperfine)"
printf '%-4s %12s %12s %8s\n' N torchrun ddprun speedup
for n in 1 8 64; do
  hyperfine -N -w 2 -r $((RUNS * 4)) --export-json "$work/d.json" \
    "$DDPRUN --standalone --nproc_per_node=$n --no_python /bin/true" >/dev/null 2>&1
  hyperfine -w 1 -r "$RUNS" --export-json "$work/t.json" \
    "$TORCHRUN --standalone --nproc_per_node=$n --monitor_interval 0.1 --no_python /bin/true" \
    >/dev/null 2>&1
  d=$(python3 -c "import json; print(json.load(open('$work/d.json'))['results'][0]['median'])")
  t=$(python3 -c "import json; print(json.load(open('$work/t.json'))['results'][0]['median'])")
  printf '%-4s %10.1f ms %9.2f ms %7sx\n' "$n" "$(awk -v x="$t" 'BEGIN{print x*1000}')" \
    "$(awk -v x="$d" 'BEGIN{print x*1000}')" "$(ratio "$t" "$d")"
  [[ $n == 8 ]] && speedup8=$(ratio "$t" "$d")
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
echo "## restart latency: worker failure -> all 4 restarted workers running (median of $RUNS)"
t=$(for _ in $(seq "$RUNS"); do restart_ms $TORCHRUN --monitor_interval 0.1; done | median)
d=$(for _ in $(seq "$RUNS"); do restart_ms "$DDPRUN"; done | median)
echo "torchrun ${t} ms, ddprun ${d} ms, speedup $(ratio "$t" "$d")x"
echo
echo "launch: ddprun is ${speedup8}x faster than torchrun for a whole 8-worker job; restart in ${d} ms vs ${t} ms"
