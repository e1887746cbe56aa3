"""--node_check across four nodes, each in a network namespace of its own on one bridge (ddprund in a
fifth): a node whose CPU is throttled by a cgroup quota, or whose link is rate-limited with tc's
tbf, is kept out, named with its probe and how much slower, and the job runs on the other three
(--nnodes=3:4); the partners of the slow link are not blamed; healthy nodes are never kept out.
Real agents, real probes, real workers. Skipped (77) where namespaces or cgroups cannot be made.

    node_check_test.py DDPRUN DDPRUND CASE    (CASE: one of the functions named case_*)
"""
import fcntl
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from agents import BridgedJob, rdzv_id
from job_logs import events
from proc_util import left_running

DDPRUN = DDPRUND = None
NET = "10.216.0"
CPU_CGROUP = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller (cpu.cfs_quota_us)

# Each worker says on which host (ran.<host>) it ran, as which node and in which world, then waits
# for the test (bounded).
WORKER = ("echo \"$GROUP_RANK $WORLD_SIZE\" > \"$OUT/ran.$HOST_INDEX\"; i=0; "
          "while [ ! -e \"$OUT/go\" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done")


def quota_cgroup(quota_percent):
    """A new cpu cgroup with that quota (per 100 ms); the caller removes it."""
    if not os.path.isdir(CPU_CGROUP):
        print("no cgroup v1 cpu controller here")
        sys.exit(77)
    path = os.path.join(CPU_CGROUP, f"ddprun-node-check-{os.getpid()}")
    os.mkdir(path)
    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(quota_percent * 1000))
    return path


class Cluster(BridgedJob):
    """Four host namespaces and a head one with the job's ddprund; agents started in them (with
    nsenter: the probe reads its cgroups' cpu.stat in the machine's /sys). `jobs` are the agents
    of the job started last."""

    CONF = "last_call_timeout=3,join_timeout=60"

    def __init__(self):
        super().__init__("nc", 4, NET, DDPRUN, DDPRUND, nsenter=True)
        self.out = tempfile.mkdtemp()
        self.cgroup, self.run_id = None, None

    def __exit__(self, *exc):
        open(os.path.join(self.out, "go"), "w").close()
        for p in self.agents.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass  # killed below
        super().__exit__(*exc)
        if self.cgroup:
            os.rmdir(self.cgroup)

    def throttle(self, quota_percent):
        """A cpu cgroup with that quota (per 100 ms), for one agent and all it starts."""
        self.cgroup = quota_cgroup(quota_percent)
        return self.cgroup

    def rate_limit(self, i, rate):
        subprocess.run(["ip", "netns", "exec", self.hosts[i], "tc", "qdisc", "add", "dev", "eth0",
                        "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"],
                       check=True, capture_output=True)

    def start(self, run_id, cgroup_of=None, extra=(), hosts=range(4), nnodes="3:4"):
        """The agents of job `run_id` on `hosts` (agent i in cgroup `cgroup_of[i]` where given),
        added to those started before for the same job."""
        self.run_id = run_id
        for i in hosts:
            into = (cgroup_of or {}).get(i)
            self.agent(run_id, i, nnodes=nnodes,
                       extra=["--node_check", f"--event_log={self.out}/events.{run_id}.{i}.jsonl",
                              *extra],
                       command=["--no_python", "/bin/sh", "-c", WORKER],
                       env={"OUT": self.out, "HOST_INDEX": str(i)},
                       wrap=["/bin/sh", "-c", f'echo $$ > {into}/tasks && exec "$@"', "sh"]
                       if into else ())
        return self.jobs

    @property
    def jobs(self):
        return [p for (run_id, _), p in self.agents.items() if run_id == self.run_id]

    def events(self, run_id, i, name):
        return events(f"{self.out}/events.{run_id}.{i}.jsonl", name)


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def probes():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and "ddprun-node-probe" in cmdline(p)]


