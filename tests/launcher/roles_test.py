"""Per-node roles, as a widely copied Slurm launcher gives them (`--role $(hostname):`): 2 nodes x 2
ranks, each node with a role of its own, on loopback (static rendezvous). Every worker's ranks and
role variables under ddprun equal torch 2.14's torchrun's.

    roles_test.py DDPRUN
"""
import json
import os
import subprocess
import sys
import tempfile

from proc_util import finish, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH2 = os.path.join(HERE, "..", "..", "scripts", "torch2", "python")
NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
         "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME")
WORKER = ("import json, os, sys; json.dump({n: os.environ.get(n) for n in sys.argv[2:]}, "
          "open(os.path.join(sys.argv[1], 'env.' + os.environ['RANK']), 'w'))")


def job(launcher, roles):
    out = tempfile.mkdtemp()
    port = free_port()
    procs = [subprocess.Popen(
        [*launcher, "--nnodes=2", f"--node_rank={i}", "--nproc_per_node=2",
         "--master_addr=127.0.0.1", f"--master_port={port}", f"--role={roles[i]}",
         "--no_python", "/usr/bin/python3", "-c", WORKER, out, *NAMES],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = finish(procs, timeout=180)
    assert [r[0] for r in results] == [0, 0], results
    return {r: json.load(open(os.path.join(out, f"env.{r}"))) for r in range(4)}


def main():
    ddprun = os.path.abspath(sys.argv[1])
    for roles in (("nodeA:", "nodeB:"), ("trainer", "trainer")):
        mine = job([ddprun], roles)
        theirs = job([TORCH2, "-m", "torch.distributed.run"], roles)
        assert mine == theirs, (roles, mine, theirs)
    assert [mine[r]["ROLE_RANK"] for r in range(4)] == ["0", "1", "2", "3"], mine
    print(f"2 nodes x 2 ranks with a role per node: every worker's {', '.join(NAMES)} as under "
          f"torchrun 2.14 (ROLE_WORLD_SIZE 2, ROLE_RANK 0-1 on each node), and with one role: "
          f"passed")


if __name__ == "__main__":
    main()
