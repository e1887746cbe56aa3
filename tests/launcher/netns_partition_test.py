"""A network partition between two static nodes, each in a network namespace this test creates (veth
pair, addresses inside the namespaces only). Cutting the link must stop node 0's workers within the
heartbeat timeout plus 1 s (node 1's key expires on the store's clock), and the cut-off node must stop
its own workers too. Needs root; skipped (77) where network namespaces cannot be made.

    netns_partition_test.py DDPRUN
"""
import os
import subprocess
import sys
import tempfile
import time

from netns import NamespacePair
from proc_util import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another, such as
# scripts/torch2/python (torch 2.6) for the tests labelled torch2.
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
HEARTBEAT_S = 2


def main(ddprun):
    try:
        pair = NamespacePair().__enter__()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("network namespaces unavailable here:", e)
        sys.exit(77)
    procs = []
    try:
        addr = pair.ADDRS
        dirs = [tempfile.mkdtemp(), tempfile.mkdtemp()]
        for i in (1, 0):
            procs.append(pair.run_in(
                i, [ddprun, "--nnodes=2", f"--node_rank={i}", "--nproc_per_node=1",
                    f"--master_addr={addr[0]}", "--master_port=29500",
                    f"--rdzv_conf=join_timeout=4,heartbeat_timeout={HEARTBEAT_S}", "--max_restarts=1",
                    "--no_python", PY, PROBE, dirs[i]],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        wait_for(lambda: all(os.path.exists(f"{dirs[i]}/ready.{i}") for i in (0, 1)),
                 "workers in both namespaces", 30)
        cut = time.monotonic()
        pair.cut(1)
        stopped0 = wait_for(lambda: os.path.exists(f"{dirs[0]}/got.0"), "node 0's worker stopped", 15)
        stopped1 = wait_for(lambda: os.path.exists(f"{dirs[1]}/got.1"), "node 1's worker stopped", 30)
        detect = stopped0 - cut
        assert detect <= HEARTBEAT_S + 1, f"node 0 took {detect:.2f} s"
        # The cut-off node misses a ping reply: at most one ping interval plus the heartbeat timeout.
        assert stopped1 - cut <= HEARTBEAT_S * 4 / 3 + 1, f"node 1 took {stopped1 - cut:.2f} s"
        for p in procs:
            status = p.wait(60)
            assert status != 0, p.communicate()
        print(f"partition: node 0's workers stopped {detect:.2f} s after the cut (heartbeat timeout "
              f"{HEARTBEAT_S} s), the cut-off node's {stopped1 - cut:.2f} s after; both agents exited "
              "with an error: passed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        pair.__exit__(None, None, None)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]))