def wait_for_workers(c, count, timeout=90, exits=0):
    """The `count` workers' files once they are there; fails as soon as more than `exits` agents
    ended first, or after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ran = [f for f in os.listdir(c.out) if f.startswith("ran.")]
        if len(ran) >= count:
            return ran
        if sum(a.poll() is not None for a in c.jobs) > exits:
            break
        time.sleep(0.05)
    raise AssertionError(f"{count} workers did not start: "
                         + "\n".join(a.stderr.read()[-3000:] if a.poll() is not None else "running"
                                     for a in c.jobs))


def kept_out_job(c, run_id, slow, probe, said="x slower than the round's median", measured=True):
    """Checks, once the agents started, that node `slow` alone is kept out by `probe` (its error
    line says `said`) and that the job runs on the other three; returns that line and the
    verdict. `measured`: the verdict gives how many times the median it was."""
    ran = wait_for_workers(c, 3, exits=1)
    status = c.status(run_id)
    open(os.path.join(c.out, "go"), "w").close()
    results = [(a.wait(timeout=90), a.stderr.read()) for a in c.jobs]
    codes = [r[0] for r in results]
    assert codes[slow] == 4 and codes.count(0) == 3, (codes, results[slow][1][-3000:])
    line = [x for x in results[slow][1].splitlines() if "node check: this node stays out" in x]
    assert len(line) == 1 and said in line[0], results[slow][1][-3000:]
    worlds = {open(os.path.join(c.out, f)).read().split()[1] for f in ran}
    assert worlds == {"3"} and len(ran) == 3 and f"ran.{slow}" not in ran, (ran, worlds)
    verdicts = [e for i in range(4) for e in c.events(run_id, i, "node_check")]
    assert verdicts and all(len(v["slow"]) == 1 and v["slow"][0]["probe"] == probe for v in verdicts), verdicts
    ratio = " [0-9.]+x the median" if measured else ""
    assert re.search(rf"^node check of round \d+ \(4 nodes, --node_check_factor 2\): node \S+ kept "
                     rf"out \({probe}{ratio}\)$", status, re.M), status
    for i in range(4):
        if i != slow:
            assert "node check: this node stays out" not in results[i][1], results[i][1][-2000:]
    assert not left_running(c.out), left_running(c.out)
    return line[0].split("[error] ", 1)[1], verdicts[0]


def case_a_throttled_node_is_kept_out():
    with Cluster() as c:
        # 15%, as in the spare case: beside the suite's idle-priority compiles a 30% node measured
        # 2.35-2.64x slow here (3.1-3.5x on a quiet machine: under that load a free kernel's CPU
        # time grew 1.5x, a quota-held one's 1.2x), and once in CI under the factor of 2.
        cgroup = c.throttle(15)
        c.start("throttled", cgroup_of={2: cgroup})
        line, verdict = kept_out_job(c, "throttled", 2, "compute")
        assert verdict["slow"][0]["node_rank"] == [e["node_rank"] for e in
                                                   c.events("throttled", 2, "round_formed")][-1]
    print(f"4 nodes, one under a 15% CPU quota: '{line}'; the job ran on the other 3: passed")


def case_a_rate_limited_link_is_kept_out_not_its_partners():
    with Cluster() as c:
        c.rate_limit(1, "200mbit")
        c.start("limited")
        line, verdict = kept_out_job(c, "limited", 1, "link")
    print(f"4 nodes, one link limited to 200 Mbit/s: '{line}'; its partners ran: passed")


# --node_check_timeout for the cases that wait it out: 12 s, not 6. A suspect (the stalled link;
# in the frozen case, one the first measurement finds by chance under load) is measured again,
# three times as long, and four nodes on this host take turns for the compute: beside the suite's
# idle-priority compiles that measurement timed out at 6 s on every node (each case failed once
# that way here).
SHORT_TIMEOUT = 12


def case_a_link_that_never_completes_is_kept_out():
    # A link at 1 Mbit/s: none of its all-reduces of 4 MiB (34 s) can end within its phase's
    # share of --node_check_timeout; the node is slow beyond measure, its partners (each with one
    # link that did complete) are not.
    with Cluster() as c:
        c.rate_limit(3, "1mbit")
        c.start("stalled", extra=[f"--node_check_timeout={SHORT_TIMEOUT}"])
        line, verdict = kept_out_job(c, "stalled", 3, "link",
                                     "link: no all-reduce of 4096 KiB with nodes 2,0 completed",
                                     measured=False)
    print(f"4 nodes, one link at 1 Mbit/s and --node_check_timeout={SHORT_TIMEOUT}: "
          f"'{line}': passed")


def case_a_node_that_never_answers_is_kept_out():
    # Its agent freezes its own probe (SIGSTOP through the test): it never reports; at
    # --node_check_timeout the agent kills it and the node counts as failed.
    with Cluster() as c:
        c.start("frozen", extra=[f"--node_check_timeout={SHORT_TIMEOUT}"])
        deadline = time.monotonic() + 30
        frozen = None
        while frozen is None and time.monotonic() < deadline:
            frozen = next((pid for pid in probes() if "--rank 1 " in cmdline(pid)
                           and f"--run {rdzv_id('frozen')} " in cmdline(pid)), None)
        assert frozen is not None, "no probe of node 1 seen"
        os.kill(frozen, signal.SIGSTOP)
        line, verdict = kept_out_job(c, "frozen", 1, "no answer",
                                     "its probe gave no answer: the probe failed: timed out after "
                                     f"{SHORT_TIMEOUT} s",
                                     measured=False)
    print(f"4 nodes, one probe frozen, --node_check_timeout={SHORT_TIMEOUT}: '{line}': passed")


TURN = f"/tmp/ddprun-node-probe.{os.getuid()}.lock"  # the host's turn (host_turn.hpp)


def hold_turn(fd, pid):
    """Takes the host's turn on `fd` and records `pid` as its holder, as a probe does."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, f"{pid:10d}\n".encode(), 0)


