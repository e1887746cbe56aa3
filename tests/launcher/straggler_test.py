"""The straggler check on a real DDP job (torch 2, gloo on CPU, one rank per node) across nodes in
network namespaces of their own on one bridge (the job's ddprund in another): at step K one node's
worker is moved into a cgroup with a CPU quota of 20%. Its agent's peers name it within a bounded
number of steps, with the figure, in the log of the plainest command line and in `ddprun status`;
with --straggler_action=replace a spare takes its place, the job resumes from the checkpoints in
memory, its steps after the swap are as fast as before the slowdown, and it ends bit-identical to
an uninterrupted run. A node whose link is limited (tc tbf) at step K is named for its link, not
its compute. A healthy job beside a process busy in bursts is never named in 200 steps.
Skipped (77) where namespaces or cgroups cannot be made.

    straggler_test.py DDPRUN DDPRUND CASE    (CASE: one of the functions named case_*)
"""
import datetime
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from checkpoint_test import bit_identical
from agents import BridgedJob
from proc_util import left_running, wait_for
from job_logs import node_events

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workloads", "straggler_ddp.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
NET = "10.218.0"
HOSTS = 4
ADDRS = [f"{NET}.{11 + i}" for i in range(HOSTS)]
CPU_CGROUP = "/sys/fs/cgroup/cpu"  # cgroup v1's cpu controller (cpu.cfs_quota_us)
K = 25  # the step from which the slow node is slow
# The slow node's quota: 20%, not the 40% of scripts/bench/straggler.sh (a quiet machine). A step
# here takes 0.18 s, about 0.12 s of it the worker's CPU (0.29 s a step at 40%). Beside the
# suite's idle-priority compiles every worker's steps took 0.30-0.45 s, so a 40% quota no longer
# held node 2 back and no verdict came in 65 steps (a fresh suite's run named it after 53): the
# job was not held back. At 20% it is, loaded or not (named after 5 steps twice under those
# compiles).
QUOTA = 20
# Steps after K within which the slow node is named. The target is 10 (scripts/bench/straggler.sh
# measures it at 40%: a median of 6-7). The bound is looser: a node held back only 35-40% must lag
# beyond the threshold for two steps' time (10-14 steps), and a set in which it happens not to
# lag starts that count again (at 40%, a full suite's run once named it after 26 steps, 40% held
# back).
VERDICT_WITHIN = 30
# The replacement case's steps: room for a verdict as late as VERDICT_WITHIN and 20 steps after it.
STEPS_REPLACED = K + VERDICT_WITHIN + 20
LINE = re.compile(r"^\[([0-9-]+ [0-9:.]+)\] \[ddprun\] \[warning\] straggler check: node (\d+) "
                  r"\((\S+)\) holds every step back by (\d+)%", re.M)


