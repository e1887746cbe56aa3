"""ddprun started per process by Open MPI's real mpirun (one node): each process runs one worker with
RANK/LOCAL_RANK/WORLD_SIZE from OMPI_COMM_WORLD_*, and a DDP job runs the same way. A worker alone
in its agent saves replicated state (checkpoint.save(..., replicated=True)) at once, as its own:
its node's other tasks' regions are other agents'.

    mpirun_test.py DDPRUN
Exits 77 (skipped) without mpirun.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "ddp_train.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
REPORT = ("import os,json,sys; json.dump({k: os.environ.get(k) for k in ('RANK','WORLD_SIZE',"
          "'LOCAL_RANK','LOCAL_WORLD_SIZE','GROUP_RANK','MASTER_ADDR','OMPI_COMM_WORLD_RANK',"
          "'OMPI_COMM_WORLD_LOCAL_RANK')}, open(os.path.join(sys.argv[1], os.environ['RANK']), 'w'))")

# Three replicated saves; the longest one's seconds to OUT/saved.<rank>.
REPLICATED = """import os, sys, time
import torch
from ddprun import checkpoint
took = []
for step in range(3):
    began = time.monotonic()
    checkpoint.save(step, {"w": torch.ones(1024)}, replicated=True)
    took.append(time.monotonic() - began)
open(os.path.join(sys.argv[1], "saved." + os.environ["RANK"]), "w").write(str(max(took)))
"""


def mpirun(np, args):
    # --allow-run-as-root: the suite runs as root; --oversubscribe: 4 processes on 2 cores.
    return subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
                           "-x", f"PYTHON_EXEC={PY}", *args], capture_output=True, text=True,
                          timeout=240)


def main():
    ddprun = os.path.abspath(sys.argv[1])
    if not shutil.which("mpirun"):
        print("skipped: needs mpirun (openmpi-bin)")
        sys.exit(77)
    out_dir = tempfile.mkdtemp()
    r = mpirun(4, [ddprun, "--no_python", PY, "-c", REPORT, out_dir])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count("Open MPI job") == 4, r.stderr
    for rank in range(4):
        with open(os.path.join(out_dir, str(rank))) as f:
            e = json.load(f)
        assert e["RANK"] == e["OMPI_COMM_WORLD_RANK"] == str(rank), e
        assert e["LOCAL_RANK"] == e["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank), e
        assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "4", e
        assert e["GROUP_RANK"] == "0" and e["MASTER_ADDR"] == "127.0.0.1", e
    r = mpirun(3, [ddprun, EXAMPLE])
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("bit-identical") == 3, r.stdout
    script = os.path.join(out_dir, "replicated.py")
    with open(script, "w") as f:
        f.write(REPLICATED)
    r = mpirun(2, [ddprun, script, out_dir])
    assert r.returncode == 0, r.stdout + r.stderr
    longest = [float(open(os.path.join(out_dir, f"saved.{rank}")).read()) for rank in range(2)]
    # (Waiting for another task's agent's region would take 30 s, then save alone with a warning.)
    assert max(longest) < 10 and "replicated" not in r.stderr, (longest, r.stderr)
    shutil.rmtree(out_dir)
    print("mpirun -np 4 ddprun: ranks from OMPI_COMM_WORLD_*; mpirun -np 3 ddprun DDP; replicated "
          f"saves of tasks of one node each its own (the longest {max(longest):.3f} s): passed")


if __name__ == "__main__":
    main()
