#!/usr/bin/env bash
# Rendezvous at scale without process-creation noise: rendezvous_sim runs N real ElasticRendezvous
# handlers in one process, for each N: a round formed by all N, a node lost, a node added. It prints
# the times and, per agent and phase, the requests the store served, the bytes it sent and CPU
# seconds, then how the cost grows with N. Two transports:
#   tcp     real sockets to a real store on its own thread (SIM_NS). Each agent holds 3 connections
#           and the store 3 more, so N is bounded by the descriptor limit (about a sixth of it).
#   memory  the same handlers and the store's own KeyValueStore (keys, owned keys, claims, watches)
#           in one thread, without sockets (MEM_NS): for N beyond the descriptor limit. CPU is the
#           whole process's (agents and store).
#
#   scripts/bench/rendezvous_scale.sh  (SIM_NS="250 1000 3000 4000", MEM_NS="1000 4000 10000" by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target rendezvous_sim >/dev/null
ulimit -n "$(ulimit -Hn)"
fds=$(ulimit -n)
SIM_NS=${SIM_NS:-"250 1000 3000 4000"}
MEM_NS=${MEM_NS:-"1000 4000 10000"}
echo "# simulated agents (real handlers, real store, one process); $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# per agent and phase: requests served by the store, KiB it sent, CPU seconds (whole phase)"
printf '%-7s %-6s %9s %9s %11s   %-22s %-22s %-22s\n' transport N form_ms loss_ms scaleup_ms \
  "form: req KiB cpu" "loss: req KiB cpu" "scale-up: req KiB cpu"
out=$(mktemp)
run() {  # transport, N...
  local transport=$1 args=()
  shift
  for n in "$@"; do
    if [[ $transport == tcp ]] && ((n * 6 + 256 > fds)); then
      echo "# tcp N=$n not run: it needs $((n * 6)) descriptors and this process may have $fds"
    else
      args+=(--agents "$n")
    fi
  done
  ((${#args[@]})) || return 0
  build/scripts/bench/rendezvous_sim "${args[@]}" --transport "$transport" --timeout-s 600 |
    while read -r n f l u _ fr fk fc _ lr lk lc _ ur uk uc; do
      echo "$transport $n $f $l $u $fk" >>"$out"
      printf '%-7s %-6s %9s %9s %11s   %-22s %-22s %-22s\n' "$transport" "$n" "$f" "$l" "$u" \
        "$fr $fk $fc" "$lr $lk $lc" "$ur $uk $uc"
    done
}
# shellcheck disable=SC2086
run tcp $SIM_NS
# shellcheck disable=SC2086
run memory $MEM_NS
echo
awk '
  { t = $1; n[t, ++c[t]] = $2; f[t, c[t]] = $3; l[t, c[t]] = $4; k[t, c[t]] = $6 }
  function growth(t,   e, b) {
    if (c[t] < 2) return
    e = log(f[t, c[t]] / f[t, 1]) / log(n[t, c[t]] / n[t, 1])
    b = log(k[t, c[t]] / k[t, 1]) / log(n[t, c[t]] / n[t, 1])
    printf "%s: from %d to %d agents the time to form grew as N^%.2f, the bytes per agent as N^%.2f\n", t, n[t, 1], n[t, c[t]], e, b
  }
  END {
    growth("tcp"); growth("memory")
    for (t in c) { last[t] = c[t] }
    line = "rendezvous at scale:"
    if ("memory" in last) line = sprintf("%s %d simulated agents (no sockets) formed a round in %.0f ms and re-formed after a loss in %.0f ms (targets 2000 and 1000: %.2fx and %.2fx of the target)", line, n["memory", last["memory"]], f["memory", last["memory"]], l["memory", last["memory"]], f["memory", last["memory"]] / 2000, l["memory", last["memory"]] / 1000)
    if ("tcp" in last) line = sprintf("%s; %d over sockets in %.0f ms and %.0f ms", line, n["tcp", last["tcp"]], f["tcp", last["tcp"]], l["tcp", last["tcp"]])
    print line
  }' "$out"
