#!/usr/bin/env bash
# Store benchmark: ddprund against torch's own TCPStore server (Debian's torch 1.13, legacy dialect),
# side by side in one run on this machine. Medians of RUNS runs; ratios are the evidence (absolute
# numbers on a shared 2-core machine are noise). The last line states the headline ratio.
#
#   scripts/bench/store.sh            (RUNS=3 SECONDS_PER_RUN=2 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
SECS=${SECONDS_PER_RUN:-2}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprund store_load >/dev/null
LOAD=build/scripts/bench/store_load
PY=/usr/bin/python3
ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start_ddprund NAME / start_torch NAME: a fresh server; sets ${NAME}_PORT and ${NAME}_PID.
start_ddprund() {
  build/rendezvous/ddprund --host 127.0.0.1 --port 0 --log-level warn >"$work/$1.port" 2>"$work/$1.log" &
  local pid=$!
  pids+=("$pid")
  until [[ -s "$work/$1.port" ]]; do kill -0 "$pid"; sleep 0.05; done
  printf -v "${1}_PORT" '%s' "$(head -1 "$work/$1.port")"
  printf -v "${1}_PID" '%s' "$pid"
}
start_torch() {
  mkfifo "$work/$1.stdin"
  $PY scripts/bench/torch_store_server.py <"$work/$1.stdin" >"$work/$1.port" 2>"$work/$1.log" &
  local pid=$!
  pids+=("$pid")
  exec {fd}>"$work/$1.stdin"  # held open: the server runs until this script exits
  until [[ -s "$work/$1.port" ]]; do kill -0 "$pid"; sleep 0.05; done
  printf -v "${1}_PORT" '%s' "$(head -1 "$work/$1.port")"
  printf -v "${1}_PID" '%s' "$pid"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
runs() { for _ in $(seq "$RUNS"); do "$@"; done | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

start_ddprund dd
start_torch tt
echo "# store benchmark: ddprund vs torch 1.13 TCPStore server; median of $RUNS runs of ${SECS}s"
echo "# machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "## torch's Python client, set/get/add of 64-byte values (ops/s, all processes together)"
printf '%-10s %12s %12s %8s\n' processes torch ddprund ratio
for procs in 1 4; do
  t=$(runs $PY scripts/bench/torch_client_load.py --port "$tt_PORT" --procs "$procs" --seconds "$SECS")
  d=$(runs $PY scripts/bench/torch_client_load.py --port "$dd_PORT" --procs "$procs" --seconds "$SECS")
  printf '%-10s %12s %12s %7sx\n' "$procs" "$t" "$d" "$(ratio "$d" "$t")"
done
echo
echo "## ddprun's C++ client (legacy dialect, one thread), set/get/add of 64-byte values (ops/s)"
printf '%-12s %12s %12s %8s\n' connections torch ddprund ratio
for conns in 1 16 64; do
  t=$(runs $LOAD ops --port "$tt_PORT" --dialect legacy --connections "$conns" --seconds "$SECS")
  d=$(runs $LOAD ops --port "$dd_PORT" --dialect legacy --connections "$conns" --seconds "$SECS")
  printf '%-12s %12s %12s %7sx\n' "$conns" "$t" "$d" "$(ratio "$d" "$t")"
  ratio64=$(ratio "$d" "$t")
done
echo
echo "## 2,000 clients connect at once, each does one set and one get (ms until the last is served)"
t=$(runs $LOAD connect --port "$tt_PORT" --dialect legacy --connections 2000)
d=$(runs $LOAD connect --port "$dd_PORT" --dialect legacy --connections 2000)
printf 'torch %s ms, ddprund %s ms, ddprund/torch time %sx\n' "$t" "$d" "$(ratio "$d" "$t")"
echo
echo "## memory (RSS growth of the server process)"
start_ddprund mdd
start_torch mtt
for name in mtt mdd; do
  port_var=${name}_PORT pid_var=${name}_PID
  port=${!port_var} pid=${!pid_var}
  before=$(rss_kib "$pid")
  mkfifo "$work/$name.hold"
  $LOAD hold --port "$port" --dialect legacy --connections 2000 <"$work/$name.hold" >"$work/$name.held" &
  holder=$!
  exec {hold_fd}>"$work/$name.hold"
  until grep -q ready "$work/$name.held" 2>/dev/null; do kill -0 "$holder"; sleep 0.05; done
  held=$(rss_kib "$pid")
  exec {hold_fd}>&-
  wait "$holder"
  base=$(rss_kib "$pid")
  $LOAD fill --port "$port" --dialect legacy --keys 100000 >/dev/null
  filled=$(rss_kib "$pid")
  label=$([[ $name == mdd ]] && echo ddprund || echo torch)
  printf '%-8s %6d bytes per idle connection (2,000 held), %4d bytes per key (100,000 keys, 64-byte values)\n' \
    "$label" $(((held - before) * 1024 / 2000)) $(((filled - base) * 1024 / 100000))
done
echo
echo "store: ddprund/torch aggregate ops/s at 64 connections (C++ client, legacy dialect): ${ratio64}x"
