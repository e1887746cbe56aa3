#!/usr/bin/env bash
# Rendezvous at scale without process-creation noise: rendezvous_sim runs N real ElasticRendezvous
# handlers in one process against a real store (a StoreThread there), for each N of SIM_NS: a round
# formed by all N, a node lost, a node added. It prints the times and, per agent and phase, the
# requests the store served, the bytes it sent and its CPU time, then how the cost per agent grows
# with N. Each agent holds 3 connections and the store 3 more, so N is bounded by the descriptor
# limit (about a sixth of it).
#
#   scripts/bench/rendezvous_scale.sh     (SIM_NS="250 500 1000 2000 3000" by default)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target rendezvous_sim >/dev/null
ulimit -n "$(ulimit -Hn)"
fds=$(ulimit -n)
SIM_NS=${SIM_NS:-"250 500 1000 2000 3000"}
ns=()
for n in $SIM_NS; do
  if ((n * 6 + 256 > fds)); then
    echo "# N=$n not run: it needs $((n * 6)) descriptors and this process may have $fds"
  else
    ns+=("$n")
  fi
done
echo "# simulated agents (real handlers, real store, one process); $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# per agent and phase: requests served by the store, KiB it sent, its CPU seconds (whole phase)"
printf '%-6s %9s %9s %11s   %-26s %-26s %-26s\n' N form_ms loss_ms scaleup_ms "form: req KiB cpu" \
  "loss: req KiB cpu" "scale-up: req KiB cpu"
out=$(mktemp)
args=()
for n in "${ns[@]}"; do args+=(--agents "$n"); done
build/scripts/bench/rendezvous_sim "${args[@]}" --timeout-s 600 | tee "$out" | while read -r n f l u _ fr fk fc _ lr lk lc _ ur uk uc; do
  printf '%-6s %9s %9s %11s   %-26s %-26s %-26s\n' "$n" "$f" "$l" "$u" "$fr $fk $fc" "$lr $lk $lc" "$ur $uk $uc"
done
first=$(head -1 "$out") last=$(tail -1 "$out")
read -r n1 f1 _ _ _ _ k1 _ <<<"$first"
read -r n2 f2 l2 _ _ _ k2 _ <<<"$last"
echo
awk -v n1="$n1" -v n2="$n2" -v f1="$f1" -v f2="$f2" -v k1="$k1" -v k2="$k2" -v l2="$l2" 'BEGIN {
  e = log(f2 / f1) / log(n2 / n1); b = log(k2 / k1) / log(n2 / n1)
  printf "rendezvous at scale: %d simulated agents formed a round in %.0f ms and re-formed after a loss in %.0f ms; from %d to %d agents the time grew as N^%.2f and the bytes sent per agent as N^%.2f\n", n2, f2, l2, n1, n2, e, b
}'
