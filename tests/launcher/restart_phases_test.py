"""Restart phases: after a restart every agent records, in the event log, the metrics and `ddprun
status`, how long the restart took from the failure to its detection, to the workers stopped, to
the next round formed, to the workers started, to their first progress. Each phase is
non-negative, they add up to the whole, and the whole is what the workers themselves saw between
the failure and their first line after it. Real ddprun, real workers.

    restart_phases_test.py DDPRUN CASE    (CASE: one of the functions named case_*)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

from proc_util import free_port, left_running, script, static_job_status, wait_for
from job_logs import events, metrics_text

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None
PHASES = ("detection", "stopping", "rendezvous", "starting", "first_progress")

# Each worker's first line of each attempt has its wall-clock time. Attempt 0: rank 1 says when it
# fails and exits 3 (CRASH) or goes silent while rank 0 keeps talking (HANG). Attempt 1 waits for
# the test's "go" file (bounded).
WORKER = r'''
import os, sys, time
out, how = sys.argv[1], sys.argv[2]
attempt, rank = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["RANK"])
print(f"start {attempt} {rank} {time.time():.6f}", file=sys.stderr, flush=True)
deadline = time.monotonic() + 120
if attempt == 0:
    time.sleep(0.5)
    if rank == 1:
        print(f"failing {time.time():.6f}", file=sys.stderr, flush=True)
        if how == "crash":
            os._exit(3)
        time.sleep(120)  # silent: hung
    while time.monotonic() < deadline:  # progress until stopped
        print("step", file=sys.stderr, flush=True)
        time.sleep(0.2)
while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
    time.sleep(0.05)
'''


def stamp(log, pattern):
    """The time in the first line of `log` that matches `pattern` (its group 1)."""
    m = re.search(pattern, log, re.M)
    assert m, (pattern, log[-3000:])
    return float(m.group(1))


def check_phases(p, seen, tolerance):
    """`p` (a restart_phases event): every phase non-negative, their sum the total, and the total
    within `tolerance` of `seen`, what the workers measured."""
    assert all(p[f"{x}_s"] is not None and p[f"{x}_s"] >= 0 for x in PHASES), p
    assert abs(sum(p[f"{x}_s"] for x in PHASES) - p["total_s"]) < 1e-6, p
    assert abs(p["total_s"] - seen) < tolerance, (p, seen)


def case_a_crash_restart_is_measured_on_every_node():
    # Two nodes of one worker each (static rendezvous: node 0's agent holds the store).
    out = tempfile.mkdtemp()
    port = free_port()
    logs = [os.path.join(out, f"ddprun.{r}.log") for r in (0, 1)]
    jobs = [subprocess.Popen([DDPRUN, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=1",
                              "--master_addr=127.0.0.1", f"--master_port={port}",
                              "--max_restarts=1", f"--event_log={out}/events.{r}.jsonl",
                              "--metrics_port=0", script(WORKER), out, "crash"],
                             stdout=subprocess.DEVNULL, stderr=open(logs[r], "w"),
                             env={**os.environ, "PYTHON_EXEC": PY})
            for r in (0, 1)]
    try:
        def status(*extra):
            return static_job_status(DDPRUN, port, *extra)

        def restarts():
            r = status("--json")
            nodes = json.loads(r.stdout)["nodes"] if r.returncode == 0 else []
            return len(nodes) == 2 and all(n["last_restart"] for n in nodes)
        wait_for(restarts, "both nodes' last restart in `ddprun status`", timeout=90)
        table = status().stdout
        lines = [x.strip() for x in table.splitlines() if x.strip().startswith("last restart")]
        assert len(lines) == 2 and all(
            re.match(r"last restart \((failure|interrupted), restart 1\): [0-9.]+ m?s in all; "
                     r"detected .*, workers stopped .*, round 1 formed .*, workers started .*, "
                     r"first progress [0-9.]+ m?s$", x) for x in lines), table
        metrics = [metrics_text(int(re.search(r"metrics at http://[^ ]+:(\d+)/metrics",
                                              open(log).read()).group(1))) for log in logs]
    finally:
        open(os.path.join(out, "go"), "w").close()
    for p in jobs:
        p.wait(timeout=60)
    texts = [open(log).read() for log in logs]
    assert [p.returncode for p in jobs] == [0, 0], texts
    for m in metrics:
        for phase in (*PHASES, "total"):
            assert f'ddprun_restart_phase_seconds_count{{phase="{phase}"}} 1\n' in m, m
            assert f'ddprun_restart_phase_seconds_bucket{{phase="{phase}",le="+Inf"}} 1\n' in m, m
    phases = [events(f"{out}/events.{r}.jsonl", "restart_phases") for r in (0, 1)]
    assert [len(p) for p in phases] == [1, 1], phases
    assert [p[0]["cause"] for p in phases] == ["interrupted", "failure"], phases
    # The failing node: from the worker's exit to its successor's first line, as they saw it.
    failed = stamp(texts[1], r"^failing ([0-9.]+)")
    check_phases(phases[1][0], stamp(texts[1], r"^start 1 1 ([0-9.]+)") - failed, 0.25)
    # The other node learns of it through the store: from its detection on.
    check_phases(phases[0][0], phases[0][0]["total_s"], 1e-9)
    assert phases[0][0]["detection_s"] == 0, phases[0][0]
    assert not left_running(out), left_running(out)
    print(f"one crash on node 1 of 2: node 1's restart {phases[1][0]['total_s'] * 1e3:.1f} ms "
          f"(the workers saw {(stamp(texts[1], r'^start 1 1 ([0-9.]+)') - failed) * 1e3:.1f} ms), "
          f"in the event log, the metrics and `ddprun status` of both nodes: passed")


def case_a_hangs_timeout_is_its_detection_phase():
    out = tempfile.mkdtemp()
    log = os.path.join(out, "ddprun.log")
    p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                          "--hang_timeout=2", f"--event_log={out}/events.jsonl",
                          script(WORKER), out, "hang"],
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                         env={**os.environ, "PYTHON_EXEC": PY})
    try:
        wait_for(lambda: events(f"{out}/events.jsonl", "restart_phases"), "the restart's phases",
                 timeout=90)
    finally:
        open(os.path.join(out, "go"), "w").close()
    p.wait(timeout=60)
    text = open(log).read()
    assert p.returncode == 0, text[-3000:]
    [phases] = events(f"{out}/events.jsonl", "restart_phases")
    assert phases["cause"] == "hang", phases
    # Silent from its last line: the hang is declared --hang_timeout later (polled).
    assert 2.0 <= phases["detection_s"] < 3.0, phases
    seen = stamp(text, r"^start 1 \d ([0-9.]+)") - stamp(text, r"^failing ([0-9.]+)")
    check_phases(phases, seen, 0.3)
    assert not left_running(out), left_running(out)
    print(f"a hang with --hang_timeout=2: detected after {phases['detection_s']:.2f} s, the "
          f"restart {phases['total_s']:.2f} s in all (the workers saw {seen:.2f} s): passed")


def case_a_restart_is_measured_with_the_plainest_command_line():
    # No event log, no metrics, no log folder: the restart's phases are in ddprun's own log.
    out = tempfile.mkdtemp()
    open(os.path.join(out, "go"), "w").close()
    r = subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                        script(WORKER), out, "crash"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON_EXEC": PY})
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"the restart into round 1 took ([0-9.]+) s: ([0-9.]+) s to detect the failure, "
                  r"[0-9.]+ s to stop the workers, [0-9.]+ s to form the round, [0-9.]+ s to start "
                  r"the workers, [0-9.]+ s to their first progress", r.stderr)
    assert m, r.stderr[-3000:]
    seen = stamp(r.stderr, r"^start 1 1 ([0-9.]+)") - stamp(r.stderr, r"^failing ([0-9.]+)")
    assert abs(float(m.group(1)) - seen) < 0.25, (m.group(0), seen)
    assert not left_running(out), left_running(out)
    print(f"a crash under the plainest command line: '{m.group(0)}' (the workers saw "
          f"{seen:.3f} s): passed")


if __name__ == "__main__":
    DDPRUN = sys.argv[1]
    globals()["case_" + sys.argv[2]]()