# A probe stopped in its turn: it holds the turn, recorded as its holder, and stops itself (it dies
# with the test, whatever ends the test).
STOPPED_HOLDER = ("import ctypes, os, signal, sys\n"
                  "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
                  f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                  "from node_check_test import hold_turn\n"
                  "hold_turn(os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600), os.getpid())\n"
                  "os.kill(os.getpid(), signal.SIGSTOP)\n")


def turn_held_job(c, run_id, said):
    """Two nodes checked while the host's turn is held: both pass, each probe's log saying `said`;
    returns the seconds from the agents' start to their workers'."""
    started = time.monotonic()
    c.start(run_id, extra=["--node_check_timeout=6"], hosts=range(2), nnodes="2")
    ran = wait_for_workers(c, 2)
    took = time.monotonic() - started
    open(os.path.join(c.out, "go"), "w").close()
    results = [(a.wait(timeout=90), a.stderr.read()) for a in c.jobs]
    checks = [e for i in range(2) for e in c.events(run_id, i, "node_check")]
    assert [r[0] for r in results] == [0, 0], results
    assert len(ran) == 2 and len(checks) == 2 and not any(e["slow"] for e in checks), checks
    for _, err in results:
        m = re.search(r"logs in (\S+)", err)
        assert m, err
        with open(os.path.join(m.group(1), "node_check.0.log")) as f:
            log = f.read()
        assert said in log, log
    return took


