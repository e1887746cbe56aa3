#!/usr/bin/env bash
# What authentication costs (issue: paid once per connection). In one run, alternating so that the
# machine's noise falls on both sides alike:
#   - the 1,000-agent rendezvous (rendezvous_sim: real ElasticRendezvous handlers, a real store on
#     its own thread, 3 connections per agent): time to form the first round with and without a
#     token (each agent proves its job's token on each connection);
#   - store operations after the handshake: store_load ops (set/get/add, 4 connections) against
#     ddprund without a secret, and with one and every client proving its scope's token;
#   - connecting: 500 clients that connect at once and each set and get one key, both ways.
# Medians of RUNS runs; the last line states the ratios.
#
#   scripts/bench/auth.sh            (RUNS=5 AGENTS=1000 by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-5}
AGENTS=${AGENTS:-1000}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprund store_load rendezvous_sim >/dev/null
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
ddprund() {  # extra args...; prints the port
  build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level warn "$@" >"$work/port.$$" &
  pids+=($!)
  until [[ -s $work/port.$$ ]]; do sleep 0.05; done
  head -n1 "$work/port.$$"
  rm -f "$work/port.$$"
}
open_port=$(ddprund)
auth_port=$(ddprund --auth-token-file "$work/secret")
LOAD=build/scripts/bench/store_load
token=(--token-file "$work/secret" --scope /)  # a scope: every key is checked against it

for ((r = 1; r <= RUNS; r++)); do
  build/scripts/bench/rendezvous_sim --agents "$AGENTS" | awk '{print $2}' >>"$work/form.open"
  build/scripts/bench/rendezvous_sim --agents "$AGENTS" --token | awk '{print $2}' >>"$work/form.auth"
  $LOAD ops --port "$open_port" --connections 4 --seconds 2 >>"$work/ops.open"
  $LOAD ops --port "$auth_port" --connections 4 --seconds 2 "${token[@]}" >>"$work/ops.auth"
  $LOAD connect --port "$open_port" --connections 500 >>"$work/conn.open"
  $LOAD connect --port "$auth_port" --connections 500 "${token[@]}" >>"$work/conn.auth"
done

form_open=$(median <"$work/form.open") form_auth=$(median <"$work/form.auth")
ops_open=$(median <"$work/ops.open") ops_auth=$(median <"$work/ops.auth")
conn_open=$(median <"$work/conn.open") conn_auth=$(median <"$work/conn.auth")
echo "# $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ); medians of $RUNS runs"
printf '%-44s %12s %12s\n' "" "no token" "token"
printf '%-44s %12s %12s\n' "$AGENTS-agent rendezvous, first round formed (ms)" "$form_open" "$form_auth"
printf '%-44s %12s %12s\n' "store ops/s after the handshake (4 conns)" "$ops_open" "$ops_auth"
printf '%-44s %12s %12s\n' "500 clients connect, set and get (ms)" "$conn_open" "$conn_auth"
awk -v fo="$form_open" -v fa="$form_auth" -v oo="$ops_open" -v oa="$ops_auth" \
  -v co="$conn_open" -v ca="$conn_auth" 'BEGIN {
  printf "authentication: the %d-agent rendezvous forms in %.2fx its time without a token (target <= 1.10); a store operation after the handshake costs %.2fx (ops/s %.2fx); 500 connections %.2fx\n", '"$AGENTS"', fa / fo, oo / oa, oa / oo, ca / co }'
