"""The failure summary of a Python worker that writes no error file (no torch @record): its
traceback is the exception the worker died of, read back from its stderr, whether that stderr went
to the console, to a --redirects file or through --tee; on a terminal the worker's stderr stays the
terminal. Ranks that ended together are each a failure in it. Real ddprun, real workers.

    summary_test.py DDPRUN CASE    (CASE: one of the functions named case_*)
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from proc_util import left_running, script, wait_for

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None

RAISES = r'''
import os, sys, torch
sys.stdout.write(f"stderr is a terminal: {sys.stderr.isatty()}\n")
sys.stdout.flush()
def load_batch(step):
    if os.environ["RANK"] == "1" and step == 2:
        raise ValueError("bad batch shape")
    return torch.zeros(2)
for step in range(4):
    load_batch(step)
'''


def root_cause(stderr):
    return stderr.split("Root Cause (first observed failure):", 1)[1]


def case_a_plain_scripts_exception_is_the_summarys_traceback():
    worker = script(RAISES)
    seen = []
    for flags in ([], ["--redirects=2"], ["--tee=2"]):
        logs = tempfile.mkdtemp()
        r = subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=2", f"--log_dir={logs}",
                            *flags, worker], capture_output=True, text=True, timeout=180,
                           env={**os.environ, "PYTHON_EXEC": PY})
        assert r.returncode == 1, r.stderr
        cause = root_cause(r.stderr)
        assert "rank      : 1 (local_rank: 1)" in cause, cause
        assert "traceback : ValueError: bad batch shape" in cause, (flags, cause)
        assert "Traceback (most recent call last):" in cause, cause
        assert 'raise ValueError("bad batch shape")' in cause and "in load_batch" in cause, cause
        assert "To enable traceback" not in cause, cause
        before = r.stderr.split("Root Cause", 1)[0]
        if flags != ["--redirects=2"]:  # and the worker's own lines still reach the console
            assert before.count("ValueError: bad batch shape") >= 1, before
        assert "stderr is a terminal: False" in r.stdout, r.stdout
        seen.append(" ".join(flags) or "the console")
    # On a terminal the worker's stderr is the terminal itself (nothing in between), as under
    # torchrun; its exception is on the screen.
    logs = tempfile.mkdtemp()
    command = " ".join([f"PYTHON_EXEC={PY}", DDPRUN, "--standalone", "--nproc_per_node=2",
                        f"--log_dir={logs}", worker])
    r = subprocess.run(["script", "-qefc", command, "/dev/null"], capture_output=True, text=True,
                       timeout=180)
    assert "stderr is a terminal: True" in r.stdout, r.stdout
    assert "bad batch shape" in r.stdout, r.stdout  # (Python 3.13 colours it on a terminal)
    print(f"rank 1 raising ValueError without @record: the summary's traceback is it, with its "
          f"frames ({', '.join(seen)}); on a terminal the worker's stderr is the terminal: passed")


def zombie(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def case_ranks_that_ended_together_are_each_a_failure():
    """Rank 1 killed, rank 0 dead of the broken connection a moment later: whichever end the agent
    notices first, the other is not counted as a worker ddprun stopped (losing the failure that
    caused the first). The agent is paused while both end, so that both ends wait to be noticed."""
    d = tempfile.mkdtemp()
    marker = f"summary-test-{os.getpid()}"
    # ("$$$$": the arguments' macros are substituted by Python's Template rules, "$$" to "$".)
    worker = (f'echo $$$$ > {d}/pid.$RANK; i=0; while [ ! -e {d}/go ] && [ $i -lt 6000 ]; do '
              f'sleep 0.01; i=$((i + 1)); done; exit $((10 + RANK))')
    p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=2", "--no_python", "/bin/sh",
                          "-c", worker, marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        pid_files = [os.path.join(d, f"pid.{rank}") for rank in (0, 1)]
        wait_for(lambda: all(os.path.exists(f) and open(f).read().endswith("\n")
                             for f in pid_files), "both ranks to start", timeout=60)
        pids = [int(open(f).read()) for f in pid_files]
        p.send_signal(signal.SIGSTOP)
        open(os.path.join(d, "go"), "w").close()
        wait_for(lambda: all(zombie(pid) for pid in pids), "both ranks to end", timeout=60)
        p.send_signal(signal.SIGCONT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:  # (a failed wait above: ddprun and its workers go with the test)
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.communicate(timeout=60)
        shutil.rmtree(d, ignore_errors=True)
    assert p.returncode == 1, err
    for rank in (0, 1):
        assert f"worker local_rank {rank} (rank {rank}, pid {pids[rank]}) failed: exit code " \
               f"{10 + rank}" in err, err
        assert f"exitcode  : {10 + rank}" in err, err
    assert not left_running(marker), left_running(marker)
    print("two ranks that ended while the agent looked away (exit codes 10 and 11): both are "
          "failures, in the log and in the summary: passed")


def main():
    global DDPRUN
    DDPRUN = sys.argv[1]
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
