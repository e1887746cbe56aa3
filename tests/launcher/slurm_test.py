"""ddprun under a real Slurm cluster (slurm_cluster.py: slurmctld, two slurmd nodes, munge), started
by srun with no rendezvous options: per node (one task per node, ddprun is the node's agent) and per
process (several tasks per node, each task is one worker), and Slurm's signals reaching the workers.

    slurm_test.py DDPRUN CASE     (CASE: one of the functions named case_*)
Exits 77 (skipped) where the cluster cannot be made.
"""
import json
import os
import sys
import tempfile
from proc_util import wait_for
from slurm_cluster import SlurmCluster, available
from job_logs import events

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "ddp_train.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None

REPORT = ("import os,json,sys; json.dump({k: os.environ.get(k) for k in ('RANK','WORLD_SIZE',"
          "'LOCAL_RANK','LOCAL_WORLD_SIZE','GROUP_RANK','GROUP_WORLD_SIZE','MASTER_ADDR',"
          "'MASTER_PORT','TORCHELASTIC_RUN_ID','SLURM_PROCID','SLURM_LOCALID','SLURM_NODEID')}, "
          "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w'))")


def env_of(out_dir, world):
    got = []
    for r in range(world):
        with open(os.path.join(out_dir, str(r))) as f:
            got.append(json.load(f))
    return got


def srun(cluster, args, **kw):
    return cluster.run(["srun", "--kill-on-bad-exit=1", *args], timeout=240,
                       env=cluster.env(PYTHON_EXEC=PY, GLOO_SOCKET_IFNAME="eth0"), **kw)


def case_per_node_one_task_per_node_makes_ddprun_the_agent():
    with SlurmCluster(2) as cluster:
        out_dir = tempfile.mkdtemp()
        r = srun(cluster, ["-N2", "--ntasks-per-node=1", DDPRUN, "--nproc_per_node=2",
                           "--no_python", PY, "-c", REPORT, out_dir])
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("one task on this node, so it is node") == 2, r.stderr
        envs = env_of(out_dir, 4)
        job = envs[0]["TORCHELASTIC_RUN_ID"]
        for rank, e in enumerate(envs):
            node = rank // 2
            assert e["WORLD_SIZE"] == "4" and e["GROUP_RANK"] == str(node), e
            assert e["LOCAL_RANK"] == str(rank % 2) and e["LOCAL_WORLD_SIZE"] == "2", e
            assert e["GROUP_WORLD_SIZE"] == "2" and e["MASTER_ADDR"] == "node1", e
            assert e["SLURM_NODEID"] == str(node) and e["TORCHELASTIC_RUN_ID"] == job, e
        # A real DDP job, the same way.
        r = srun(cluster, ["-N2", "--ntasks-per-node=1", DDPRUN, "--nproc_per_node=1", EXAMPLE])
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("bit-identical") == 2, r.stdout
        print("srun -N2 --ntasks-per-node=1 ddprun: 4 ranks from Slurm's variables, and DDP: passed")


