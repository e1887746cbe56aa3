"""A real PyTorch DDP job (gloo) across two network namespaces (elastic 1:2, ddprund in the first): the
second node's agent is SIGKILLed mid-training; the survivor re-forms the job alone at once, resumes
from the checkpoint and finishes. Skipped (77) where network namespaces cannot be made.

    netns_elastic_ddp_test.py DDPRUN DDPRUND
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from netns import NamespacePair

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "workloads", "ckpt_train.py")


def main(ddprun, ddprund):
    try:
        pair = NamespacePair().__enter__()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("network namespaces unavailable here:", e)
        sys.exit(77)
    procs = []
    try:
        store = pair.run_in(0, [ddprund, "--host", pair.ADDRS[0], "--port", "29400", "--log-level",
                                "warn"], stdout=subprocess.PIPE, text=True)
        procs.append(store)
        assert store.stdout.readline().strip() == "29400"
        ckpt = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
        agents = []
        for i in (0, 1):
            env = {**os.environ, "PYTHON_EXEC": os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3"), "GLOO_SOCKET_IFNAME": pair.links[i]}
            agents.append(pair.run_in(
                i, [ddprun, "--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                    f"--rdzv_endpoint={pair.ADDRS[0]}:29400", "--rdzv_id=ckpt",
                    "--rdzv_conf=last_call_timeout=5,heartbeat_timeout=2", TRAIN, ckpt, "300"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        procs += agents
        deadline = time.monotonic() + 120
        while not (os.path.exists(ckpt) and torch.load(ckpt)["step"] >= 30):
            assert time.monotonic() < deadline, "training did not reach step 30"
            assert all(a.poll() is None for a in agents), [a.communicate() for a in agents]
            time.sleep(0.05)
        agents[1].kill()
        status = agents[0].wait(120)
        _, err = agents[0].communicate()
        assert status == 0, err
        assert "left the job" in err, err
        done = json.load(open(ckpt + ".done"))
        assert done["world"] == 1 and done["resumed_from"] >= 30, done
        print(f"DDP across 2 namespaces lost a node at step >= 30; the survivor re-formed alone, "
              f"resumed from step {done['resumed_from']} and finished (loss {done['loss']:.4f}): passed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        pair.__exit__(None, None, None)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
