#!/usr/bin/env bash
# Rendezvous benchmark: N agents as real processes on this machine, one worker each that records when
# it started. Time = from the last agent's start to the last worker's start (median of RUNS), for the
# c10d backend (--nnodes=N:N, the store in a standalone ddprund; torchrun's c10d store in its first
# agent), ddprun's etcd backend (a 3-member etcd cluster on loopback, started here) and the static
# backend (node 0 hosting the store). torchrun is torch 2.14's (Debian forky's, through
# scripts/torch2/python; the headline) and torch 1.13's (Debian bookworm's), run for the N this
# machine holds. torchrun's etcd backends speak etcd's v2 API, which etcd 3.4 turns off: no column.
# Then faults, ddprun only (torchrun's survivors never notice a dead agent whose workers held no
# collective): a 2:3 job losing one agent, from its SIGKILL to both survivors' new workers started
# (c10d, and etcd, whose dead agent's lease ends after the heartbeat timeout, 2 s here); on etcd, the
# same with the etcd leader SIGKILLed at the same moment; and the worker restarts a 2:2 job suffers
# when the leader is SIGKILLed under it. The last lines state the ratios at N=8.
#   scripts/bench/rendezvous.sh    (NS="2 8 32 128 256", TORCHRUN_NS="2 8", ETCD_NS="2 8 32 128",
#                                   STATIC_NS=$NS, RUNS=3, FAULTS=1)
# FAULTS=0 skips the fault runs; the ratio lines need N=8 among NS (e.g. NS=1000 TORCHRUN_NS=
# ETCD_NS= STATIC_NS= FAULTS=0 for the largest real-process rendezvous alone: 1,000 c10d agents).
set -euo pipefail
cd "$(dirname "$0")/../.."
NS=${NS:-"2 8 32 128 256"}
TORCHRUN_NS=${TORCHRUN_NS:-"2 8"}
# 256 agents on etcd overload this 2-core machine: three etcd members, 256 agents and the N*N watch
# events of a round share it (the gateway gives each agent one watch of the whole job), keep-alives
# starve and leases expire.
ETCD_NS=${ETCD_NS:-"2 8 32 128"}
# A static job's agents each follow every key of the job (they wait for each node rank by name).
STATIC_NS=${STATIC_NS-$NS}
RUNS=${RUNS:-3}
FAULTS=${FAULTS:-1}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
DDPRUN=$PWD/build/launcher/ddprun
TORCHRUN=${TORCHRUN:-$PWD/scripts/torch1/torchrun}
TORCHRUN2="$PWD/scripts/torch2/python -m torch.distributed.run"
work=$(mktemp -d)
# etcd members' pids live in files: the fault runs restart members from inside $(...) subshells.
stop_etcd() { for f in "$work"/etcd/m*.pid; do [[ -e $f ]] && kill -9 "$(cat "$f")"; done; }
trap '{ stop_etcd; wait; } 2>/dev/null; rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"
HEARTBEAT=2

free_ports() {  # $1 count
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# A 3-member etcd cluster on loopback for the whole run, at ETCD_ENDPOINTS.
start_etcd_member() {  # $1 member index, $2 new|existing
  local i=$1
  etcd --name "m$i" --data-dir "$work/etcd/m$i" \
    --listen-client-urls "http://127.0.0.1:${etcd_ports[i]}" \
    --advertise-client-urls "http://127.0.0.1:${etcd_ports[i]}" \
    --listen-peer-urls "http://127.0.0.1:${etcd_ports[i + 3]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${etcd_ports[i + 3]}" \
    --initial-cluster "$etcd_cluster" --initial-cluster-state "$2" >"$work/etcd/m$i.log" 2>&1 &
  echo $! >"$work/etcd/m$i.pid"
}
kill_etcd_member() {  # $1 member index
  local pid
  pid=$(cat "$work/etcd/m$1.pid")
  kill -9 "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
}
etcd_healthy() {
  for _ in $(seq 300); do
    ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" endpoint health >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "etcd did not become healthy" >&2
  return 1
}
etcd_leader() {  # the index of the leader
  ETCDCTL_API=3 etcdctl --endpoints "$ETCD_ENDPOINTS" endpoint status -w json | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
        print(s["Endpoint"].rsplit(":", 1)[1])' | {
    read -r p
    for i in 0 1 2; do if [[ ${etcd_ports[i]} == "$p" ]]; then echo "$i"; fi; done
  }
}
mkdir -p "$work/etcd"
read -ra etcd_ports <<<"$(free_ports 6)"
etcd_cluster=m0=http://127.0.0.1:${etcd_ports[3]},m1=http://127.0.0.1:${etcd_ports[4]}
etcd_cluster+=,m2=http://127.0.0.1:${etcd_ports[5]}
ETCD_ENDPOINTS=127.0.0.1:${etcd_ports[0]},127.0.0.1:${etcd_ports[1]},127.0.0.1:${etcd_ports[2]}
for i in 0 1 2; do start_etcd_member "$i" new; done
etcd_healthy

