#!/usr/bin/env bash
# Store benchmark: ddprund against torch's own TCPStore server, of torch 2.14 (Debian forky's, through
# scripts/torch2/python; modern dialect; the headline) and of torch 1.13 (Debian bookworm's; legacy
# dialect), side by side in one run on this machine. Each torch is measured with its own client and
# dialect against its own server and against ddprund. Medians of RUNS runs; ratios are the evidence
# (absolute numbers on a shared 2-core machine are noise). The last line states the headline ratio.
#
#   scripts/bench/store.sh            (RUNS=3 SECONDS_PER_RUN=2 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
SECS=${SECONDS_PER_RUN:-2}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprund store_load >/dev/null
LOAD=build/scripts/bench/store_load
PY1=/usr/bin/python3
PY2=$PWD/scripts/torch2/python
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
  build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level warn >"$work/$1.port" 2>"$work/$1.log" &
  local pid=$!
  pids+=("$pid")
  until [[ -s "$work/$1.port" ]]; do kill -0 "$pid"; sleep 0.05; done
  printf -v "${1}_PORT" '%s' "$(head -1 "$work/$1.port")"
  printf -v "${1}_PID" '%s' "$pid"
}
start_torch() {  # $2: the python of the torch to host
  mkfifo "$work/$1.stdin"
  $2 scripts/bench/torch_store_server.py <"$work/$1.stdin" >"$work/$1.port" 2>"$work/$1.log" &
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
start_torch t1 "$PY1"
start_torch t2 "$PY2"
echo "# store benchmark: ddprund vs torch's TCPStore server (2.14 and 1.13); median of $RUNS runs of ${SECS}s"
echo "# machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
# Each torch with its own python and dialect: "VERSION PYTHON TORCH_SERVER_PORT DIALECT".
torches=("2.14 $PY2 $t2_PORT modern" "1.13 $PY1 $t1_PORT legacy")
echo
echo "## torch's Python client, set/get/add of 64-byte values (ops/s, all processes together)"
printf '%-6s %-10s %12s %12s %8s\n' torch processes torch ddprund ratio
for t in "${torches[@]}"; do
  read -r version py tport _ <<<"$t"
  for procs in 1 4; do
    a=$(runs $py scripts/bench/torch_client_load.py --port "$tport" --procs "$procs" --seconds "$SECS")
    b=$(runs $py scripts/bench/torch_client_load.py --port "$dd_PORT" --procs "$procs" --seconds "$SECS")
    printf '%-6s %-10s %12s %12s %7sx\n' "$version" "$procs" "$a" "$b" "$(ratio "$b" "$a")"
  done
done
echo
echo "## ddprun's C++ client (one thread, each torch's dialect), set/get/add of 64-byte values (ops/s)"
printf '%-6s %-12s %12s %12s %8s\n' torch connections torch ddprund ratio
for t in "${torches[@]}"; do
  read -r version _ tport dialect <<<"$t"
  for conns in 1 16 64; do
    a=$(runs $LOAD ops --port "$tport" --dialect "$dialect" --connections "$conns" --seconds "$SECS")
    b=$(runs $LOAD ops --port "$dd_PORT" --dialect "$dialect" --connections "$conns" --seconds "$SECS")
    printf '%-6s %-12s %12s %12s %7sx\n' "$version" "$conns" "$a" "$b" "$(ratio "$b" "$a")"
    [[ $version == 2.14 ]] && ratio64=$(ratio "$b" "$a")
  done
done
echo
echo "## 2,000 clients connect at once, each does one set and one get (ms until the last is served)"
for t in "${torches[@]}"; do
  read -r version _ tport dialect <<<"$t"
  a=$(runs $LOAD connect --port "$tport" --dialect "$dialect" --connections 2000)
  b=$(runs $LOAD connect --port "$dd_PORT" --dialect "$dialect" --connections 2000)
  printf 'torch %s: torch %s ms, ddprund %s ms, ddprund/torch time %sx\n' "$version" "$a" "$b" \
    "$(ratio "$b" "$a")"
done
echo
echo "## memory (RSS growth of the server process)"
start_ddprund mdd
start_torch mt1 "$PY1"
start_torch mt2 "$PY2"
for name in mt2 mt1 mdd; do
  port_var=${name}_PORT pid_var=${name}_PID
  port=${!port_var} pid=${!pid_var}
  dialect=$([[ $name == mt1 ]] && echo legacy || echo modern)
  before=$(rss_kib "$pid")
  mkfifo "$work/$name.hold"
  $LOAD hold --port "$port" --dialect "$dialect" --connections 2000 <"$work/$name.hold" >"$work/$name.held" &
  holder=$!
  exec {hold_fd}>"$work/$name.hold"
  until grep -q ready "$work/$name.held" 2>/dev/null; do kill -0 "$holder"; sleep 0.05; done
  held=$(rss_kib "$pid")
  exec {hold_fd}>&-
  wait "$holder"
  base=$(rss_kib "$pid")
  $LOAD fill --port "$port" --dialect "$dialect" --keys 100000 >/dev/null
  filled=$(rss_kib "$pid")
  label=$(case $name in mdd) echo ddprund ;; mt1) echo "torch 1.13" ;; *) echo "torch 2.14" ;; esac)
  printf '%-10s %6d bytes per idle connection (2,000 held), %4d bytes per key (100,000 keys, 64-byte values)\n' \
    "$label" $(((held - before) * 1024 / 2000)) $(((filled - base) * 1024 / 100000))
done
echo
echo "store: ddprund/torch 2.14 aggregate ops/s at 64 connections (C++ client, modern dialect): ${ratio64}x"
