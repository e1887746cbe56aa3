"""Nothing a worker starts outlives the job. Each worker is a bash wrapper with a background child
(`sleep &`) and a foreground trainer (workloads/escapees.py) that leaves a double-forked grandchild
in a session of its own. After a normal end, a failure, SIGTERM of ddprun and SIGKILL of ddprun, no
process of any worker may be left. Across a SIGKILL the guarantee is the process group, where
ddprun runs workers in cgroups the cgroup, and without them the guardian's search for the agent's
mark in every process's environment: the setsid grandchild, in neither the process group nor (with
DDPRUN_CGROUPS=0) a cgroup, dies by the last.

    containment_test.py DDPRUN CASE [nocgroups]
        (CASE: end, fail, sigterm, sigkill; nocgroups: DDPRUN_CGROUPS=0, process groups and the
        child subreaper only)
"""
import os
import signal
import subprocess
import sys
import tempfile

from proc_util import alive, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ESCAPEES = os.path.join(HERE, "workloads", "escapees.py")
NPROC = 2
KINDS = ("wrapper", "bg", "trainer", "grand")


def in_ddprun_cgroup(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        return any(line.startswith("0::") and "/ddprun." in line for line in f)


def main(ddprun, case, cgroups_on):
    d = tempfile.mkdtemp()
    mode = {"end": "end", "fail": "fail"}.get(case, "wait")
    # "$$$$" is the shell's "$$" (worker arguments go through torchrun's ${local_rank} macro).
    script = (f'echo $$$$ > {d}/wrapper.$RANK; sleep 300 & echo $! > {d}/bg.$RANK; '
              f'/usr/bin/python3 {ESCAPEES} {d} {mode}; exit $?')
    proc = subprocess.Popen([ddprun, "--standalone", f"--nproc_per_node={NPROC}", "--no_python",
                             "/bin/bash", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DDPRUN_CGROUPS": "1" if cgroups_on else "0"})
    ready = lambda: all(os.path.exists(f"{d}/ready.{r}") for r in range(NPROC))
    if case in ("sigterm", "sigkill"):
        wait_for(ready, "every worker's processes")
    pids = {}
    if case == "sigkill":
        pids = {(k, r): int(open(f"{d}/{k}.{r}").read()) for k in KINDS for r in range(NPROC)}
        # Whether ddprun could use cgroups here (a machine may not let it: then it falls back, and
        # the guarantee across a SIGKILL is the process groups').
        cgroups = all(in_ddprun_cgroup(p) for p in pids.values())
        assert cgroups_on or not cgroups, "DDPRUN_CGROUPS=0 was not honoured"
        proc.kill()
    elif case == "sigterm":
        proc.send_signal(signal.SIGTERM)
    status = proc.wait(60)
    if case != "sigkill":
        pids = {(k, r): int(open(f"{d}/{k}.{r}").read()) for k in KINDS for r in range(NPROC)}
        cgroups = None
    try:
        wait_for(lambda: not any(alive(p) for p in pids.values()), "every process to be gone", 10)
    finally:
        for p in pids.values():
            if alive(p):
                os.kill(p, signal.SIGKILL)  # (it may hold ddprun's stdout: then no EOF)
    _, err = proc.communicate()
    expected = {"end": 0, "fail": 1, "sigterm": 128 + signal.SIGTERM, "sigkill": -signal.SIGKILL}
    assert status == expected[case], (status, err)
    how = {None: "none is left", True: "none is left (workers in cgroups)",
           False: "none is left (no cgroups: process groups, and the mark in their environment)"}
    print(f"{case}{'' if cgroups_on else ' without cgroups'}: of each worker's wrapper, background "
          f"child, trainer and setsid grandchild, {how[cgroups]}: passed")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3:] != ["nocgroups"])