def case_per_process_each_task_is_one_worker():
    with SlurmCluster(2) as cluster:
        out_dir = tempfile.mkdtemp()
        r = srun(cluster, ["-N2", "--ntasks-per-node=2", DDPRUN, "--no_python", PY, "-c", REPORT,
                           out_dir])
        assert r.returncode == 0, r.stderr
        assert r.stderr.count("2 tasks on this node, so this task runs one worker") == 4, r.stderr
        for rank, e in enumerate(env_of(out_dir, 4)):
            assert e["RANK"] == e["SLURM_PROCID"] == str(rank), e
            assert e["LOCAL_RANK"] == e["SLURM_LOCALID"] == str(rank % 2), e
            assert e["GROUP_RANK"] == e["SLURM_NODEID"] == str(rank // 2), e
            assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2", e
            assert e["GROUP_WORLD_SIZE"] == "2" and e["MASTER_ADDR"] == "node1", e
        r = srun(cluster, ["-N2", "--ntasks-per-node=2", DDPRUN, EXAMPLE])
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("bit-identical") == 4, r.stdout
        # A failing task: its error file and summary, and srun sees ddprun's status.
        r = srun(cluster, ["-N2", "--ntasks-per-node=2", DDPRUN, "--no_python", PY, "-c",
                           "import os,sys; sys.exit(5 if os.environ['RANK']=='3' else 0)"])
        assert r.returncode != 0, r.stderr
        assert "exitcode  : 5" in r.stderr and "rank      : 3 (local_rank: 1)" in r.stderr, r.stderr
        # The failed task exits with its worker's own status, as srun would have seen it.
        assert "task 3: Exited with exit code 5" in r.stderr, r.stderr
        print("srun --ntasks-per-node=2 ddprun: one worker per task, placed as Slurm placed it; DDP; "
              "a failure summarised: passed")


def job_id(cluster):
    r = cluster.run(["squeue", "-h", "-o", "%i"])
    ids = r.stdout.split()
    return ids[0] if len(ids) == 1 else None


def case_slurm_signals_reach_the_workers():
    with SlurmCluster(2) as cluster:
        for signal_name, scancel in (("SIGUSR1", ["scancel", "--signal=USR1"]),
                                     ("SIGTERM", ["scancel"])):
            out_dir = tempfile.mkdtemp()
            # Each node's agent keeps an event log of its own (the task's shell names it by its
            # node, then becomes ddprun).
            agent = (f"exec {DDPRUN} --event_log={out_dir}/events.$SLURM_NODEID "
                     f"--nproc_per_node=1 --signals_to_handle=SIGTERM,SIGUSR1 {PROBE} {out_dir}")
            p = cluster.start(["srun", "-N2", "--ntasks-per-node=1", "/bin/sh", "-c", agent],
                              env=cluster.env(PYTHON_EXEC=PY))
            try:
                wait_for(lambda: all(os.path.exists(os.path.join(out_dir, f"ready.{r}"))
                                     for r in range(2)), "both workers", timeout=60)
                job = job_id(cluster)
                assert job, "no job in squeue"
                r = cluster.run([*scancel, job])
                assert r.returncode == 0, r.stderr
                out, err = p.communicate(timeout=60)
            finally:
                if p.poll() is None:
                    p.kill()
            for rank in range(2):
                assert os.path.exists(os.path.join(out_dir, f"got.{rank}")), (signal_name, err)
                with open(os.path.join(out_dir, f"got.{rank}")) as f:
                    assert f.read() == signal_name, f"rank {rank} did not get {signal_name}"
            # Every agent recorded the signal: its own, or passed on by the peer it reached first
            # ("from"); at least one had it from Slurm.
            signals = [events(os.path.join(out_dir, f"events.{node}"), "signal")
                       for node in range(2)]
            assert all(s and s[0]["signal"] == signal_name for s in signals), (signals, err)
            assert any("from" not in s[0] for s in signals), (signals, err)
            # No agent was ended by the signal itself (arriving after its run ended) or killed
            # by Slurm for outliving the step's kill wait.
            assert ": Terminated" not in err and ": Killed" not in err, err
            signo = {"SIGUSR1": 10, "SIGTERM": 15}[signal_name]
            if signal_name == "SIGUSR1":
                # (scancel without --signal aborts srun, which then need not print what its tasks
                # wrote last: the agents' lines are checked only here.)
                assert f"received {signal_name}: forwarding it to the workers" in err, err
                # srun reports each task's status: ddprun's 128 + N says it was signalled.
                assert f"exit code {128 + signo}" in err, err
            print(f"scancel {' '.join(scancel[1:])}: {signal_name} reached both workers on 2 nodes")
        print("Slurm's signals: passed")


def main():
    global DDPRUN
    DDPRUN = os.path.abspath(sys.argv[1])
    why = available()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
