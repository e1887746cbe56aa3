"""The driver of scripts/bench/checkpoint_node_loss.sh (its header says what is measured).
    checkpoint_node_loss.py DDPRUN DDPRUND PYTHON WORKER"""
import glob
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

DDPRUN, DDPRUND, PY, WORKER = map(os.path.abspath, sys.argv[1:5])
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "launcher"))
from netns import bridge_hosts, remove_namespaces  # noqa: E402
from proc_util import allocated_under  # noqa: E402

NET = "10.219.0"
TAG = str(os.getpid())
HEAD, HOSTS = f"bnh{TAG}", [f"bn{TAG}{i}" for i in range(3)]
ADDRS = [f"{NET}.{11 + i}" for i in range(3)]
ENV = {**os.environ, "PYTHON_EXEC": PY, "GLOO_SOCKET_IFNAME": "eth0"}
SPARE = os.environ.get("SPARE", "1") == "1"  # the replacement waits as a spare from the start
PRELOAD = os.environ.get("PRELOAD", "1") == "1"  # ddprun's workers start from a warm interpreter
# ddprun's restart after the loss: "process" (torchrun's way, the default) or "in_process" (the
# surviving node's ranks keep their processes, model and optimizer; only the lost node's are new)
RESTART = os.environ.get("RESTART", "process")
# With RESTART=in_process: --standby_workers=STANDBY on every ddprun agent (the spare's standbys
# start while it waits, so that the lost node's ranks run on in warm processes)
STANDBY = int(os.environ.get("STANDBY", "0"))
# How many times the speed runs (no checkpoints, saves alone, saves and copies) take turns
SPEED_RUNS = int(os.environ.get("SPEED_RUNS", "3"))
# ddprun's losses, each with the link measured just before it (one loss's restore is one sample of
# a noisy machine: 0.18 to 0.61 s in five runs of one evening); torchrun's loss runs once.
LOSS_RUNS = int(os.environ.get("LOSS_RUNS", "3"))
SPEED_STEPS = 40  # each speed run's steps
# TOKEN=1: ddprund holds a secret and ddprun's job a token of its own (--rdzv_conf
# auth_token_file), so that every copy between its agents carries its MAC
TOKEN = os.environ.get("TOKEN", "0") == "1"
SECRET = []  # with TOKEN: ddprund's --auth-token-file and its path, once written


def auth_conf(run_id):
    """With TOKEN, the rdzv_conf setting of job `run_id`'s token (written on first use); else
    none."""
    if not SECRET:
        return []
    path = f"{SECRET[1]}.{run_id}"
    if not os.path.exists(path):
        token = subprocess.run([DDPRUN, "token", f"--auth-token-file={SECRET[1]}",
                                f"--rdzv_id={run_id}"], capture_output=True, text=True, check=True)
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(token.stdout)
    return [f"auth_token_file={path}"]


def in_ns(i, cmd, env=None, **kw):
    return subprocess.Popen(["ip", "netns", "exec", HOSTS[i], *cmd], env=env or ENV, **kw)