class Cluster(BridgedJob):
    """Host namespaces and a head one with the job's ddprund; agents started in them (with
    nsenter: they see the machine's cgroups)."""

    def __init__(self):
        super().__init__("sg", HOSTS, NET, DDPRUN, DDPRUND, nsenter=True)
        self.cgroup = None

    def __enter__(self):
        if not os.path.isdir(CPU_CGROUP):
            print("no cgroup v1 cpu controller here")
            sys.exit(77)
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if self.cgroup:
            os.rmdir(self.cgroup)

    def start(self, run_id, i, out, steps, nnodes="3", extra=(), env=None):
        return self.agent(run_id, i, nnodes=nnodes, extra=["--max_restarts=2", *extra],
                          command=[WORKLOAD, str(steps), out],
                          env={"PYTHON_EXEC": PY, **(env or {})})

    def slow_down(self, out, rank=2, quota_percent=QUOTA):
        """Once rank `rank` (one rank per node: node `rank`'s) wrote its pid at step K, moves it
        into a new cpu cgroup with that quota (per 100 ms); returns when it did (wall clock)."""
        path = os.path.join(out, f"at.{rank}")
        wait_for(lambda: os.path.exists(path) and os.path.getsize(path) > 0, "step K", 180)
        self.cgroup = os.path.join(CPU_CGROUP, f"ddprun-straggler-{os.getpid()}")
        os.mkdir(self.cgroup)
        with open(os.path.join(self.cgroup, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(quota_percent * 1000))
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
            f.write(open(path).read())
        return time.time()

    def rate_limit(self, out, rank=2, rate="100mbit"):
        """Once rank `rank` reached step K, limits what node `rank` sends (its eth0) to `rate`;
        returns when it did (wall clock)."""
        path = os.path.join(out, f"at.{rank}")
        wait_for(lambda: os.path.exists(path) and os.path.getsize(path) > 0, "step K", 180)
        subprocess.run(["ip", "netns", "exec", self.hosts[rank], "tc", "qdisc", "add", "dev",
                        "eth0", "root", "tbf", "rate", rate, "burst", "64kbit", "latency",
                        "400ms"], check=True, capture_output=True)
        return time.time()


# Steps a job runs on after its verdict: time for a second verdict in the same round (there must be
# none) or a node leaving where it should not, at a few seconds' cost.
AFTER_VERDICT = 8


def end_once_named(c, run_id, out, until, timeout=240):
    """Polls `ddprun status` of job `run_id` (at most once a second) until it shows a verdict, lets
    rank 0 run AFTER_VERDICT more steps of attempt 0, then has the job end after its next step (the
    workload's UNTIL_FILE, at `until`): the further steps of a slowed node prove nothing more.
    Returns once the job was told, or at once where node 0's agent ended first (the case's
    assertions then say what it lacked)."""
    deadline = time.monotonic() + timeout
    named_at = None
    while c.agents[(run_id, 0)].poll() is None:
        began = time.monotonic()
        assert began < deadline, "timed out waiting for the verdict and the steps after it"
        steps = steps_done(out)
        if named_at is None and "straggler in round" in c.status(run_id):
            named_at = steps
        if named_at is not None and steps >= named_at + AFTER_VERDICT:
            open(until, "w").close()
            return
        time.sleep(max(0.0, 1 - (time.monotonic() - began)))


def steps_done(out):
    """How many steps rank 0 has written of attempt 0 (whole lines: it may be writing one)."""
    try:
        with open(os.path.join(out, "steps.0"), "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def step_times(out, attempt):
    """Rank 0's steps of `attempt`: [(step, when it ended, wall clock)]."""
    with open(os.path.join(out, f"steps.{attempt}")) as f:
        return [(int(s), float(t)) for s, t in (line.split() for line in f)]


def durations(times):
    return [b[1] - a[1] for a, b in zip(times, times[1:]) if b[0] == a[0] + 1]


def case_a_node_slowed_while_training_is_named_with_the_plainest_command_line():
    """No --event_log, no action: node 0's log names the slow node with its figure within
    VERDICT_WITHIN steps of K; `ddprun status` says it; the job runs to its end (the step after
    the verdict and AFTER_VERDICT more, or its 90th)."""
    out = tempfile.mkdtemp()
    until = os.path.join(out, "until")
    with Cluster() as c:
        for i in range(3):
            c.start("named", i, out, 90, env={"MARK_AT": str(K), "UNTIL_FILE": until})
        slowed = c.slow_down(out)
        end_once_named(c, "named", out, until)
        errs = c.finish("named", {0: 0, 1: 0, 2: 0})
        status = c.status("named")
    found = LINE.findall(errs[0])
    assert len(found) == 1, errs[0][-3000:]
    when, node, host, percent = found[0]
    assert node == "2" and int(percent) > 20, found
    for i in (1, 2):
        assert "straggler check: node" not in errs[i], errs[i][-2000:]
    named = datetime.datetime.strptime(when, "%Y-%m-%d %H:%M:%S.%f").timestamp()
    times = step_times(out, 0)
    after = [s for s, t in times if slowed < t <= named]
    assert after and len(after) <= VERDICT_WITHIN, (
        len(after), percent, [round(d * 1000) for d in durations(times)])
    assert re.search(r"^straggler in round \d+: node 2 \(\S+\) held every step back by \d+% "
                     r"\(computing [0-9.]+x the others' median, waiting [0-9.]+x\) for \d+ steps: "
                     r"reported$", status, re.M), status
    assert not left_running(out), left_running(out)
    print(f"node 2 slowed at step {K} to a {QUOTA}% CPU quota: named after {len(after)} steps "
          f"({percent}% held back): passed")


def case_with_replace_and_no_restart_left_the_slow_node_is_reported_and_the_job_ends_well():
    """--straggler_action=replace where the round could re-form without the slow node (3 nodes of
    --nnodes=2:3) but --max_restarts=0 (torchrun's default): a replacement would spend a restart
    and end the job, so the verdict is reported, saying why, and the job runs to its end (some
    steps after the verdict, or its 60th)."""
    out = tempfile.mkdtemp()
    until = os.path.join(out, "until")
    with Cluster() as c:
        for i in range(3):
            c.start("norestart", i, out, 60, nnodes="2:3",
                    env={"MARK_AT": str(K), "UNTIL_FILE": until},
                    extra=["--straggler_action=replace", "--max_restarts=0",
                           f"--event_log={out}/events.{i}.jsonl"])
        c.slow_down(out)
        end_once_named(c, "norestart", out, until)
        errs = c.finish("norestart", {0: 0, 1: 0, 2: 0})
    verdicts = [e for i in range(3) for e in node_events(out, i, "straggler")]
    assert len(verdicts) == 1 and verdicts[0]["node_rank"] == 2, verdicts
    assert verdicts[0]["action"] == "report", verdicts
    assert "--max_restarts 0" in verdicts[0]["not_replaced"], verdicts
    assert "not replaced: a replacement spends a restart" in errs[0], errs[0][-3000:]
    assert "this node leaves the job" not in errs[2], errs[2][-3000:]
    assert not left_running(out), left_running(out)
    print(f"replace with --max_restarts=0: node 2 named and reported "
          f"('{verdicts[0]['not_replaced']}'), the job ran to its end: passed")


def case_with_replace_a_spare_takes_the_slow_nodes_place_bit_identical():
    """3:3 nodes and a spare, --straggler_action=replace: the slow node leaves (its own line says
    why), the spare joins, the round resumes from memory, its steps run at the healthy speed, and
    the job ends bit-identical to an uninterrupted run."""
    whole, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    extra = ["--straggler_action=replace"]
    with Cluster() as c:
        for i in range(3):
            c.start("whole", i, whole, STEPS_REPLACED, nnodes="3:3",
                    extra=[*extra, f"--event_log={whole}/events.{i}.jsonl"])
        c.finish("whole", {0: 0, 1: 0, 2: 0})
        for i in range(3):
            c.start("swap", i, out, STEPS_REPLACED, nnodes="3:3", env={"MARK_AT": str(K)},
                    extra=[*extra, f"--event_log={out}/events.{i}.jsonl"])
        wait_for(lambda: os.path.exists(os.path.join(out, "steps.0")), "the first step", 180)
        c.start("swap", 3, out, STEPS_REPLACED, nnodes="3:3",
                extra=[*extra, f"--event_log={out}/events.3.jsonl"])  # the spare
        c.slow_down(out)
        errs = c.finish("swap", {0: 0, 1: 0, 2: 4, 3: 0})
    assert not any(node_events(whole, i, "straggler") for i in range(3)), \
        "a verdict in a healthy run"
    verdicts = [e for i in range(4) for e in node_events(out, i, "straggler")]
    assert len(verdicts) == 1 and verdicts[0]["node_rank"] == 2, verdicts
    assert verdicts[0]["action"] == "replace", verdicts
    assert "straggler check: this node leaves the job" in errs[2], errs[2][-3000:]
    resumed = [e for e in node_events(out, 3, "round_formed")]
    assert resumed and resumed[-1]["num_nodes"] == 3, resumed
    # The swap spends one restart (so attempt 1), whichever ends the round first: the flag or
    # the slow node's leaving.
    assert resumed[-1]["restart_count"] == 1, resumed
    assert bit_identical(whole, out), "the job's result differs from an uninterrupted run's"
    healthy = statistics.median(durations(step_times(out, 0))[: K - 2])
    after_swap = durations(step_times(out, 1))
    assert len(after_swap) >= 10, (
        f"{len(after_swap)} steps after the swap (the verdict came late: the job has "
        f"{STEPS_REPLACED} steps)")
    swapped = statistics.median(after_swap)
    assert swapped < 1.5 * healthy, (swapped, healthy)
    assert not left_running(out), left_running(out)
    print(f"node 2 slowed at step {K}: replaced by the spare, resumed from memory, bit-identical; "
          f"steps {healthy * 1000:.0f} ms before, {swapped * 1000:.0f} ms after the swap: passed")


LINK_LINE = re.compile(r"^\[([0-9-]+ [0-9:.]+)\] \[ddprun\] \[warning\] straggler check: node (\d+) "
                       r"\(\S+\) holds every step back by (\d+)%: its link is ([0-9.]+x slower|"
                       r"far slower) than the round's median", re.M)


def case_a_link_slowed_while_training_is_named_as_the_link_not_the_compute():
    """The plainest command line; at step K node 2's link is limited to 100 Mbit/s (tc tbf in its
    namespace): every node waits longer, none computes longer, so node 0 has every node measure
    its links again and names node 2 for its link, in its log and in `ddprun status`. (At 200
    Mbit/s a fresh suite's healthy steps of 254 ms became 318 ms, 1.25x: a slowdown barely beyond
    the threshold of 20%, which steps of ordinary noise kept breaking off; no verdict came in 240
    s. At 100 Mbit/s, run alone on the same machine: 205 ms became 515 ms, named 14.4 s after the
    limit.)"""
    out = tempfile.mkdtemp()
    until = os.path.join(out, "until")
    with Cluster() as c:
        # The job runs until `ddprun status` shows the verdict (then AFTER_VERDICT steps more), at
        # most 600 steps after K (about 300 s at the limited pace, past the wait below): the verdict
        # came 10.6-15.2 s after the limit in 5 runs by hand, 7.3 s in 2 runs once checkpoint copies
        # stopped crossing the link, but a full suite saw the slowdown 30 s after it, and another
        # none within the 140 steps a job of fixed length then ran, early in the suite.
        for i in range(3):
            c.start("link", i, out, K + 600, env={"MARK_AT": str(K), "UNTIL_FILE": until})
        limited = c.rate_limit(out)
        end_once_named(c, "link", out, until)
        errs = c.finish("link", {0: 0, 1: 0, 2: 0})
        status = c.status("link")
    found = LINK_LINE.findall(errs[0])
    assert len(found) == 1 and found[0][1] == "2", errs[0][-4000:]
    asked = re.search(r"^\[([0-9-]+ [0-9:.]+)\] .*every node measures its links", errs[0], re.M)
    asked_at = datetime.datetime.strptime(asked.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
    named_at = datetime.datetime.strptime(found[0][0], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    assert "its ranks compute" not in errs[0], errs[0][-4000:]  # not named for its compute
    for i in (1, 2):
        assert "straggler check: node" not in errs[i], errs[i][-2000:]
        assert "links again, as node rank 0 asks" in errs[i], errs[i][-2000:]
    assert re.search(r"^straggler in round \d+: node 2 \(\S+\) held every step back by \d+% "
                     r"\(its link .* than the round's median\) for \d+ steps: reported$",
                     status, re.M), status
    assert "kept out" not in status, status  # the measurement while training keeps no node out
    assert not left_running(out), left_running(out)
    print(f"node 2's link limited at step {K}: named for its link ({found[0][2]}% held back, "
          f"{found[0][3]}): the slowdown seen {asked_at - limited:.1f} s after the limit, the link "
          f"named {named_at - asked_at:.1f} s later: passed")


# Busy half the time, in bursts of 50 to 250 ms (a compiler's, a data loader's): load that comes and
# goes, which the scheduler can keep on one node's core for seconds, is what makes a healthy node
# look slow for a few steps (a constant busy loop is spread evenly); it leaves the machine's other
# half to the rest of the suite.
HOG = """import random, time
random.seed(7)
end = time.monotonic() + 300
while time.monotonic() < end:
    burst = random.uniform(0.05, 0.25)
    until = time.monotonic() + burst
    while time.monotonic() < until:
        pass
    time.sleep(burst)
"""


def case_a_healthy_job_beside_a_cpu_heavy_process_is_never_named():
    """200 steps, no slowdown, a process busy in bursts on the machine meanwhile: no verdict."""
    out = tempfile.mkdtemp()
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        with Cluster() as c:
            for i in range(3):
                c.start("hog", i, out, 200, extra=[f"--event_log={out}/events.{i}.jsonl"])
            errs = c.finish("hog", {0: 0, 1: 0, 2: 0})
    finally:
        hog.kill()
        hog.wait()
    for i in range(3):
        assert not node_events(out, i, "straggler"), node_events(out, i, "straggler")
        assert "straggler check: node" not in errs[i], errs[i][-2000:]
    windows = len(step_times(out, 0))
    assert windows >= 199, windows
    assert not left_running(out), left_running(out)
    probes = errs[0].count("every node measures its links")  # a slowdown looked into: no verdict
    print(f"200 healthy steps beside bursts of load: no node named ({probes} link measurements): "
          "passed")


if __name__ == "__main__":
    DDPRUN, DDPRUND, case = sys.argv[1], sys.argv[2], sys.argv[3]
    globals()["case_" + case]()
