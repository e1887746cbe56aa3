"""The environment Kubernetes operators give each pod, with ddprun's plainest command line
(`ddprun train.py`): Kubeflow Trainer's torch runtime (PET_NNODES, PET_NPROC_PER_NODE=auto,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT) and a PyTorchJob's elastic policy (PET_RDZV_*,
PET_NNODES=MIN:MAX, PET_MAX_RESTARTS), two pods on loopback (no cluster needed: the variables as
the operator sets them). Every worker gets its ranks.

    operator_env_test.py DDPRUN DDPRUND
"""
import os
import subprocess
import sys
import tempfile

from proc_util import finish, free_port, left_running

WORKER = 'echo "$RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK" > "$OUT/ran.$RANK"'


def pods(ddprun, envs):
    out = tempfile.mkdtemp()
    procs = [subprocess.Popen([ddprun, "--no_python", "/bin/sh", "-c", WORKER],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OUT": out, **env}) for env in envs]
    results = finish(procs, timeout=180)
    assert [r[0] for r in results] == [0] * len(envs), results
    ran = {f: open(os.path.join(out, f)).read().split() for f in os.listdir(out)}
    assert not left_running(out)
    return ran


def main():
    ddprun, ddprund = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    # Kubeflow Trainer v2's torch runtime: nproc "auto" is the CPUs here (no GPU).
    port = free_port()
    auto = str(len(os.sched_getaffinity(0)))
    trainer = [{"PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto", "PET_NODE_RANK": str(i),
                "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)} for i in range(2)]
    ran = pods(ddprun, trainer)
    world = str(2 * int(auto))
    assert len(ran) == int(world) and all(v[1] == world and v[2] == auto for v in ran.values()), ran
    # A PyTorchJob with an elastic policy, its c10d endpoint a ddprund.
    store = subprocess.Popen([ddprund, "--host", "127.0.0.1", "--port", "0", "--log-level", "warn"],
                             stdout=subprocess.PIPE, text=True)
    try:
        endpoint = f"127.0.0.1:{int(store.stdout.readline())}"
        elastic = [{"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": endpoint,
                    "PET_RDZV_ID": "pytorchjob", "PET_NNODES": "2:2", "PET_NPROC_PER_NODE": "1",
                    "PET_MAX_RESTARTS": "3"} for _ in range(2)]
        ran = pods(ddprun, elastic)
        assert sorted(ran) == ["ran.0", "ran.1"] and all(v[1] == "2" for v in ran.values()), ran
    finally:
        store.kill()
        store.wait()
    print(f"Kubeflow Trainer's PET_* (nproc auto: {auto} per pod) and a PyTorchJob's elastic PET_* "
          f"with `ddprun script`: every worker got its ranks: passed")


if __name__ == "__main__":
    main()