def kill_node(i):
    """Every process in host namespace i, at once: its agent and all its workers."""
    pids = subprocess.run(["ip", "netns", "pids", HOSTS[i]], capture_output=True,
                          text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def link_speed():
    """Bytes per second of one plain TCP transfer of 1 GiB from host 0 to host 2."""
    size = 1 << 30
    recv = in_ns(2, ["/usr/bin/python3", "-c", f"""
import socket, time
s = socket.socket(); s.bind(("{ADDRS[2]}", 0)); s.listen(1); print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0; t = None; buf = bytearray(1 << 20)
while n < {size}:
    k = c.recv_into(buf)
    if t is None: t = time.perf_counter()
    if k == 0: break
    n += k
print(n / (time.perf_counter() - t))
"""], stdout=subprocess.PIPE, text=True)
    port = recv.stdout.readline().strip()
    send = in_ns(0, ["/usr/bin/python3", "-c", f"""
import socket
c = socket.create_connection(("{ADDRS[2]}", {port})); b = bytes(1 << 20)
for _ in range({size >> 20}): c.sendall(b)
c.close()
"""])
    send.wait(timeout=300)
    return float(recv.communicate(timeout=300)[0])


def steps_of(out):
    path = os.path.join(out, "steps")
    if not os.path.exists(path):
        return []
    return [(float(t), int(s)) for t, s, _ in (line.split() for line in open(path))]


def run_loss(kind, out, store_port, steps, kill_after, K, run_id="loss"):
    """One job on hosts 0 and 1; host 1 is lost once the job has done step `kill_after`, and host 2
    joins in its place. Returns (steps redone, seconds from the loss until back at the failed step,
    the replacement's event log)."""
    def agent(i):
        log = open(os.path.join(out, f"agent.{i}.log"), "w")
        if kind == "ddprun":
            cmd = [DDPRUN, "--nnodes=2:2", "--nproc_per_node=2", "--max_restarts=3",
                   *(["--preload=auto"] if PRELOAD else []), f"--restart_mode={RESTART}",
                   *([f"--standby_workers={STANDBY}"] if STANDBY else []),
                   "--rdzv_backend=c10d", f"--rdzv_endpoint={NET}.1:{store_port}",
                   f"--rdzv_id={run_id}",
                   "--rdzv_conf=" + ",".join(["join_timeout=120,heartbeat_timeout=5",
                                              *auth_conf(run_id)]),
                   f"--event_log={out}/events.{i}.jsonl", WORKER, "ddprun", str(steps), out]
        else:
            # torchrun's own way: node 0's agent hosts the store (it cannot tell that the
            # address is its own inside a namespace: is_host), each node names its address. With
            # torch 2.14's shared TCPStore a replacement never joins: a surviving rank 0 does not
            # publish MASTER_ADDR for the new round (dynamic_rendezvous.py rebuilds it only on a
            # node's first round), and the newcomer waits for it until its timeout; torch's own
            # opt-out, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, is what a user does about it.
            cmd = [PY, "-m", "torch.distributed.run", "--nnodes=2:2", "--nproc_per_node=2",
                   "--max_restarts=3", "--rdzv_backend=c10d", f"--rdzv_endpoint={ADDRS[0]}:29400",
                   "--rdzv_id=loss", f"--local_addr={ADDRS[i]}",
                   f"--rdzv_conf=join_timeout=120,is_host={1 if i == 0 else 0}", WORKER,
                   "torchsave", str(steps), out, str(K)]
        env = ENV if kind == "ddprun" else {**ENV, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
        return in_ns(i, cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    agents = {0: agent(0), 1: agent(1)}
    deadline = time.monotonic() + 900
    while SPARE and not steps_of(out):  # the spare joins once the round of 0 and 1 trains
        if time.monotonic() > deadline or agents[0].poll() is not None:
            raise SystemExit(f"{kind}: the job never started: " +
                             open(os.path.join(out, "agent.0.log")).read()[-3000:])
        time.sleep(0.02)
    if SPARE:
        agents[2] = agent(2)
    while not any(s >= kill_after for _, s in steps_of(out)):
        if time.monotonic() > deadline or agents[0].poll() is not None:
            raise SystemExit(f"{kind}: the job never reached step {kill_after}: " +
                             open(os.path.join(out, "agent.0.log")).read()[-3000:])
        time.sleep(0.02)
    lost_at = time.time()
    kill_node(1)
    with open(os.path.join(out, "lost_at"), "w") as f:
        f.write(repr(lost_at))
    if not SPARE:
        agents[2] = agent(2)
    failed = max(s for t, s in steps_of(out) if t <= lost_at)
    for i in (0, 2):
        try:
            agents[i].wait(timeout=max(60, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_node(0), kill_node(2)
            raise SystemExit(f"{kind}: the job did not end after the loss: " +
                             open(os.path.join(out, f"agent.{i}.log")).read()[-3000:])
    after = [(t, s) for t, s in steps_of(out) if t > lost_at]
    if not after or max(s for _, s in after) < failed:
        last = [line for i in (0, 2) for line in
                open(os.path.join(out, f"agent.{i}.log")).read().splitlines()
                if "Error" in line and not line.startswith(" ")]
        print(f"{kind}: the job did not get back to step {failed} after the loss (its agents "
              f"exited {agents[0].returncode} and {agents[2].returncode}); last error: "
              f"{last[-1] if last else '(none printed)'}", flush=True)
        return None
    first = min(s for _, s in after)
    back = min(t for t, s in after if s >= failed)
    return failed - first + 1, back - lost_at


def cpu_seconds(pid):
    """The CPU time (user and system, every thread's; not its children's) of process `pid` so
    far, or None once it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step_time(out):
    times = [t for t, _ in steps_of(out)]
    return statistics.median(b - a for a, b in zip(times[1:], times[2:]))


def loss_of(out, row, links):
    """What one ddprun loss (run_loss's `row`, its job's files in `out`; `links`: the link speeds
    measured just before it) shows: printed as it comes, and returned for the summary."""
    link = statistics.median(links)
    if row:
        print(f"ddprun: steps redone {row[0]}, back at the failed step after {row[1]:.2f} s",
              flush=True)
    # Where the time from the loss went: each node's events after it.
    lost_ms = float(open(os.path.join(out, "lost_at")).read()) * 1000
    marks = sorted((e["time_ms"] - lost_ms, i, e["event"]) for i in (0, 2)
                   for e in map(json.loads, open(os.path.join(out, f"events.{i}.jsonl")))
                   if e["time_ms"] >= lost_ms)
    print("ddprun after the loss: " + ", ".join(
        f"{t / 1000:.2f} s node {i} {name}" for t, i, name in marks
        if name not in ("checkpoint_replicated", "checkpoints_held")))
    resumed = os.path.join(out, "resumed.0")
    print(f"ddprun: rank 0 of the round after the loss loaded its state at "
          f"{open(resumed).read().split()[1] if os.path.exists(resumed) else '?'} "
          f"(wall clock; the loss at {lost_ms / 1000:.2f})")
    if not row or row[0] > 1:
        # Why more than a step was redone: what each node restored, and what it said.
        for i in (0, 2):
            print(f"node {i}'s restores: {events(out, i, 'checkpoint_restore')}")
            said = open(os.path.join(out, f"agent.{i}.log")).read().splitlines()
            print("\n".join(x for x in said if "checkpoint" in x or "round" in x)[-3000:])
    fetched = [e for e in events(out, 2, "checkpoint_fetched") if e["ok"]]
    moved = sum(e["bytes"] for e in fetched)
    took = sum(e["seconds"] for e in fetched)
    rate = moved / took if took > 0 else 0.0
    # What the spare held for its restore while it waited (restore_room.hpp), last said.
    room = events(out, 2, "restore_room_held")[-1:]
    loss = {
        "row": row, "link": link, "links": links, "moved": moved, "took": took, "rate": rate,
        "ratio": link / rate if rate else float("inf"),
        "over": sum(e.get("over_held_pages", 0) for e in fetched),
        "held": room[0]["held"] if room else 0,
        # What moved between nodes at the restore, every node's fetches (a survivor's are none
        # where ranks stay put), and each rank's source.
        "moved_all": sum(e["bytes"] for i in (0, 2) for e in events(out, i, "checkpoint_fetched")
                         if e["ok"]),
        "sources": {r["rank"]: r["from"] for i in (0, 2)
                    for e in events(out, i, "checkpoint_restore")[-1:] for r in e.get("ranks", [])},
    }
    print(f"ddprun: the restore {took:.2f} s for {moved / (1 << 20):.0f} MiB against a link of "
          f"{link / 1e6:.0f} MB/s (the median of {', '.join(f'{x / 1e6:.0f}' for x in links)}): "
          f"{loss['ratio']:.2f}x", flush=True)
    return loss


def events(out, i, name):
    path = os.path.join(out, f"events.{i}.jsonl")
    return [e for e in map(json.loads, open(path)) if e["event"] == name] if os.path.exists(path) else []


def main():
    try:
        bridge_hosts(HEAD, HOSTS, NET, ADDRS)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"network namespaces unavailable here: {e}")
    work = tempfile.mkdtemp()
    if TOKEN:
        SECRET.extend(["--auth-token-file", os.path.join(work, "secret")])
        with open(os.open(SECRET[1], os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(24).hex())
    store = subprocess.Popen(["ip", "netns", "exec", HEAD, DDPRUND, "--host", f"{NET}.1", "--port",
                              "0", "--log-level", "error", *SECRET], stdout=subprocess.PIPE,
                             text=True)
    try:
        port = int(store.stdout.readline())
        cal = os.path.join(work, "cal")
        os.makedirs(cal)
        subprocess.run([PY, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        WORKER, "calibrate", "0", cal], env=ENV, check=True,
                       capture_output=True)
        c = json.load(open(os.path.join(cal, "calibration")))
        K = max(2, math.ceil(c["torch_save"] / (0.05 * c["step"])))
        random.seed(int(os.environ.get("SEED", os.getpid())))
        kill_after = K + random.randrange(K)
        steps = kill_after + 4
        losses = []
        for r in range(LOSS_RUNS):
            out = os.path.join(work, f"ddprun{r}")
            os.makedirs(out)
            # (This machine's link figure moved by 60% between runs of one day: the median of
            # three, just before the loss it is compared with.)
            links = [link_speed() for _ in range(3)]
            row = run_loss("ddprun", out, port, steps, kill_after, K, f"loss{r}")
            losses.append(loss_of(out, row, links))
        torchrun = os.path.join(work, "torchrun")
        os.makedirs(torchrun)
        t = run_loss("torchrun", torchrun, port, steps, kill_after, K)
        if t:
            print(f"torchrun: steps redone {t[0]}, back at the failed step after {t[1]:.2f} s",
                  flush=True)
        speed, stride = {}, None
        # (The workers' saves alone: the same job with the copies turned off.) The three ways
        # take turns, SPEED_RUNS times, so that the machine's drift falls on each alike; each
        # way's step time is the median of its runs' medians, the copies' share the median of
        # the runs' pairs (save / copy of one turn).
        times = {"none": [], "save": [], "copy": []}
        # Both agents' CPU seconds per step of the job (their own threads: the copies' work, not
        # the workers'), from their last look before they exit.
        agent_cpu = {"none": [], "save": [], "copy": []}
        memory = [0, 0]
        for turn in range(SPEED_RUNS):
            for mode, worker, flags in (("none", "none", []),
                                        ("save", "ddprun", ["--no_checkpoint_peer_copies"]),
                                        ("copy", "ddprun", [])):
                out = os.path.join(work, f"speed_{mode}{turn}")
                os.makedirs(out)
                run_id = f"speed_{mode}{turn}"
                agents = [in_ns(i, [DDPRUN, "--nnodes=2", "--nproc_per_node=2",
                                    "--rdzv_backend=c10d", f"--rdzv_endpoint={NET}.1:{port}",
                                    f"--rdzv_id={run_id}",
                                    *[f"--rdzv_conf={c}" for c in auth_conf(run_id)],
                                    f"--event_log={out}/events.{i}.jsonl", *flags, WORKER,
                                    worker, str(SPEED_STEPS), out], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for i in (0, 1)]
                most, ends, cpu = {}, time.monotonic() + 900, [0.0, 0.0]
                while any(a.poll() is None for a in agents):
                    for i, a in enumerate(agents):
                        cpu[i] = cpu_seconds(a.pid) or cpu[i]
                    if time.monotonic() > ends:
                        raise SystemExit(f"the speed run '{mode}' did not end in 900 s")
                    if mode == "copy":  # what each node's checkpoint folder holds, all along
                        for folder in glob.glob(f"/dev/shm/ddprun-checkpoints-{run_id}-*"):
                            most[folder] = max(most.get(folder, 0), allocated_under(folder))
                    time.sleep(0.05)
                times[mode].append(step_time(out))
                agent_cpu[mode].append(sum(cpu) / SPEED_STEPS)
                if mode == "copy":
                    memory = [max(a, b) for a, b in
                              zip(memory, sorted(most.values()) + [0] * (2 - len(most)))]
                    held = events(out, 0, "checkpoints_held")
                    stride = held[-1].get("stride") if held else None
                    # What the copies sent, and what the peer held already (the same bytes).
                    ends = [events(out, i, "checkpoints_held")[-1:] for i in (0, 1)]
                    copied = [sum(e[0].get(k, 0) for e in ends if e)
                              for k in ("copy_bytes_sent", "copy_bytes_held")]
                    staged = [e[0].get("last_stage_seconds") for e in ends if e]
        speed = {mode: statistics.median(t) for mode, t in times.items()}
        kept = statistics.median(a / b for a, b in zip(times["save"], times["copy"]))
        agents_cpu = {mode: statistics.median(t) for mode, t in agent_cpu.items()}
    finally:
        for i in range(3):
            kill_node(i)
        store.kill()
        remove_namespaces([HEAD, *HOSTS])
        shutil.rmtree(work, ignore_errors=True)
    state_mib = 5 * int(os.environ["WIDTH"]) ** 2 * 4 * 3 / (1 << 20)
    print(f"## DDP, 2 nodes x 2 ranks, about {state_mib:.0f} MiB of model and Adam state per rank, "
          f"torch 2.14; node 1 lost after step {kill_after}, " +
          ("a spare waiting from the start takes its place" if SPARE else
           "a replacement started at once") +
          ("; ddprun --preload=auto" if PRELOAD else "") + f" --restart_mode={RESTART}" +
          (f" --standby_workers={STANDBY}" if STANDBY else ""))
    print(f"calibration: a step {c['step']:.2f} s, torch.save of rank 0's state "
          f"{c['torch_save']:.2f} s -> torchrun saves every K = {K} steps")
    # The summary: the loss whose restore ratio is the median stands for ddprun's (its bytes and
    # sources); its figures are medians over the losses.
    ranked = sorted(losses, key=lambda x: x["ratio"])
    mid = ranked[len(ranked) // 2]
    backs = [x["row"][1] for x in losses if x["row"]]
    redone = [x["row"][0] for x in losses if x["row"]]
    d = (max(redone), statistics.median(backs)) if len(backs) == len(losses) else None
    print(f"ddprun    steps redone {', '.join(map(str, redone))}  from the loss until back at the "
          f"failed step {', '.join(f'{b:.2f}' for b in backs)} s ({len(losses)} losses)"
          + ("" if d else f"; {len(losses) - len(backs)} never got back"))
    print("torchrun  never got back to the failed step" if t is None else
          f"torchrun  steps redone {t[0]:3}  from the loss until back at the failed step "
          f"{t[1]:7.2f} s")
    ratio = statistics.median(x["ratio"] for x in losses)
    print(f"restore: the replacement got {mid['moved'] / (1 << 20):.0f} MiB of its ranks' copies "
          f"in {', '.join('%.2f' % x['took'] for x in losses)} s "
          f"against links of {', '.join('%.0f' % (x['link'] / 1e6) for x in losses)} MB/s: "
          f"{', '.join('%.2f' % x['ratio'] for x in losses)}x, median {ratio:.2f}x; "
          f"{', '.join('%.0f' % (x['over'] / (1 << 20)) for x in losses)} MiB of it written over "
          f"the memory the spare held while it waited "
          f"({', '.join('%.0f' % (x['held'] / (1 << 20)) for x in losses)} MiB)")
    print(f"bytes moved between nodes at the restore: {mid['moved_all'] / (1 << 20):.0f} MiB, "
          f"against {2 * state_mib:.0f} MiB of state on the lost node (2 ranks) and "
          f"{4 * state_mib:.0f} MiB in the job; each rank's state from: {mid['sources']}")
    print(f"memory per node, sampled every 50 ms while saving every step with copies: at most "
          f"{' and '.join(f'{m / (1 << 20):.0f}' for m in memory)} MiB, "
          f"{' and '.join(f'{m / (1 << 20) / state_mib:.1f}' for m in memory)}x one rank's state "
          f"(a node of 2 ranks, replicated=True: one replica per step; its regions hold 2 steps)")
    print(f"step time (median of {SPEED_RUNS} turns) without checkpoints {speed['none']:.3f} s, "
          f"with a save every step "
          f"{speed['save']:.3f} s, with a save every step and the copies to the peer "
          f"{speed['copy']:.3f} s (the copies' stride at the end: {stride} step(s); of the "
          f"copies' {(copied[0] + copied[1]) / (1 << 20):.0f} MiB, {copied[0] / (1 << 20):.0f} "
          f"MiB sent and {copied[1] / (1 << 20):.0f} MiB held by the peer already; each node's "
          f"last copy of its own step at memory speed took "
          f"{' and '.join(f'{t:.3f}' if t is not None else '?' for t in staged)} s)")
    print(f"the agents' CPU per step (both nodes, median of {SPEED_RUNS} turns; the machine has "
          f"{os.cpu_count()} cores): saves alone {agents_cpu['save']:.3f} s, saves and copies "
          f"{agents_cpu['copy']:.3f} s")
    versus = ("torchrun never got back" if t is None else
              f"torchrun's {t[0]}" + ("" if d is None else
                                      f", back at the failed step {t[1] / d[1]:.1f}x sooner (the "
                                      f"median of {len(losses)} losses; target 10x)"))
    macd = " (a token: every copy MAC'd)" if TOKEN else ""
    print(f"checkpoint node loss{macd}: ddprun redid {d[0] if d else 'all'} step(s) "
          f"(target at most 1) "
          f"against {versus}; the restore moved "
          f"{ratio:.2f}x slower than the link (target 2x); the "
          f"copies kept {kept * 100:.1f}% of the speed of saving alone (target 90%; per turn "
          f"{', '.join(f'{a / b * 100:.1f}' for a, b in zip(times['save'], times['copy']))}), "
          f"saving and copying every step "
          f"{speed['none'] / speed['copy'] * 100:.1f}% of no checkpoints")


if __name__ == "__main__":
    main()
