#!/usr/bin/env bash
# Heavy clients: what one client that reads 60 MB values (or never reads at all) costs everyone else
# on ddprund, against torch's own TCPStore server of torch 2.14 (Debian forky's, through
# scripts/torch2/python; the headline) and of torch 1.13 (Debian bookworm's), side by side in one
# run. Latency: small set+get round trips from another client while the load runs (p50/p99/max of
# RUNS runs, medians). Memory: the server's RSS growth while the load is held. The last line states
# the headline ratio.
#
#   scripts/bench/heavy_client.sh          (RUNS=3 SECONDS_PER_RUN=3 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
SECS=${SECONDS_PER_RUN:-3}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprund heavy_client_load >/dev/null
LOAD=build/scripts/bench/heavy_client_load
PY1=/usr/bin/python3
PY2=$PWD/scripts/torch2/python

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# start SERVER NAME: a fresh server (ddprund, t2 or t1); sets ${NAME}_PORT and ${NAME}_PID.
start() {
  case $1 in
    ddprund)
      build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level error >"$work/$2.port" &
      ;;
    *)
      mkfifo "$work/$2.stdin"
      py=$([[ $1 == t2 ]] && echo "$PY2" || echo "$PY1")
      $py scripts/bench/torch_store_server.py <"$work/$2.stdin" >"$work/$2.port" 2>/dev/null &
      ;;
  esac
  local pid=$!
  pids+=("$pid")
  [[ $1 == ddprund ]] || exec {fd}>"$work/$2.stdin"  # held open: the server runs until we exit
  until [[ -s "$work/$2.port" ]]; do kill -0 "$pid"; sleep 0.05; done
  printf -v "${2}_PORT" '%s' "$(head -1 "$work/$2.port")"
  printf -v "${2}_PID" '%s' "$pid"
}
stop() {  # PID NAME
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  rm -f "$work/$2.stdin" "$work/$2.port"
}
rss_mib() { awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
dialect_of() { [[ $1 == t1 ]] && echo legacy || echo modern; }
label_of() { case $1 in ddprund) echo ddprund ;; t2) echo "torch 2.14" ;; *) echo "torch 1.13" ;; esac; }

echo "# heavy clients: ddprund vs torch's TCPStore server (2.14 and 1.13); median of $RUNS runs of ${SECS}s"
echo "# machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
declare -A p99
for load in nonreader readers; do
  echo
  case $load in
    nonreader) echo "## one client sends 50 GETs of a 60 MB value and never reads: small set+get (ms)" ;;
    readers) echo "## 8 clients GET a 60 MB value in a loop: small set+get (ms)" ;;
  esac
  printf '%-11s %9s %9s %9s\n' server p50 p99 max
  for server in t2 t1 ddprund; do
    : >"$work/lat"
    for _ in $(seq "$RUNS"); do
      start "$server" s  # a fresh server per run: a torch server a run wedged does not carry over
      timeout 60 $LOAD latency --port "$s_PORT" --dialect "$(dialect_of "$server")" --load "$load" \
        --seconds "$SECS" >>"$work/lat" || echo "nan nan nan" >>"$work/lat"
      stop "$s_PID" s
    done
    a=$(cut -d' ' -f1 "$work/lat" | median)
    b=$(cut -d' ' -f2 "$work/lat" | median)
    c=$(cut -d' ' -f3 "$work/lat" | median)
    printf '%-11s %9.2f %9.2f %9.2f\n' "$(label_of "$server")" "$a" "$b" "$c"
    p99[$load.$server]=$b
  done
done
echo
echo "## memory: the server's RSS growth while the load is held (MiB)"
echo "(took N: connections whose bytes the server read; a server that stopped reading was moved past)"
printf '%-11s %28s %28s\n' server "20 stalled 64 MiB SETs" "3 non-readers, 20 GETs each"
for server in t2 t1 ddprund; do
  row=()
  for load in stalled-sets nonreaders; do
    start "$server" m
    before=$(rss_mib "$m_PID")
    mkfifo "$work/hold"
    $LOAD hold --port "$m_PORT" --dialect "$(dialect_of "$server")" --load "$load" <"$work/hold" \
      >"$work/held" &
    holder=$!
    exec {hold_fd}>"$work/hold"
    until grep -q ready "$work/held" 2>/dev/null; do kill -0 "$holder"; sleep 0.05; done
    sleep 1  # let the server take in what was sent
    taken=$(awk '/ready/ {print $2}' "$work/held")
    row+=("$(($(rss_mib "$m_PID") - before)) (took $taken)")
    exec {hold_fd}>&-
    wait "$holder" || true
    rm -f "$work/hold"
    stop "$m_PID" m
  done
  printf '%-11s %28s %28s\n' "$(label_of "$server")" "${row[0]}" "${row[1]}"
done
echo
awk -v t="${p99[readers.t2]}" -v d="${p99[readers.ddprund]}" 'BEGIN {
  printf "heavy clients: small set+get p99 beside 8 readers of a 60 MB value: ddprund %.2f ms, torch 2.14 %.2f ms (%.1fx lower)\n", d, t, t / d }'