# ddprun's agents run without per-worker cgroups here (torchrun has none): with hundreds of agents on
# one machine the kernel serializes cgroup creation (one mkdir took 14 s among 1000 agents), which a
# real cluster, one agent per node, never sees. Their heartbeat timeout is 30 s, as docs/performance.md advises for
# loaded nodes: 1000 agents and then their 1000 workers starting at once on 2 cores starve keep-alives
# of 5 s. Neither changes how a round forms.
export DDPRUN_CGROUPS=0
# From 500 agents on, each worker stays 10 s after it records its start, so that the end of the job
# (every agent's exit barrier, close and exit) does not overlap its start on these 2 cores.
hold() { if (($1 >= 500)); then echo "; sleep 10"; fi; }
one_run() {  # $1 ddprun|torchrun|torchrun2, $2 N, $3 backend; prints ms from the last agent start to the last worker start
  local kind=$1 n=$2 backend=$3 d port store_pid= launcher=$DDPRUN hb=,heartbeat_timeout=30
  [[ $kind == ddprun ]] || hb=
  [[ $kind == torchrun ]] && launcher="$TORCHRUN --monitor_interval=0.1"
  [[ $kind == torchrun2 ]] && launcher="$TORCHRUN2 --monitor_interval=0.1"
  d=$(mktemp -d -p "$work")
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if [[ $backend == c10d && $kind == ddprun ]]; then
    # Listening before any agent starts (an agent would otherwise host the local endpoint itself).
    build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level error >"$d/store.port" &
    store_pid=$!
    until [[ -s $d/store.port ]]; do kill -0 "$store_pid"; sleep 0.01; done
    port=$(head -1 "$d/store.port")
  fi
  local pids=()
  for ((r = n - 1; r >= 0; r--)); do
    if [[ $backend == etcd ]]; then
      $launcher --nnodes="$n:$n" --nproc_per_node=1 --rdzv_backend=etcd --rdzv_id="bench-${d##*/}" \
        --rdzv_endpoint="$ETCD_ENDPOINTS" --rdzv_conf=join_timeout=120$hb \
        --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK$(hold "$n")" >/dev/null 2>&1 &
    elif [[ $backend == c10d ]]; then
      $launcher --nnodes="$n:$n" --nproc_per_node=1 --rdzv_backend=c10d --rdzv_id=bench \
        --rdzv_endpoint="127.0.0.1:$port" --rdzv_conf=join_timeout=120$hb \
        --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK$(hold "$n")" >/dev/null 2>&1 &
    else
      $launcher --nnodes="$n" --node_rank=$r --nproc_per_node=1 --master_port="$port" \
        --rdzv_conf=join_timeout=120 --no_python /bin/sh -c "date +%s%N > $d/w.\$RANK$(hold "$n")" \
        >/dev/null 2>&1 &
    fi
    pids+=($!)
  done
  date +%s%N >"$d/last_agent"
  wait "${pids[@]}"
  [[ -n $store_pid ]] && kill "$store_pid"
  python3 - "$d" "$n" <<'PY'
import glob, sys
d, n = sys.argv[1], int(sys.argv[2])
# (A worker stopped between its shell's redirection and `date` leaves an empty file.)
starts = [int(t) for t in (open(p).read().strip() for p in glob.glob(f"{d}/w.*")) if t]
if len(starts) < n:
    print(f"failed({len(starts)}/{n})")  # not every worker started: the run formed no job
else:
    print(f"{(max(starts) - int(open(f'{d}/last_agent').read())) / 1e6:.1f}")
PY
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# A 2:3 job of 3 agents whose workers wait in the 3-node round; one agent is SIGKILLed (and, with
# $2 = leader, the etcd leader at the same moment). Prints ms from the kill to both survivors' new
# workers started.
dead_agent_run() {  # $1 c10d|etcd, $2 leader|-
  local backend=$1 d store_pid= endpoint i
  d=$(mktemp -d -p "$work")
  if [[ $backend == c10d ]]; then
    build/rendezvous/store/ddprund --host 127.0.0.1 --port 0 --log-level error >"$d/store.port" &
    store_pid=$!
    until [[ -s $d/store.port ]]; do kill -0 "$store_pid"; sleep 0.01; done
    endpoint=127.0.0.1:$(head -1 "$d/store.port")
  else
    endpoint=$ETCD_ENDPOINTS
  fi
  local pids=()
  for i in 0 1 2; do
    $DDPRUN --nnodes=2:3 --nproc_per_node=1 --rdzv_backend="$backend" --rdzv_id="dead-${d##*/}" \
      --rdzv_endpoint="$endpoint" \
      --rdzv_conf=join_timeout=120,last_call_timeout=0.5,heartbeat_timeout=$HEARTBEAT \
      --no_python /bin/sh -c \
      "if [ \$WORLD_SIZE = 3 ]; then touch $d/ready.$i; exec sleep 600; fi; date +%s%N > $d/w.$i" \
      >/dev/null 2>"$d/agent.$i.log" &
    pids+=($!)
  done
  for _ in $(seq 3000); do
    [[ -e $d/ready.0 && -e $d/ready.1 && -e $d/ready.2 ]] && break
    sleep 0.01
  done
  local leader=
  [[ $2 == leader ]] && leader=$(etcd_leader)
  date +%s%N >"$d/killed"
  kill -9 "${pids[2]}"
  [[ -n $leader ]] && kill_etcd_member "$leader"
  wait "${pids[0]}" "${pids[1]}"
  { wait "${pids[2]}" || true; } 2>/dev/null
  [[ -n $store_pid ]] && kill "$store_pid"
  if [[ -n $leader ]]; then
    start_etcd_member "$leader" existing
    etcd_healthy
  fi
  python3 - "$d" <<'PY'
import sys
d = sys.argv[1]
killed = int(open(f"{d}/killed").read())
print(f"{(max(int(open(f'{d}/w.{i}').read()) for i in (0, 1)) - killed) / 1e6:.1f}")
PY
}

# A 2:2 job on etcd whose workers run until told to stop; the leader is SIGKILLed under it and the
# job kept running for twice the heartbeat timeout. Prints the worker restarts (starts beyond 2).
leader_loss_restarts() {
  local d i
  d=$(mktemp -d -p "$work")
  local pids=()
  for i in 0 1; do
    $DDPRUN --nnodes=2:2 --nproc_per_node=1 --rdzv_backend=etcd --rdzv_id="leader-${d##*/}" \
      --rdzv_endpoint="$ETCD_ENDPOINTS" --rdzv_conf=join_timeout=120,heartbeat_timeout=$HEARTBEAT \
      --no_python /bin/sh -c \
      "echo >> $d/starts; for _ in \$(seq 6000); do [ -e $d/stop ] && exit 0; sleep 0.01; done; exit 1" \
      >/dev/null 2>"$d/agent.$i.log" &
    pids+=($!)
  done
  for _ in $(seq 3000); do
    [[ -e $d/starts && $(wc -l <"$d/starts") -ge 2 ]] && break
    sleep 0.01
  done
  local leader
  leader=$(etcd_leader)
  kill_etcd_member "$leader"
  sleep $((2 * HEARTBEAT))  # the outage under the running job, not a synchronisation
  touch "$d/stop"
  wait "${pids[@]}"
  start_etcd_member "$leader" existing
  etcd_healthy
  echo $(($(wc -l <"$d/starts") - 2))
}

echo "# rendezvous benchmark: last agent started -> every worker started (ms, median of $RUNS)"
printf '%-6s %13s %13s %13s %13s %13s %13s %13s\n' N 2.14-c10d 1.13-c10d ddprun-c10d ddprun-etcd \
  2.14-static 1.13-static ddprun-static
for n in $NS; do
  row=()
  for backend in c10d etcd static; do
    t2=- t1=-
    if [[ $backend != etcd && " $TORCHRUN_NS " == *" $n "* ]]; then
      t2=$(for _ in $(seq "$RUNS"); do one_run torchrun2 "$n" $backend; done | median)
      t1=$(for _ in $(seq "$RUNS"); do one_run torchrun "$n" $backend; done | median)
    fi
    d=-
    if [[ ($backend == c10d) || ($backend == etcd && " $ETCD_NS " == *" $n "*) ||
      ($backend == static && " $STATIC_NS " == *" $n "*) ]]; then
      d=$(for _ in $(seq "$RUNS"); do one_run ddprun "$n" $backend; done | median)
    fi
    if [[ $backend == etcd ]]; then row+=("$d"); else row+=("$t2" "$t1" "$d"); fi
    [[ $n == 8 && $backend == c10d ]] && { d8=$d; t8=$t2; }
    [[ $n == 8 && $backend == etcd ]] && e8=$d
  done
  printf '%-6s %13s %13s %13s %13s %13s %13s %13s\n' "$n" "${row[@]}"
done

if [[ $FAULTS == 0 || -z ${d8:-} ]]; then
  echo "(no fault runs and no ratio lines: FAULTS=0, or N=8 is not among NS)"
  exit 0
fi
echo "# faults (ms from the SIGKILL to both survivors' new workers started, median of $RUNS;" \
  "heartbeat_timeout=${HEARTBEAT}s)"
# (bash reports each SIGKILLed background job on stderr: $work/faults.log keeps that noise.)
dead_c10d=$(for _ in $(seq "$RUNS"); do dead_agent_run c10d -; done 2>>"$work/faults.log" | median)
dead_etcd=$(for _ in $(seq "$RUNS"); do dead_agent_run etcd -; done 2>>"$work/faults.log" | median)
dead_leader=$(for _ in $(seq "$RUNS"); do dead_agent_run etcd leader; done 2>>"$work/faults.log" |
  median)
restarts=$(for _ in $(seq "$RUNS"); do leader_loss_restarts; done 2>>"$work/faults.log" |
  sort -n | tail -1)
grep -v Killed "$work/faults.log" >&2 || true
echo "dead agent, c10d:                          $dead_c10d"
echo "dead agent, etcd:                          $dead_etcd"
echo "dead agent and the etcd leader together:   $dead_leader"
echo "worker restarts from losing the etcd leader under a 2:2 job (most in $RUNS runs): $restarts"
echo "rendezvous (c10d): at N=8 ddprun takes ${d8} ms, torch 2.14's torchrun ${t8} ms" \
  "($(awk -v a="$t8" -v b="$d8" 'BEGIN{printf "%.0f", a/b}')x)"
echo "rendezvous (etcd): at N=8 ddprun on etcd takes ${e8} ms:" \
  "$(awk -v a="$e8" -v b="$d8" 'BEGIN{printf "%.1f", a/b}')x ddprun's c10d," \
  "$(awk -v a="$t8" -v b="$e8" 'BEGIN{printf "%.0f", a/b}')x faster than torch 2.14's torchrun c10d"
