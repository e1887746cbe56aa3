"""Hang detection (--hang_timeout): a rank that stops making progress is a failure, whether its
progress is its output (no code change), torch's timers, or heartbeats from Python, C++ (libddp) or
a shell.

    hang_test.py DDPRUN HEARTBEAT_PROBE CASE
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from proc_util import finish, free_port, left_running
from job_logs import events

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
PACKAGE = os.path.join(HERE, "..", "..", "python")  # the folder holding ddprun
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another (torch 2.14).
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = PROBE = None


def ddprun(*args, env=None, timeout=180):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON_EXEC": PY, **(env or {})})


def ddp_rank_blocked(hang_timeout, limit_s, workload_env=None):
    out = tempfile.mkdtemp()
    log = os.path.join(out, "events.jsonl")
    r = ddprun("--standalone", "--nproc_per_node=2", "--max_restarts=1",
               f"--hang_timeout={hang_timeout}", f"--event_log={log}", f"--log_dir={out}/logs",
               os.path.join(WORKLOADS, "hang_ddp.py"), env={"OUT_DIR": out, **(workload_env or {})})
    assert r.returncode == 0, r.stderr
    assert sorted(f for f in os.listdir(out) if f.startswith("done.")) == ["done.1.0", "done.1.1"]
    hang = [e for e in events(log) if e["event"] == "hang"]
    assert len(hang) == 1, hang
    # Whichever silent rank passes its timeout first is declared (under auto, each rank learns its
    # own); the stacks below say which one is stuck where.
    blocked = float(open(os.path.join(out, "blocked")).read())
    detected = hang[0]["time_ms"] / 1000 - blocked
    timeout = max(w["timeout_s"] for w in hang[0]["workers"])
    assert detected < limit_s(timeout), (detected, hang)
    assert "is hung: no progress for" in r.stderr and "restarting the workers" in r.stderr, r.stderr
    # Every rank's stack: rank 1 where it blocked, rank 0 waiting in the backward pass.
    line = next(l for l in r.stderr.splitlines() if "every rank's innermost frame:" in l)
    frames = dict(g.split(": ", 1) for g in line.split("innermost frame: ", 1)[1].split("; "))
    assert frames["rank 1"] == "hang_ddp.py:21 in stuck_in_data_loading", line
    assert "backward" in frames["rank 0"], line
    dumps = glob.glob(f"{out}/logs/*/attempt_0/hang_stacks.log")
    assert len(dumps) == 1 and "stuck_in_data_loading" in open(dumps[0]).read(), dumps
    return detected


def case_a_ddp_rank_blocked_in_data_loading_is_a_failure_that_restarts():
    detected = ddp_rank_blocked("5", lambda timeout: 5 + 2)
    print(f"DDP (gloo), rank 1 blocked at step 10, printing only: hang declared {detected:.1f} s "
          "after it blocked (--hang_timeout=5), the restart ran every step: passed")


def case_the_rank_a_hang_waits_for_is_named():
    lines = []
    for everyone, want in (
            ("0", "hang: rank 1 on node 0 is in `stuck_in_data_loading` (hang_ddp.py:21); the 3 "
                  "others are in `backward`"),
            ("1", "hang: all 4 ranks are in the same place: `stuck_in_data_loading` "
                  "(hang_ddp.py:21)")):
        out = tempfile.mkdtemp()
        r = ddprun("--standalone", "--nproc_per_node=4", "--max_restarts=0", "--hang_timeout=5",
                   os.path.join(WORKLOADS, "hang_ddp.py"),
                   env={"OUT_DIR": out, "HANG_DDP_ALL": everyone})
        assert r.returncode == 1, r.stderr
        logged = [l for l in r.stderr.splitlines() if "[ddprun] [error] hang: " in l]
        assert any(want in line for line in logged), (want, logged)
        # The summary's root cause starts with it too.
        traceback = r.stderr.split("Root Cause (first observed failure):", 1)[1]
        first = next(l for l in traceback.splitlines() if "traceback :" in l)
        assert want in first, (want, first)
        lines.append(first.split("traceback : ", 1)[1])
    print(f"4 DDP ranks, rank 1 blocked: '{lines[0][:90]}...'; all 4 blocked: '{lines[1]}': passed")


def case_auto_learns_the_timeout_from_the_steps():
    # What auto learns depends on how long steps took on this (shared) machine: the bound is the
    # learned timeout plus the agent's tick and slack. Rank 1 blocks once auto has seen its 20
    # intervals; the restarted attempt runs 40 steps, past its own warm-up, and its end (the
    # process group's and the interpreter's teardown) is not a hang.
    detected = ddp_rank_blocked("auto", lambda timeout: timeout + 2,
                                {"HANG_DDP_STEPS": "40", "HANG_DDP_BLOCK_AT": "30"})
    print(f"the same under --hang_timeout=auto (steps of about 100 ms): declared {detected:.1f} s "
          "after it blocked; the restarted attempt ran to its end: passed")


def case_auto_leaves_room_for_a_slow_step_in_every_ten():
    # Steps of about 0.3 s, every tenth 10x as long (3 s: an evaluation): auto learns the slow
    # ones in its warm-up and declares nothing (learning from 5 intervals with a 2 s floor, as
    # ddprun did, declared the first slow step a hang).
    # The plainest command line: no event log, no log folder.
    out = tempfile.mkdtemp()
    r = ddprun("--standalone", "--nproc_per_node=2", "--max_restarts=0", "--hang_timeout=auto",
               os.path.join(WORKLOADS, "hang_ddp.py"),
               env={"OUT_DIR": out, "HANG_DDP_STEPS": "30", "HANG_DDP_BLOCK_AT": "-1",
                    "HANG_DDP_STEP_S": "0.3", "HANG_DDP_SLOW_EVERY": "10",
                    "HANG_DDP_SLOW_S": "2.7"})
    assert r.returncode == 0, r.stderr
    assert "is hung" not in r.stderr, r.stderr
    assert sorted(f for f in os.listdir(out) if f.startswith("done.")) == ["done.0.0", "done.0.1"]
    print("--hang_timeout=auto, 30 DDP steps of about 0.3 s with every tenth 3 s long: no hang "
          "declared: passed")


def case_a_hung_rank_on_the_second_node_is_in_both_nodes_summaries():
    out = tempfile.mkdtemp()
    port = free_port()
    procs = [subprocess.Popen(
        [DDPRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
         f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=hang2", "--max_restarts=1",
         "--hang_timeout=5", f"--event_log={out}/events.{i}.jsonl", f"--log_dir={out}/logs.{i}",
         os.path.join(WORKLOADS, "hang_ddp.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHON_EXEC": PY, "OUT_DIR": out, "HANG_DDP_CHATTY_RANK0": "1"})
        for i in range(2)]
    results = finish(procs, timeout=180)
    both = "\n=====\n".join(r[2] for r in results)
    for status, _, err in results:
        assert status == 0, both
    assert sorted(f for f in os.listdir(out) if f.startswith("done.")) == ["done.1.0", "done.1.1"]
    # Rank 0 keeps printing from a second thread while it waits in the all-reduce: only rank 1's
    # node declares a hang, and the other node hears of it through the rendezvous.
    declared = [[w["rank"] for w in e["workers"]] for i in range(2)
                for e in events(f"{out}/events.{i}.jsonl") if e["event"] == "hang"]
    assert declared == [[1]], (declared, both)
    for i, (_, _, err) in enumerate(results):
        # Every node's summary has every node's ranks: rank 1 where it blocked, rank 0 (the other
        # node's) waiting in the backward pass.
        line = next(l for l in err.splitlines() if "every rank's innermost frame:" in l)
        frames = dict(g.split(": ", 1) for g in line.split("innermost frame: ", 1)[1].split("; "))
        assert frames.get("rank 1") == "hang_ddp.py:21 in stuck_in_data_loading", (i, line)
        assert "backward" in frames.get("rank 0", ""), (i, line)
        if "is hung: no progress" not in err:
            assert "stopping this node's workers: a rank of node" in err, err
    print("DDP (gloo) across two c10d agents, the hung rank on the second node: both nodes' "
          "summaries show both nodes' ranks, the restart ran every step: passed")


def gdb_can_attach():
    """Whether gdb is installed and this machine lets it attach to a process (ptrace)."""
    if not shutil.which("gdb"):
        return False
    child = subprocess.Popen(["sleep", "60"])
    try:
        r = subprocess.run(["gdb", "-p", str(child.pid), "-batch", "-nx", "-ex", "bt"],
                           capture_output=True, text=True, timeout=60)
        return "#0" in r.stdout
    finally:
        child.kill()
        child.wait()


def case_a_hung_native_workers_stacks_come_from_gdb():
    if not gdb_can_attach():
        print("gdb is missing or may not attach to processes here (ptrace): skipped")
        sys.exit(77)
    out = tempfile.mkdtemp()
    # Two C++ workers that beat, then sleep in main(): gdb (installed by scripts/install-deps.sh)
    # reads every thread of each before they are stopped.
    r = ddprun("--standalone", "--nproc_per_node=2", "--hang_timeout=1", f"--log_dir={out}",
               "--no_python", PROBE, "5", "100", "hang")
    assert r.returncode == 1 and "hung: no progress for" in r.stderr, r.stderr
    line = next(l for l in r.stderr.splitlines() if "every rank's innermost frame:" in l)
    frame = line.split("innermost frame: ", 1)[1]
    assert frame.startswith("ranks 0-1: heartbeat_probe.cpp:") and frame.endswith(" in main"), line
    dumps = glob.glob(f"{out}/*/attempt_0/hang_stacks.log")
    assert len(dumps) == 1, dumps
    text = open(dumps[0]).read()
    assert text.count("=== rank ") == 2 and text.count("Thread 1 ") == 2, text
    print(f"two hung C++ workers: gdb read both, the summary says {frame!r}: passed")


def case_heartbeats_from_python_cpp_and_a_shell_are_progress():
    python_beats = ("import sys, time; from ddprun import heartbeat\n"
                    "for _ in range(int(sys.argv[1])):\n"
                    "    heartbeat.beat(); time.sleep(0.1)\n"
                    "if sys.argv[2] == 'hang':\n"
                    "    while True: print('still here', flush=True); time.sleep(0.1)\n")
    shell_beats = ('i=0; while [ $i -lt "$0" ]; do touch "$DDPRUN_HEARTBEAT_FILE"; sleep 0.1; '
                   'i=$((i+1)); done; if [ "$1" = hang ]; then exec sleep 3600; fi')
    workers = {
        "python": lambda n, end: ["--no_python", PY, "-c", python_beats, n, end],
        "c++": lambda n, end: ["--no_python", PROBE, n, "100", end],
        "shell": lambda n, end: ["--no_python", "/bin/sh", "-c", shell_beats, n, end],
    }
    env = {"PYTHONPATH": PACKAGE}
    for name, command in workers.items():
        # 3 s of beats and no output under a 1 s timeout: alive throughout.
        r = ddprun("--standalone", "--nproc_per_node=1", "--hang_timeout=1", *command("30", "end"),
                   env=env)
        assert r.returncode == 0, (name, r.stderr)
        # Then the beats stop: output alone no longer counts once a worker has beaten.
        start = time.monotonic()
        r = ddprun("--standalone", "--nproc_per_node=1", "--hang_timeout=1", *command("5", "hang"),
                   env=env)
        took = time.monotonic() - start
        assert r.returncode == 1 and "hung: no progress for" in r.stderr, (name, r.stderr)
        assert "or a line of output" not in r.stderr, (name, r.stderr)
        assert took < 30, (name, took)
    print("heartbeats from Python (ddprun.heartbeat), C++ (ddp::heartbeat) and a shell (touch) keep "
          "a silent worker alive; when they stop it is hung, its output no longer counting: passed")


EXIT_SCRIPT = """import atexit, os, sys, time
class SlowToTearDown:
    # (What it uses is bound here: by the time the interpreter clears __main__, it may be gone.)
    def __del__(self, sleep=time.sleep, open=open,
                done=os.path.join(os.environ["OUT_DIR"], "torn_down." + os.environ["RANK"])):
        sleep(3)
        open(done, "w").close()
