"""Crash loops (--crash_loop_attempts, default 3): a job whose attempts keep failing the same way
stops early with exit status 5 and one line saying so, on every node; a job whose failures differ,
or that makes progress between them (a newer checkpoint step), uses all its restarts; 0 turns it
off; bad values are usage errors. Real ddprun, real workers.

    crash_loop_test.py DDPRUN CASE    (CASE: one of the functions named case_*)
"""
import os
import subprocess
import sys
import tempfile

from proc_util import free_port, script

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None

# Rank 1 raises the same exception in every attempt (its step: the checkpoint it resumed from,
# which a save makes newer in each attempt when SAVE is set; rank 1 then raises only once rank 0's
# save of the attempt's step is done too, else the agent may stop rank 0 mid-save and the step
# restored stays the same: a crash loop, rightly, on a loaded machine).
FAILS = r'''
import os, sys
out, attempt, rank = sys.argv[1], os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
open(os.path.join(out, f"ran.{attempt}.{rank}"), "w").close()
if os.environ.get("SAVE"):
    import torch
    from ddprun import checkpoint
    step, _ = checkpoint.load()
    checkpoint.save(0 if step is None else step + 1, {"w": torch.zeros(4)})
    open(os.path.join(out, f"saved.{attempt}.{rank}"), "w").close()
    if rank == "1":  # fails only once rank 0 saved too: the step is complete, the progress real
        import time
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(out, f"saved.{attempt}.0")):
            assert time.monotonic() < deadline, "rank 0 did not save within 60 s"
            time.sleep(0.01)
def load_batch():
    if rank == "1":
        raise ValueError("bad batch shape" + (attempt if os.environ.get("DIFFER") else ""))
load_batch()
'''


def job(out, *flags, env=None):
    return subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=2", *flags, script(FAILS), out],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHON_EXEC": PY, **(env or {})})


def attempts(out):
    return len({f.split(".")[1] for f in os.listdir(out) if f.startswith("ran.")})


def case_the_same_failure_three_times_stops_the_job():
    out = tempfile.mkdtemp()
    r = job(out, "--max_restarts=10")
    assert r.returncode == 5, (r.returncode, r.stderr[-3000:])
    assert attempts(out) == 3, os.listdir(out)
    line = [l for l in r.stderr.splitlines() if "[error] crash loop:" in l]
    assert len(line) == 1, r.stderr
    assert "the last 3 attempts failed the same way (rank 1: exit 1, ValueError: bad batch shape " \
           "at File" in line[0] and "in load_batch; resumed from nothing), with 8 restart(s) left" \
           in line[0], line
    assert "FAILED in a crash loop" in r.stderr and "Root Cause" in r.stderr, r.stderr[-3000:]
    print(f"the same exception three times with 10 restarts allowed: stopped after 3 attempts, "
          f"exit 5: '{line[0].split('[error] ', 1)[1][:150]}...': passed")


def case_differing_failures_or_progress_use_every_restart():
    seen = []
    for what, env, flags in (("differing exceptions", {"DIFFER": "1"}, []),
                             ("a newer checkpoint step each time", {"SAVE": "1"}, []),
                             ("--crash_loop_attempts=0", {}, ["--crash_loop_attempts=0"]),
                             ("PET_CRASH_LOOP_ATTEMPTS=0", {"PET_CRASH_LOOP_ATTEMPTS": "0"}, [])):
        out = tempfile.mkdtemp()
        r = job(out, "--max_restarts=4", *flags, env=env)
        assert r.returncode == 1, (what, r.returncode, r.stderr[-3000:])
        assert attempts(out) == 5, (what, os.listdir(out))
        assert "crash loop" not in r.stderr, (what, r.stderr[-3000:])
        seen.append(what)
    for bad in ("1", "-2", "x"):
        r = subprocess.run([DDPRUN, "--standalone", f"--crash_loop_attempts={bad}", "x.py"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--crash_loop_attempts" in r.stderr, (bad, r.stderr)
    print(f"{', '.join(seen)}: every restart used, exit 1; 1, -2 and x are usage errors: passed")


def case_every_node_stops_a_crash_loop():
    out = tempfile.mkdtemp()
    port = free_port()
    worker = script(FAILS)
    procs = [subprocess.Popen(
        [DDPRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
         f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=loop", "--max_restarts=10", worker, out],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHON_EXEC": PY}) for _ in range(2)]
    results = []
    for p in procs:
        _, err = p.communicate(timeout=240)
        results.append((p.returncode, err))
    for code, err in results:
        assert code == 5, (code, err[-3000:])
        assert "crash loop" in err, err[-3000:]
    assert attempts(out) == 3, os.listdir(out)
    print("rank 1 of a 2-node job failing the same way: both nodes stopped after 3 attempts with "
          "exit 5: passed")


def main():
    global DDPRUN
    DDPRUN = sys.argv[1]
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