def case_a_probe_holding_the_hosts_turn_costs_the_other_nodes_nothing():
    # The compute probes of the nodes that share a host take turns (a lock file of the user's in
    # /tmp). A probe stopped or hung in its turn held it for good, and every other node of the host
    # timed out in the wait and was kept out (a node_check case froze its probe in its turn, now and
    # then). A stopped holder is not waited for; one that is not stopped (here the test itself, as
    # a hung probe) a fifth of the probe's time.
    holder = subprocess.Popen([sys.executable, "-c", STOPPED_HOLDER, TURN])
    try:
        deadline = time.monotonic() + 30
        while "\nState:\tT" not in open(f"/proc/{holder.pid}/status").read():
            assert time.monotonic() < deadline and holder.poll() is None, "the holder did not stop"
            time.sleep(0.01)
        with Cluster() as c:
            stopped = turn_held_job(c, "stopped", f"the probe holding this host's turn (pid "
                                    f"{holder.pid}) is stopped")
    finally:
        holder.kill()
        holder.wait()
    turn = os.open(TURN, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with Cluster() as c:
            hold_turn(turn, os.getpid())  # a holder alive and running: hung in its turn
            hung = turn_held_job(c, "hung", "the host's turn did not come within the wait")
    finally:
        os.pwrite(turn, f"{0:10d}\n".encode(), 0)
        os.close(turn)  # (lets go of the turn)
    print(f"2 nodes, the host's turn held: by a stopped probe, both passed (workers after "
          f"{stopped:.1f} s); by a hung one, both measured without it after a fifth of their time "
          f"and passed (workers after {hung:.1f} s): passed")


def case_a_spare_takes_the_place_of_a_node_kept_out():
    # --nnodes=3:3 and a fourth node waiting as a spare: the throttled member is kept out, the
    # spare joins the next round, is checked in turn, and the job runs on it.
    with Cluster() as c:
        # 15%, not 30%: early in a full suite a 30% node measured 2.24x slow once, then under 2x
        # when measured again to confirm, and stayed in.
        cgroup = c.throttle(15)
        c.start("spare", cgroup_of={0: cgroup}, hosts=[0, 1, 2], nnodes="3:3")
        deadline = time.monotonic() + 60
        while not all(c.events("spare", i, "round_formed") for i in range(3)):
            assert time.monotonic() < deadline, "round 0 did not form"
            time.sleep(0.05)
        c.start("spare", hosts=[3], nnodes="3:3")
        ran = wait_for_workers(c, 3, exits=1)
        open(os.path.join(c.out, "go"), "w").close()
        results = [(a.wait(timeout=90), a.stderr.read()) for a in c.jobs]
        assert [r[0] for r in results] == [4, 0, 0, 0], [r[1][-2000:] for r in results]
        assert sorted(f.split(".")[1] for f in ran) == ["1", "2", "3"], ran
        worlds = {open(os.path.join(c.out, f)).read().split()[1] for f in ran}
        assert worlds == {"3"}, worlds
        # The spare ran a worker, after a check that included it.
        spare_checks = c.events("spare", 3, "node_check")
        assert len(spare_checks) == 1 and spare_checks[0]["slow"] == [], spare_checks
        assert c.events("spare", 3, "workers_started"), "the spare ran no worker"
        assert not left_running(c.out), left_running(c.out)
    print("3:3 nodes and a spare, a member under a 15% CPU quota: kept out, the spare checked and "
          "in its place: passed")


def case_healthy_nodes_are_never_kept_out():
    times, runs, suspected = [], 20, 0
    with Cluster() as c:
        for run in range(runs):
            run_id = f"healthy{run}"
            for f in os.listdir(c.out):
                if f.startswith("ran.") or f == "go":
                    os.remove(os.path.join(c.out, f))
            c.start(run_id)
            wait_for_workers(c, 4)
            open(os.path.join(c.out, "go"), "w").close()
            results = [(a.wait(timeout=90), a.stderr.read()) for a in c.jobs]
            assert [r[0] for r in results] == [0] * 4, (run, [r[1][-2000:] for r in results])
            checks = [c.events(run_id, i, "node_check") for i in range(4)]
            assert all(len(x) == 1 and x[0]["slow"] == [] for x in checks), (run, checks)
            times.append(max(x[0]["seconds"] for x in checks))
            suspected += bool(checks[0][0]["unconfirmed"])
        assert not left_running(c.out), left_running(c.out)
    print(f"{runs} runs of the 4-node check, no node kept out ({suspected} suspected by a first "
          f"measurement and cleared by the second); the check took "
          f"{statistics.median(times):.2f} s (median), {max(times):.2f} s at most: passed")


def case_agents_on_one_host_are_checked_with_the_plainest_command_line():
    # Three agents of one job on this host, a ddprund on loopback, no --event_log and no
    # --log_dir: the check runs (it used to be skipped without an event log: the round did not
    # name its members) and keeps the node under a 20% CPU quota out; the job runs on the others.
    out = tempfile.mkdtemp()
    store = subprocess.Popen([DDPRUND, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                             stdout=subprocess.PIPE, text=True)
    cgroup = quota_cgroup(20)
    agents = []
    try:
        port = int(store.stdout.readline())
        for i in range(3):
            cmd = [DDPRUN, "--nnodes=2:3", "--nproc_per_node=1", "--rdzv_backend=c10d",
                   f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=loopback",
                   "--rdzv_conf=last_call_timeout=3,join_timeout=60", "--node_check", "--no_python",
                   "/bin/sh", "-c", 'echo "$GROUP_RANK $WORLD_SIZE" > "$OUT/ran.$HOST_INDEX"']
            if i == 1:
                cmd = ["/bin/sh", "-c", f'echo $$ > {cgroup}/tasks && exec "$@"', "sh", *cmd]
            agents.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                           text=True,
                                           env={**os.environ, "OUT": out, "HOST_INDEX": str(i)}))
        results = [(a.wait(timeout=120), a.stderr.read()) for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()
        store.kill()
        store.wait()
        os.rmdir(cgroup)
    codes = [r[0] for r in results]
    assert codes == [0, 4, 0], (codes, [r[1][-2000:] for r in results])
    line = [x for x in results[1][1].splitlines() if "node check: this node stays out" in x]
    assert len(line) == 1 and "compute" in line[0], results[1][1][-2000:]
    for i in (0, 2):
        assert "node check: node" in results[i][1] and "is kept out: compute" in results[i][1], \
            results[i][1][-2000:]
    ran = sorted(f for f in os.listdir(out) if f.startswith("ran."))
    assert ran == ["ran.0", "ran.2"], ran
    assert {open(os.path.join(out, f)).read().split()[1] for f in ran} == {"2"}
    assert not left_running(out), left_running(out)
    print(f"3 agents on one host, one under a 20% CPU quota, no event log: "
          f"'{line[0].split('[error] ', 1)[1]}'; the job ran on the other 2: passed")


if __name__ == "__main__":
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    globals()["case_" + sys.argv[3]]()