keep = SlowToTearDown()
if sys.argv[1] == "hung_exit_handler":
    atexit.register(time.sleep, 3600)
if sys.argv[1] == "a_process_left_running":  # multiprocessing's exit handler joins it
    import multiprocessing
    multiprocessing.get_context("fork").Process(target=time.sleep, args=(3600,)).start()
if sys.argv[1] == "a_child_exits_then_hung":
    child = os.fork()
    if child == 0:
        sys.exit(0)  # the child's interpreter exits as any would: its exit handlers run
    os.waitpid(child, 0)
print("trained", flush=True)
if sys.argv[1] == "a_child_exits_then_hung":
    time.sleep(3600)
"""


def case_a_warm_workers_exit_is_not_a_hang_but_its_hung_exit_handler_is():
    """A worker forked from the warm interpreter (--preload) that has finished its work may take
    longer than the fixed timeout to exit: its interpreter's teardown is not the job. (Tearing
    torch's modules down copies most of what the worker shares with the warm interpreter: a
    finished DDP worker was declared hung under --hang_timeout=5 in a loaded suite.) An exit
    handler that hangs is still a hang: the script's own, or one a module imported in the warm
    interpreter registered there (multiprocessing's, which joins the processes left running)."""
    out = tempfile.mkdtemp()
    script = os.path.join(out, "exits.py")
    with open(script, "w") as f:
        f.write(EXIT_SCRIPT)
    common = ["--standalone", "--nproc_per_node=2", "--max_restarts=0", "--hang_timeout=1",
              "--preload=json,multiprocessing.util"]
    # Each worker's teardown takes 3 s, silent: no hang, and it did tear down as `python` would.
    r = ddprun(*common, script, "slow_teardown", env={"OUT_DIR": out})
    assert r.returncode == 0, r.stderr
    assert "workers start from a warm interpreter" in r.stderr, r.stderr
    assert "is hung" not in r.stderr, r.stderr
    assert sorted(f for f in os.listdir(out) if f.startswith("torn_down.")) == \
        ["torn_down.0", "torn_down.1"]
    # An exit handler blocks (the script's, or multiprocessing's joining a process left running),
    # or a process the worker forked exits and then it blocks: hung after the fixed timeout, as
    # when it trained.
    took = {}
    for case in ("hung_exit_handler", "a_process_left_running", "a_child_exits_then_hung"):
        start = time.monotonic()
        r = ddprun(*common, script, case, env={"OUT_DIR": out})
        took[case] = round(time.monotonic() - start, 1)
        assert r.returncode == 1 and "hung: no progress for" in r.stderr, (case, r.stderr)
        assert "after its program ended" not in r.stderr, (case, r.stderr)
        assert took[case] < 60, took
    assert not left_running(out), left_running(out)
    print(f"warm workers that take 3 s to tear down under --hang_timeout=1 end normally; an exit "
          f"handler that blocks (the script's, multiprocessing's), or a worker blocked after a "
          f"process it forked exited, is a hang (the jobs ended in {took} s): passed")


def case_a_flood_of_beats_or_a_removed_channel_costs_nothing():
    start = time.monotonic()
    r = ddprun("--standalone", "--nproc_per_node=2", "--hang_timeout=1", "--no_python", PROBE,
               "flood", "2")
    assert r.returncode == 0, r.stderr
    flood_s = time.monotonic() - start
    r = ddprun("--standalone", "--nproc_per_node=1", "--hang_timeout=1", "--no_python", "/bin/sh",
               "-c", 'echo started; rm -f "$DDPRUN_HEARTBEAT_FILE"; exec sleep 3600')
    assert r.returncode == 1 and "hung: no progress for" in r.stderr, r.stderr
    print(f"two workers beating as fast as they can for 2 s: the job ends in {flood_s:.1f} s; a worker "
          "that removes its channel is declared hung, nothing else happens: passed")


if __name__ == "__main__":
    DDPRUN, PROBE = (os.path.abspath(p) for p in sys.argv[1:3])
    globals()["case_" + sys.argv[3]]()
