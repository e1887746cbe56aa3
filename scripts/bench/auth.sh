#!/usr/bin/env bash
# What authentication costs (issue: paid once per connection). In one run, alternating so that the
# machine's noise falls on both sides alike:
#   - the 1,000-agent rendezvous (rendezvous_sim: real ElasticRendezvous handlers, a real store on
#     its own thread, 3 connections per agent): time to form the first round with and without a
#     token (each agent proves its job's token on each connection);
#   - store operations after the handshake: store_load ops (set/get/add, 4 connections) against
#     ddprund without a secret, and with one and every client proving its scope's token;
#   - connecting: 500 clients that connect at once and each set and get one key, both ways;
#   - each of the three again with the token and TLS (rdzv_conf protocol=https; the store's
#     certificate an ECDSA P-256 one made here with openssl). In the rendezvous, all 1,000 agents'
#     handshakes run on one thread of one process (on a cluster, on 1,000 machines at once), so the
#     store thread's CPU time to form the round is printed too.
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
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$work/ca.key" -out "$work/ca.pem" -days 1 -subj /CN=bench-ca \
  2>/dev/null
openssl req "${ec[@]}" -keyout "$work/store.key" -out "$work/store.csr" -subj /CN=store 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" >"$work/store.ext"
openssl x509 -req -in "$work/store.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial \
  -days 1 -extfile "$work/store.ext" -out "$work/store.pem" 2>/dev/null
tls_store=(--tls-cert "$work/store.pem" --tls-key "$work/store.key")

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# Starts a ddprund with extra args and sets the variable named `var` to its port. (Not in a command
# substitution: its subshell would keep the pid from the cleanup.)
ddprund() {  # var extra args...
  local var=$1
  shift
  build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level warn "$@" >"$work/port.$var" &
  pids+=($!)
  until [[ -s $work/port.$var ]]; do sleep 0.05; done
  printf -v "$var" '%s' "$(head -n1 "$work/port.$var")"
}
ddprund open_port
ddprund auth_port --auth-token-file "$work/secret"
ddprund tls_port --auth-token-file "$work/secret" "${tls_store[@]}"
LOAD=build/scripts/bench/store_load
SIM=build/scripts/bench/rendezvous_sim
token=(--token-file "$work/secret" --scope /)  # a scope: every key is checked against it
tls=(--tls-ca "$work/ca.pem")
# rendezvous_sim prints: agents, ms to form, ..., "form", requests and KiB per agent, the store's
# CPU seconds; kept: the time to form and the CPU.
sim() {
  local kind=$1
  shift
  $SIM --agents "$AGENTS" "$@" | awk '{print $2, $8}' >>"$work/sim.$kind"
}

for ((r = 1; r <= RUNS; r++)); do
  sim open
  sim auth --token
  sim tls --token "${tls_store[@]}" "${tls[@]}"
  $LOAD ops --port "$open_port" --connections 4 --seconds 2 >>"$work/ops.open"
  $LOAD ops --port "$auth_port" --connections 4 --seconds 2 "${token[@]}" >>"$work/ops.auth"
  $LOAD ops --port "$tls_port" --connections 4 --seconds 2 "${token[@]}" "${tls[@]}" >>"$work/ops.tls"
  $LOAD connect --port "$open_port" --connections 500 >>"$work/conn.open"
  $LOAD connect --port "$auth_port" --connections 500 "${token[@]}" >>"$work/conn.auth"
  $LOAD connect --port "$tls_port" --connections 500 "${token[@]}" "${tls[@]}" >>"$work/conn.tls"
done

for k in open auth tls; do
  declare "form_$k=$(awk '{print $1}' "$work/sim.$k" | median)" \
    "cpu_$k=$(awk '{print $2}' "$work/sim.$k" | median)"
  declare "ops_$k=$(median <"$work/ops.$k")" "conn_$k=$(median <"$work/conn.$k")"
done
echo "# $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ); medians of $RUNS runs"
printf '%-48s %10s %10s %12s\n' "" "no token" "token" "token+TLS"
printf '%-48s %10s %10s %12s\n' "$AGENTS-agent rendezvous, first round formed (ms)" "$form_open" \
  "$form_auth" "$form_tls"
printf '%-48s %10s %10s %12s\n' "  the store's CPU for it (s)" "$cpu_open" "$cpu_auth" "$cpu_tls"
printf '%-48s %10s %10s %12s\n' "store ops/s after the handshake (4 conns)" "$ops_open" "$ops_auth" \
  "$ops_tls"
printf '%-48s %10s %10s %12s\n' "500 clients connect, set and get (ms)" "$conn_open" "$conn_auth" \
  "$conn_tls"
awk -v fo="$form_open" -v fa="$form_auth" -v ft="$form_tls" -v oo="$ops_open" -v oa="$ops_auth" \
  -v ot="$ops_tls" -v co="$conn_open" -v ca="$conn_auth" -v ct="$conn_tls" -v so="$cpu_open" \
  -v st="$cpu_tls" 'BEGIN {
  printf "authentication: the %d-agent rendezvous forms in %.2fx its time without a token (target <= 1.10); a store operation after the handshake costs %.2fx (ops/s %.2fx); 500 connections %.2fx; with TLS too: forms in %.2fx (the store'"'"'s CPU %.2fx), an operation costs %.2fx, 500 connections %.2fx\n", '"$AGENTS"', fa / fo, oo / oa, oa / oo, ca / co, ft / fo, st / so, oo / ot, ct / co }'
