#!/usr/bin/env bash
# Init storm: N clients connect at once and each does what init_process_group does through the store
# (store_load storm: ADD to a counter, SET its address, WAIT for the barrier key, GET two peers' keys
# and the barrier key), against ddprund and against torch's own TCPStore servers (torch 2.14, Debian
# forky's, built without libuv: its poll-based server; torch 1.13, Debian bookworm's), one server per
# storm, side by side in one run. Measured: ms from the first connect to the last client released,
# and the server's peak RSS growth per connection.
#
# It runs in a network namespace of its own, where net.core.somaxconn and tcp_max_syn_backlog are
# raised to the largest storm (they are per namespace: the host's are untouched), with the descriptor
# limit raised for the servers and the load generator (root), and clients spread over LOOPBACK_ADDRS
# loopback addresses so that no address runs out of ephemeral ports. A storm not released within
# LIMIT_S seconds is reported as such.
#
#   scripts/bench/init_storm.sh     (NS="1000 4000 16000 32000" LIMIT_S=60 by default; root)
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"1000 4000 16000 32000"}
LIMIT_S=${LIMIT_S:-60}
ADDRS=${LOOPBACK_ADDRS:-4}

if [[ -z ${DDPRUN_STORM_IN_NETNS:-} ]]; then
  bash scripts/install-deps.sh
  bash scripts/torch2-root.sh >/dev/null
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target ddprund store_load >/dev/null
  ns=ddpstorm$$
  ip netns add "$ns"
  trap 'ip netns del "$ns"' EXIT
  status=0
  ip netns exec "$ns" env DDPRUN_STORM_IN_NETNS=1 bash "$0" "$@" || status=$?
  exit "$status"
fi

ip link set lo up
max=$(tr ' ' '\n' <<<"$NS" | sort -n | tail -1)
sysctl -qw net.core.somaxconn=$((max * 2 > 65535 ? 65535 : max * 2))
sysctl -qw net.ipv4.tcp_max_syn_backlog=$((max * 2))
# As far as this machine lets root raise it (without CAP_SYS_RESOURCE the hard limit stays).
ulimit -Hn 1048576 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
fds=$(ulimit -n)
LOAD=build/scripts/bench/store_load
PY1=/usr/bin/python3
PY2=$PWD/scripts/torch2/python
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

kib() { awk -v k="$2" '$1 == k":" {print $2}' "/proc/$1/status"; }
# serve NAME: starts a fresh server on every address; sets PORT and PID.
serve() {
  rm -f "$work/port" "$work/stdin"
  case $1 in
    ddprund) build/rendezvous/store/ddprund --port 0 --log-level error >"$work/port" 2>"$work/log" & ;;
    *)
      local py=$([[ $1 == torch2.14 ]] && echo "$PY2" || echo "$PY1")
      mkfifo "$work/stdin"
      $py -c '
import datetime, sys, torch.distributed as dist
s = dist.TCPStore("0.0.0.0", 0, is_master=True, wait_for_workers=False,
                  timeout=datetime.timedelta(seconds=600))
print(s.port, flush=True)
sys.stdin.read()' <"$work/stdin" >"$work/port" 2>"$work/log" &
      exec {hold}>"$work/stdin"
      ;;
  esac
  PID=$!
  until [[ -s "$work/port" ]]; do kill -0 "$PID"; sleep 0.05; done
  PORT=$(head -1 "$work/port")
}
stop() {
  kill "$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  [[ -n ${hold:-} ]] && exec {hold}>&- && unset hold
  return 0
}

echo "# init storm: N clients connect at once, ADD + SET + WAIT(barrier) + 3 GETs each"
echo "# machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ); own netns, somaxconn $(sysctl -n net.core.somaxconn); limit ${LIMIT_S}s"
printf '%-8s %-9s %-8s %12s %14s\n' N server dialect "released ms" "KiB/connection"
declare -A took
for n in $NS; do
  if ((n + 512 > fds)); then
    printf '%-8s not run: a server needs a descriptor per client and this machine allows %s per process\n' "$n" "$fds"
    continue
  fi
  for server in ddprund torch2.14 torch1.13; do
    dialect=$([[ $server == torch1.13 ]] && echo legacy || echo modern)
    serve "$server"
    before=$(kib "$PID" VmRSS)
    result=$($LOAD storm --port "$PORT" --dialect "$dialect" --connections "$n" \
      --addresses "$ADDRS" --seconds "$LIMIT_S" 2>>"$work/load.log") || true
    peak=$(kib "$PID" VmHWM)
    stop
    read -r ms released <<<"${result:-0 0}"
    if [[ $released == "$n" ]]; then
      took[$n.$server]=$ms
      shown="$ms"
    else
      shown=">${LIMIT_S}000 ($released released)"
    fi
    per=$(awk -v a="$peak" -v b="$before" -v n="$n" 'BEGIN {printf "%.1f", (a - b) / n}')
    printf '%-8s %-9s %-8s %12s %14s\n' "$n" "$server" "$dialect" "$shown" "$per"
  done
done
ratio() {
  local a=${took[$1.$2]:-} b=${took[$1.ddprund]:-}
  if [[ -z $b ]]; then echo "ddprund did not finish"; return; fi
  if [[ -z $a ]]; then echo ">$(awk -v l="$LIMIT_S" -v b="$b" 'BEGIN {printf "%.0f", l * 1000 / b}')x (torch did not finish in ${LIMIT_S} s)"; return; fi
  awk -v a="$a" -v b="$b" 'BEGIN {printf "%.1fx", a / b}'
}
ran=$(for n in $NS; do ((n + 512 > fds)) || echo "$n"; done | sort -n)
big=$(tail -1 <<<"$ran")
mid=$( (grep -x 16000 <<<"$ran") || tail -1 <<<"$ran")
echo
echo "init storm: ddprund released $big clients in ${took[$big.ddprund]:-?} ms; at $mid clients torch 2.14's server took $(ratio "$mid" torch2.14) ddprund's time, torch 1.13's $(ratio "$mid" torch1.13)"
