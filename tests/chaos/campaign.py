"""A randomized fault campaign in the style of etcd's functional tester and Jepsen: each trial runs a
real elastic job (ddprund or a 3-member etcd, three agents of a --nnodes=2:3 job, 1-2 workers each)
and injects 2-5 faults in its first 10 s, drawn from one seed, then checks the invariants below.

    campaign.py DDPRUN DDPRUND [--backend c10d|etcd|both] [--seeds 1,c10d:2,etcd:3] [--fresh N]
                [--minutes M] [--keep DIR] [--no-netns]

One seed fixes a trial's schedule (which faults, when, against which agent, for how long); what
the system does in between is real, so a seed that found a bug finds it in some runs, not all.

Faults: SIGKILL an agent (a replacement starts 0-3 s later); SIGSTOP an agent for 0.3-1.6 s or
2.6-6 s; SIGKILL a worker; as root, with the agents in network namespaces of their own around the
store's (ddprund, or the etcd members), cut an agent's link for 0.5-4 s; on c10d, SIGKILL ddprund
and restart it on its port after 0.1-1.5 s or 2.5-6 s; on etcd, SIGKILL a member or the leader and
restart it 0.5-4 s later. Two in five faults follow the previous one within 0.6 s.

Invariants, checked after every trial:
- liveness: every agent ends within a bound after the last fault: 0 (the job finished), 1 only
  where more workers were killed than --max_restarts allows, 3 only for a node that finds the job
  already over (a replacement or a node expelled while the others finished);
- no split brain: no two live workers of the job run in different rounds (a round is its worker
  store) for longer than a shutdown margin of each other, whatever their ranks, so no RANK is held
  twice and nobody disagrees on WORLD_SIZE; the workers of a paused agent, which nobody can stop
  while it is stopped, are the one exception (docs/multinode.md says so);
- no orphans: nothing the trial started outlives it, and no worker outlives its SIGKILLed agent by
  more than 0.5 s;
- complete event logs: every line whole JSON in time order, and every agent that ended on its own
  wrote job_end last;
- restart accounting: the restarts the job counted never exceed the workers killed, nor the budget.

It prints one line per trial and, for a failing one, its seed, what failed, where its logs are
kept and the end of every agent's log; then a summary table. Exits 1 if any trial failed.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
from etcd_cluster import EtcdCluster, have_etcd  # noqa: E402
from netns import bridge_hosts, remove_namespaces  # noqa: E402
from proc_util import alive  # noqa: E402

WORKER = os.path.join(HERE, "chaos_worker.py")
PY = "/usr/bin/python3"
HEARTBEAT = 2.0
MARGIN = 0.5           # a worker stops this long after its agent decides to stop it, at most
PARTITION_MARGIN = 1.0  # a cut-off agent stops its workers on its own clock, the store on its own
LIVENESS = 80.0        # after the last fault, every agent has ended within this (join timeout 40 s)
NET = "10.217.0"
BEATS = 200            # a round's workers run 10 s: the first round spans the faults' window


class Agent:
    def __init__(self, name, proc, ns, log):
        self.name, self.proc, self.ns, self.log = name, proc, ns, log
        self.killed_at = None
        self.pauses = []      # [from, to] monotonic; `to` is planned until the agent is resumed
        self.stopped = False  # SIGSTOPped and not yet resumed
        self.cuts = []        # (from, to)
        self.status = None


class Trial:
    def __init__(self, args, seed, backend):
        self.args, self.seed, self.backend = args, seed, backend
        self.rng = random.Random(f"{backend}:{seed}")
        self.dir = tempfile.mkdtemp(prefix=f"chaos-{backend}-{seed}-")
        self.out = os.path.join(self.dir, "workers")
        os.makedirs(self.out)
        self.tag = f"{os.getpid()}x{seed}"
        self.agents = []
        self.worker_kills = 0
        self.killed_workers = set()
        self.faults = []      # (t, kind, detail)
        self.violations = []
        self.netns = args.netns
        self.namespaces = []
        self.store = None
        self.etcd = None
        self.pending = []     # (at, callable) deferred actions (SIGCONT, restarts, links up)
        self.member_down = []  # etcd: (member, from, to)
        self.next_name = 0
        self.plan()

    # --- the schedule ---------------------------------------------------------------------------

    def plan(self):
        r = self.rng
        self.nproc = [r.choice([1, 2]) for _ in range(3)]
        self.max_restarts = r.randint(4, 6)
        # (The order of the kinds is part of what a seed means: kept as the reported seeds drew.)
        kinds = ["agent_kill", "agent_pause_short", "agent_pause_long", "worker_kill"]
        cut = ["partition"] if self.netns else []
        if self.backend == "c10d":
            kinds += ["store_restart_short", "store_restart_long"] + cut
        else:
            kinds += cut + ["etcd_member_kill", "etcd_leader_kill"]
        t = r.uniform(0.5, 3.0)
        self.schedule = []
        for _ in range(r.randint(2, 5)):
            if t > 10:
                break
            kind = r.choice(kinds)
            self.schedule.append((t, kind, r.random(), r.random()))
            t += r.uniform(0.05, 0.6) if r.random() < 0.4 else r.uniform(0.6, 4.0)

    # --- processes ------------------------------------------------------------------------------

    def start_store(self):
        host = f"{NET}.1" if self.netns else "127.0.0.1"
        if self.backend == "etcd":
            self.etcd = EtcdCluster(members=3, host=host,
                                    netns=self.namespaces[0] if self.netns else None)
            self.endpoint = self.etcd.endpoints()
            return
        self.store_port = 0
        self.store_host = host
        self.ddprund = self.launch_ddprund(0)
        self.endpoint = f"{host}:{self.store_port}"

    def launch_ddprund(self, port):
        cmd = [self.args.ddprund, "--host", self.store_host, "--port", str(port), "--log-level",
               "warn"]
        if self.netns:
            cmd = in_namespace(self.namespaces[0], cmd)
        for _ in range(40):  # the same port after a restart: retried while the old one lingers
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(
                os.path.join(self.dir, "ddprund.log"), "a"), text=True,
                env={**os.environ, "CHAOS_TRIAL": self.tag})
            line = p.stdout.readline()
            if line.strip().isdigit():
                self.store_port = int(line)
                return p
            p.wait()
            time.sleep(0.05)
        raise RuntimeError(f"ddprund could not listen on port {port}")

    def start_agent(self, slot):
        name = f"a{self.next_name}"
        self.next_name += 1
        ns = self.namespaces[1 + slot] if self.netns else None
        cmd = [self.args.ddprun, "--nnodes=2:3", f"--nproc_per_node={self.nproc[slot]}",
               f"--rdzv_backend={self.backend}", f"--rdzv_endpoint={self.endpoint}",
               f"--rdzv_id=chaos{self.tag}",
               f"--rdzv_conf=heartbeat_timeout={HEARTBEAT:g},join_timeout=40,last_call_timeout=1",
               f"--max_restarts={self.max_restarts}", "--shutdown_timeout=3",
               f"--event_log={self.dir}/events.{name}", "--no_python", PY, WORKER, self.out, str(BEATS)]
        if ns:
            cmd = in_namespace(ns, cmd)
        log = os.path.join(self.dir, f"agent.{name}.log")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                                stdin=subprocess.DEVNULL,
                                env={**os.environ, "CHAOS_NODE": name, "CHAOS_TRIAL": self.tag})
        agent = Agent(name, proc, ns, log)
        agent.slot = slot
        self.agents.append(agent)
        return agent

    def resume(self, a, pause):
        a.proc.send_signal(signal.SIGCONT)
        a.stopped = False
        # The pause ends when the agent can run again: later than planned when the driver was busy
        # (an etcd member starting).
        pause[1] = time.monotonic()

    def live_agents(self):
        return [a for a in self.agents if a.proc.poll() is None and a.killed_at is None]

    def pick(self, u, agents):
        return agents[int(u * len(agents)) % len(agents)] if agents else None

    # --- faults ---------------------------------------------------------------------------------

    def fire(self, kind, u, v):
        now = time.monotonic()
        live = [a for a in self.live_agents() if not a.stopped]
        if kind == "agent_kill":
            a = self.pick(u, live)
            if a:
                a.proc.kill()
                a.killed_at = now
                delay = 3 * v
                self.pending.append((now + delay, lambda slot=a.slot: self.start_agent(slot)))
                return f"{a.name}, replaced after {delay:.1f}s"
        elif kind.startswith("agent_pause"):
            a = self.pick(u, live)
            if a:
                d = 0.3 + 1.3 * v if kind.endswith("short") else 2.6 + 3.4 * v
                a.proc.send_signal(signal.SIGSTOP)
                a.stopped = True
                pause = [now, now + d]
                a.pauses.append(pause)
                self.pending.append((now + d, lambda a=a, p=pause: self.resume(a, p)))
                return f"{a.name} for {d:.1f}s"
        elif kind == "worker_kill":
            pid = self.live_worker(u)
            if pid:
                os.kill(pid, signal.SIGKILL)
                self.killed_workers.add(pid)
                self.worker_kills += 1
                return f"pid {pid}"
        elif kind.startswith("store_restart"):
            if self.ddprund.poll() is not None:
                return None  # down already: this fault would change nothing
            d = 0.1 + 1.4 * v if kind.endswith("short") else 2.5 + 3.5 * v
            self.ddprund.kill()
            self.ddprund.wait()
            self.pending.append((now + d, self.restart_store))
            return f"down {d:.1f}s"
        elif kind == "partition":
            a = self.pick(u, live)
            if a:
                d = 0.5 + 3.5 * v
                link = f"p{a.slot}"  # the bridge's end of the agent's veth
                subprocess.run(["ip", "-n", self.namespaces[0], "link", "set", link, "down"],
                               check=True)
                a.cuts.append((now, now + d))
                self.pending.append((now + d, lambda l=link: subprocess.run(
                    ["ip", "-n", self.namespaces[0], "link", "set", l, "up"], check=True)))
                return f"{a.name} cut for {d:.1f}s"
        elif kind in ("etcd_member_kill", "etcd_leader_kill"):
            try:
                up = [n for n in self.etcd.names if self.etcd.procs[n].poll() is None]
                name = self.etcd.leader() if kind == "etcd_leader_kill" else self.pick(u, up)
            except (AssertionError, KeyError):  # no leader right now (an election is on)
                return None
            if self.etcd.procs[name].poll() is not None:
                return None  # down already
            self.etcd.kill(name)
            d = 0.5 + 3.5 * v
            self.member_down.append((name, now, now + d))
            self.pending.append((now + d, lambda n=name: self.etcd.start(n)))
            return f"{name} down {d:.1f}s"
        return None

    def restart_store(self):
        self.ddprund = self.launch_ddprund(self.store_port)

    def live_worker(self, u):
        candidates = []
        for f in sorted(os.listdir(self.out)):
            pid = int(f.rsplit(".", 1)[1])
            with open(os.path.join(self.out, f)) as fh:
                last = fh.read().splitlines()[-1:]
            if last and last[0].startswith(("beat", "start")) and alive(pid) and \
                    pid not in self.killed_workers:
                candidates.append(pid)
        return self.pick(u, candidates)

    # --- one trial ------------------------------------------------------------------------------

    def run(self):
        try:
            if self.netns:
                self.namespaces = [f"dc{self.tag}h", *(f"dc{self.tag}a{i}" for i in range(3))]
                bridge_hosts(self.namespaces[0], self.namespaces[1:], NET,
                             [f"{NET}.{i + 2}" for i in range(3)])
            self.start_store()
            for slot in range(3):
                self.start_agent(slot)
            t0 = time.monotonic()
            schedule = list(self.schedule)
            last_fault = t0
            deadline = None
            while True:
                now = time.monotonic()
                # What is due to end (a pause, a cut, a member down) ends before what is due to
                # begin, so that a driver held up (an etcd member starting) keeps their order.
                for item in [p for p in self.pending if p[0] <= now]:
                    self.pending.remove(item)
                    item[1]()
                    last_fault = max(last_fault, now)
                while schedule and now - t0 >= schedule[0][0]:
                    t, kind, u, v = schedule.pop(0)
                    detail = self.fire(kind, u, v)
                    if detail is not None:
                        self.faults.append((now - t0, kind, detail))
                    last_fault = now
                if not schedule and not self.pending:
                    deadline = deadline or last_fault + LIVENESS
                    if all(a.proc.poll() is not None for a in self.agents):
                        break
                    if now > deadline:
                        for a in self.agents:
                            if a.proc.poll() is None:
                                self.violations.append(
                                    f"liveness: agent {a.name} still running {LIVENESS:.0f}s "
                                    "after the last fault")
                                a.proc.send_signal(signal.SIGCONT)
                                a.proc.kill()
                        break
                time.sleep(0.02)  # the driver's own tick: faults fire on the schedule's clock
            for a in self.agents:
                a.status = a.proc.wait()
            self.check()
        finally:
            self.cleanup()
        return not self.violations

    # --- invariants -----------------------------------------------------------------------------

    def workers(self):
        out = []
        for f in sorted(os.listdir(self.out)):
            node, pid = f[2:].rsplit(".", 1)
            lines = open(os.path.join(self.out, f)).read().splitlines()
            if not lines or not lines[0].startswith("start "):
                continue
            _, t, rank, world, rnd, restarts = lines[0].split()
            stamps = [float(l.split()[1]) for l in lines if len(l.split()) >= 2]
            out.append({"node": node, "pid": int(pid), "rank": int(rank), "world": int(world),
                        "round": rnd, "start": float(t), "end": max(stamps),
                        "how": lines[-1].split()[0]})
        return out

    def check(self):
        agents = {a.name: a for a in self.agents}
        ws = self.workers()
        # Liveness and the agents' exits.
        finished = any(a.status == 0 for a in self.agents if a.killed_at is None)
        exhausted_ok = self.worker_kills > self.max_restarts
        # etcd without a quorum for the heartbeat timeout or more (a new leader's election comes on
        # top): no lease can be kept, and the agents rightly stop with "etcd is unreachable".
        no_quorum = self.longest_without_quorum() >= HEARTBEAT * 0.75
        for a in self.agents:
            if a.killed_at is not None:
                continue
            err = open(a.log, errors="replace").read()
            if a.status == 0:
                continue
            if a.status == 1 and exhausted_ok and "no restarts remain" in err:
                continue
            if a.status == 3 and "has already ended" in err and (finished or exhausted_ok):
                continue
            if a.status == 3 and no_quorum and "etcd is unreachable" in err:
                continue
            if a.status == 3 and no_quorum and "nodes joined within" in err:
                continue  # a replacement whose peers stopped for the lost quorum
            last = err.strip().splitlines()[-3:]
            self.violations.append(f"liveness: agent {a.name} exited {a.status}: {' | '.join(last)}")
        if not finished and not exhausted_ok and not no_quorum:
            self.violations.append("liveness: the job did not finish and no fault justifies it")
        # No split brain: live workers of different rounds never overlap beyond the margin.
        for i, w1 in enumerate(ws):
            for w2 in ws[i + 1:]:
                # Workers of one store's port with different world sizes are of two rounds (a
                # later round's store can get the port an earlier one's closed store had): they
                # must not overlap, as any two rounds' workers. With one world size they may be
                # of one round, but never of one RANK: two of those are two rounds too.
                if w1["round"] == w2["round"] and w1["world"] == w2["world"] and \
                        w1["rank"] != w2["rank"]:
                    continue
                lo, hi = max(w1["start"], w2["start"]), min(w1["end"], w2["end"])
                if hi - lo <= MARGIN:
                    continue
                margin = MARGIN
                exempt = []  # while a worker's agent is paused (and the margin after), nobody can
                for w in (w1, w2):  # stop that worker: those parts of the overlap do not count
                    a = agents.get(w["node"])
                    if a:
                        exempt += [(p0, p1 + MARGIN) for p0, p1 in a.pauses]
                        if any(c0 <= hi and lo <= c1 + HEARTBEAT for c0, c1 in a.cuts):
                            margin = PARTITION_MARGIN
                if uncovered(lo, hi, exempt) > margin:
                    same = " the same RANK" if w1["rank"] == w2["rank"] else ""
                    self.violations.append(
                        f"split brain: pid {w1['pid']} ({w1['node']}, rank {w1['rank']}/"
                        f"{w1['world']}, {w1['round']}) and pid {w2['pid']} ({w2['node']}, rank "
                        f"{w2['rank']}/{w2['world']}, {w2['round']}) ran together for "
                        f"{uncovered(lo, hi, exempt):.2f}s outside any pause{same}")
        # No worker outlives its SIGKILLed agent.
        for w in ws:
            a = agents.get(w["node"])
            if a and a.killed_at is not None and w["end"] > a.killed_at + 0.5 and \
                    w["start"] < a.killed_at:
                self.violations.append(f"orphan: pid {w['pid']} beat {w['end'] - a.killed_at:.2f}s "
                                       f"after its agent {a.name} was SIGKILLed")
        # Complete event logs.
        most_restarts = 0
        for a in self.agents:
            path = os.path.join(self.dir, f"events.{a.name}")
            if not os.path.exists(path):
                if a.killed_at is None:
                    self.violations.append(f"event log: agent {a.name} wrote none")
                continue
            events, last_t = [], 0
            with open(path, errors="replace") as f:
                for n, line in enumerate(f):
                    if not line.endswith("\n") and a.killed_at is not None:
                        break  # a SIGKILL may cut the last line short
                    try:
                        e = json.loads(line)
                    except ValueError:
                        self.violations.append(f"event log: {a.name} line {n + 1} is not JSON")
                        break
                    if e["time_ms"] < last_t:
                        self.violations.append(f"event log: {a.name} line {n + 1} goes back in time")
                    last_t = e["time_ms"]
                    events.append(e)
            if a.killed_at is None and (not events or events[-1]["event"] != "job_end"):
                self.violations.append(f"event log: {a.name} did not end with job_end")
            for e in events:
                if e["event"] == "restart":
                    most_restarts = max(most_restarts, e["restart_count"])
        if most_restarts > min(self.worker_kills, self.max_restarts):
            self.violations.append(f"restarts: the job counted {most_restarts} restarts for "
                                   f"{self.worker_kills} worker(s) killed (budget "
                                   f"{self.max_restarts})")

    def longest_without_quorum(self):
        """etcd: the longest time a majority of the members was down together (s)."""
        if not self.member_down:
            return 0.0
        times = sorted({t for _, a, b in self.member_down for t in (a, b)})
        longest, run = 0.0, 0.0
        for t0, t1 in zip(times, times[1:]):
            down = {m for m, a, b in self.member_down if a <= t0 and t1 <= b}
            run = run + (t1 - t0) if len(down) * 2 > len(self.etcd.names) else 0.0
            longest = max(longest, run)
        return longest

    def cleanup(self):
        for a in self.agents:
            if a.proc.poll() is None:
                a.proc.send_signal(signal.SIGCONT)
                a.proc.kill()
                a.proc.wait()
        # Orphans: anything of this trial still alive once every agent has ended (bounded wait).
        deadline = time.monotonic() + 3
        left = self.trial_processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.trial_processes()
        for pid, cmd in left:
            if "ddprund" in cmd:
                continue
            self.violations.append(f"orphan: pid {pid} ({cmd[:80]}) outlived the trial")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.backend == "c10d" and self.ddprund.poll() is None:
            self.ddprund.kill()
            self.ddprund.wait()
        if self.etcd:
            self.etcd.__exit__(None, None, None)
        if self.namespaces:
            remove_namespaces(self.namespaces)

    def trial_processes(self):
        found = []
        needle = f"CHAOS_TRIAL={self.tag}".encode()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found.append((int(pid), f.read().replace(b"\0", b" ").decode(errors="replace")))
            except OSError:
                continue
        return found


def in_namespace(ns, cmd):
    """`cmd` in network namespace `ns`, as the same process (ip netns exec forks and waits, so its
    pid would not be the command's: signals to it would miss)."""
    return ["nsenter", f"--net=/var/run/netns/{ns}", *cmd]


def uncovered(lo, hi, windows):
    """How much of [lo, hi] no window covers."""
    covered, start = 0.0, lo
    for w0, w1 in sorted(windows):
        w0, w1 = max(w0, start), min(w1, hi)
        if w1 > w0:
            covered += w1 - w0
            start = w1
    return (hi - lo) - covered


def netns_available():
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    name = f"dcprobe{os.getpid()}"
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ddprun")
    ap.add_argument("ddprund")
    ap.add_argument("--backend", default="c10d", choices=["c10d", "etcd", "both"])
    ap.add_argument("--seeds", default="")
    ap.add_argument("--fresh", type=int, default=0, help="this many seeds drawn at random as well")
    ap.add_argument("--minutes", type=float, default=0, help="keep drawing fresh seeds this long")
    ap.add_argument("--keep", default=None, help="where a failing trial's logs are kept")
    ap.add_argument("--no-netns", dest="netns", action="store_false")
    args = ap.parse_args()
    args.netns = args.netns and netns_available()
    backends = ["c10d", "etcd"] if args.backend == "both" else [args.backend]
    if "etcd" in backends and not have_etcd():
        print("campaign: etcd is not installed: the etcd backend is skipped")
        backends.remove("etcd")
    # A seed is drawn on every backend, or, written BACKEND:SEED, on that backend alone (the
    # schedule a seed draws depends on the backend, so a seed found on one repeats only there).
    queue = []
    for entry in filter(None, args.seeds.split(",")):
        backend, _, seed = entry.rpartition(":")
        if backend and backend not in ("c10d", "etcd"):
            ap.error(f"--seeds: {entry!r}: the backend must be c10d or etcd")
        queue += [(b, int(seed)) for b in backends if b == backend or not backend]
    for _ in range(args.fresh):
        seed = random.SystemRandom().randrange(1, 10**6)
        queue += [(b, seed) for b in backends]
    keep = args.keep or tempfile.mkdtemp(prefix="chaos-failures-")
    stop_at = time.monotonic() + args.minutes * 60 if args.minutes else None
    results = []  # (backend, seed, ok, faults, violations, seconds)
    while queue or (stop_at and time.monotonic() < stop_at):
        if not queue:
            s = random.SystemRandom().randrange(1, 10**6)
            queue = [(b, s) for b in backends]
        backend, seed = queue.pop(0)
        trial = Trial(args, seed, backend)
        started = time.monotonic()
        try:
            ok = trial.run()
        except Exception as e:  # noqa: BLE001 - the driver's own trouble fails the trial, named
            trial.violations.append(f"driver: {type(e).__name__}: {e}")
            ok = False
        took = time.monotonic() - started
        faults = ", ".join(f"{k} ({d}) at {t:.1f}s" for t, k, d in trial.faults)
        results.append((backend, seed, ok, trial.faults, trial.violations, took))
        if ok:
            print(f"trial {backend} seed {seed}: ok in {took:.0f}s; {faults}", flush=True)
            shutil.rmtree(trial.dir, ignore_errors=True)
        else:
            kept = os.path.join(keep, os.path.basename(trial.dir))
            shutil.move(trial.dir, kept)
            print(f"trial {backend} seed {seed}: FAILED in {took:.0f}s; {faults}", flush=True)
            for v in trial.violations:
                print(f"    {v}", flush=True)
            print(f"    logs: {kept}", flush=True)
            print_log_tails(kept)
    summarize(results)
    return 0 if all(r[2] for r in results) else 1


def print_log_tails(folder, lines=40, width=300):
    """The end of every agent's log of a failed trial: the folder kept may not outlive the run (a
    suite's scratch folder), the test's output does."""
    logs = [f for f in os.listdir(folder) if f.startswith("agent.") and f.endswith(".log")]
    for name in sorted(logs):
        with open(os.path.join(folder, name), errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        print(f"    --- the last {len(tail)} lines of {name}:", flush=True)
        for line in tail:
            print(f"    {line[:width]}", flush=True)


def summarize(results):
    print("\n# campaign summary")
    print(f"{'backend':8} {'trials':>6} {'failed':>6} {'faults':>6}  faults by kind")
    for backend in sorted({r[0] for r in results}):
        mine = [r for r in results if r[0] == backend]
        kinds = {}
        for r in mine:
            for _, k, _ in r[3]:
                kinds[k] = kinds.get(k, 0) + 1
        print(f"{backend:8} {len(mine):6} {sum(not r[2] for r in mine):6} "
              f"{sum(kinds.values()):6}  " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    failed = [r for r in results if not r[2]]
    for backend, seed, _, _, violations, _ in failed:
        print(f"failed: {backend} seed {seed}: {violations[0]}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")


if __name__ == "__main__":
    sys.exit(main())
