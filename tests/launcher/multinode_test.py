"""Static multi-node jobs: several ddprun agents as real processes on loopback, node 0's agent hosting
the store.

    multinode_test.py DDPRUN CASE     (CASE: one of the functions named case_*)
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from agents import agent_command
from proc_util import finish, free_port, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "ddp_train.py")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another, such as
# scripts/torch2/python (torch 2.6) for the tests labelled torch2.
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None

REPORT = ("import os,json,sys; json.dump({k: os.environ[k] for k in ('RANK','WORLD_SIZE','LOCAL_RANK',"
          "'LOCAL_WORLD_SIZE','GROUP_RANK','GROUP_WORLD_SIZE','ROLE_RANK','ROLE_WORLD_SIZE',"
          "'TORCHELASTIC_RESTART_COUNT','MASTER_ADDR','MASTER_PORT')}, "
          "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w'))")


def agent(port, node_rank, nproc, cmd, nnodes=2, join_timeout=20, **kw):
    args = agent_command(DDPRUN, nnodes=nnodes, nproc=nproc,
                         conf=f"join_timeout={join_timeout},heartbeat_timeout=2",
                         extra=[f"--node_rank={node_rank}", f"--master_port={port}"], command=cmd)
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHON_EXEC": PY}, **kw)


def case_two_nodes_get_global_ranks():
    port, out = free_port(), tempfile.mkdtemp()
    cmd = ["--no_python", PY, "-c", REPORT, out]
    results = finish([agent(port, 1, 3, cmd), agent(port, 0, 2, cmd)])
    for status, _, err in results:
        assert status == 0, err
    envs = [json.load(open(os.path.join(out, str(r)))) for r in range(5)]
    for r, e in enumerate(envs):
        node = 0 if r < 2 else 1
        assert e["WORLD_SIZE"] == "5" and e["ROLE_WORLD_SIZE"] == "5", e
        assert e["GROUP_RANK"] == str(node) and e["GROUP_WORLD_SIZE"] == "2", e
        assert e["LOCAL_RANK"] == str(r if node == 0 else r - 2), e
        assert e["LOCAL_WORLD_SIZE"] == str(2 if node == 0 else 3), e
        assert e["MASTER_PORT"] == str(port) and e["MASTER_ADDR"] == "127.0.0.1", e
    print("2 nodes (2 + 3 workers): global, local and group ranks: passed")


FAIL_ONCE = ("import os,sys; sys.exit(7 if os.environ['RANK']=='3' and "
             "os.environ['TORCHELASTIC_RESTART_COUNT']=='0' else 0)")


def case_a_failure_restarts_every_node():
    port = free_port()
    cmd = ["--max_restarts=1", "--no_python", PY, "-c", FAIL_ONCE]
    results = finish([agent(port, 1, 2, cmd), agent(port, 0, 2, cmd)])
    for status, _, err in results:
        assert status == 0, err
        assert "restarting the workers (restart 1 of at most" in err, err
    print("a worker failure on node 1 restarts both nodes, within a job-wide budget: passed")


def case_every_node_prints_the_same_root_cause():
    port = free_port()
    cmd = ["--no_python", PY, "-c", FAIL_ONCE]
    results = finish([agent(port, 1, 2, cmd), agent(port, 0, 2, cmd)])
    roots = []
    for status, _, err in results:
        assert status == 1, (status, err)
        roots.append(err[err.index("Root Cause"):])
    assert roots[0] == roots[1], roots
    assert "rank      : 3 (local_rank: 1)" in roots[0] and "exitcode  : 7" in roots[0], roots[0]
    print("every node prints the same cross-node root cause: passed")


def case_a_dead_node_stops_the_others():
    port, a, b = free_port(), tempfile.mkdtemp(), tempfile.mkdtemp()
    cmd = ["--max_restarts=1", "--no_python", PY, PROBE]
    n1 = agent(port, 1, 1, [*cmd, b], join_timeout=3)
    n0 = agent(port, 0, 1, [*cmd, a], join_timeout=3)
    wait_for(lambda: os.path.exists(f"{a}/ready.0") and os.path.exists(f"{b}/ready.1"),
             "workers on both nodes")
    worker1 = int(open(f"{b}/ready.1").read())
    start = time.monotonic()
    n1.kill()
    wait_for(lambda: os.path.exists(f"{a}/got.0"), "node 0's worker to be stopped", 10)
    stopped_after = time.monotonic() - start
    status, _, err = finish([n0])[0]
    assert status == 3, (status, err)
    assert "node 1 left the job" in err and "node ranks [1] did not join within 3 s" in err, err
    assert stopped_after < 1.0, stopped_after
    wait_for(lambda: not os.path.exists(f"/proc/{worker1}"), "node 1's worker to die with its agent")
    print(f"a dead node's agent stops the others' workers in {stopped_after * 1000:.0f} ms; "
          "without it the job ends after join_timeout: passed")


def case_a_dead_node_without_restarts_fails_the_job_at_once():
    port, a, b = free_port(), tempfile.mkdtemp(), tempfile.mkdtemp()
    n1 = agent(port, 1, 1, ["--no_python", PY, PROBE, b])
    n0 = agent(port, 0, 1, ["--no_python", PY, PROBE, a])
    wait_for(lambda: os.path.exists(f"{a}/ready.0") and os.path.exists(f"{b}/ready.1"),
             "workers on both nodes")
    start = time.monotonic()
    n1.kill()
    status, _, err = finish([n0])[0]
    assert status == 1, (status, err)
    assert "FAILED: node 1 left the job" in err and "no restarts remain" in err, err
    assert time.monotonic() - start < 10, "did not fail fast"
    print("a dead node with no restarts left fails the job at once, saying which: passed")


def case_a_replaced_node_continues_the_job():
    port, a, b = free_port(), tempfile.mkdtemp(), tempfile.mkdtemp()
    # Attempt 0 waits for signals; attempt 1 (after node 1 is replaced) exits at once.
    prog = ["--max_restarts=1", "--no_python", "/bin/sh", "-c",
            f'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exec {PY} {PROBE} "$0"; fi; '
            'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT"']
    n1 = agent(port, 1, 1, [*prog, b])
    n0 = agent(port, 0, 1, [*prog, a])
    wait_for(lambda: os.path.exists(f"{a}/ready.0") and os.path.exists(f"{b}/ready.1"),
             "workers on both nodes")
    n1.kill()
    n1.wait(10)
    replacement = agent(port, 1, 1, [*prog, b])
    results = finish([n0, replacement])
    for status, out, err in results:
        assert status == 0, err
    assert "rank 0 attempt 1" in results[0][1] and "rank 1 attempt 1" in results[1][1], results
    print("a replaced node rejoins and the job continues at attempt 1: passed")


def case_a_node_with_another_max_restarts_is_refused():
    port = free_port()
    node0 = agent(port, 0, 1, ["--max_restarts=1", "--no_python", "/bin/true"], join_timeout=5)
    node1 = agent(port, 1, 1, ["--max_restarts=3", "--no_python", "/bin/true"], join_timeout=5)
    # Node 0 hosts the store and fixes the settings; node 1 is refused at once, node 0 then waits
    # out its join timeout for a node 1 that agrees.
    status, _, err = finish([node1])[0]
    assert status == 3, (status, err)
    assert ("this node's --max_restarts=3 differs from the job's --max_restarts=1" in err), err
    status, _, err = finish([node0])[0]
    assert status == 3 and "did not join" in err, (status, err)
    print("static: a node with another --max_restarts is refused at join, naming both values: passed")


def case_an_unreachable_store_is_a_bounded_clear_error():
    port = free_port()  # nobody listens there: node 0 never comes
    start = time.monotonic()
    status, _, err = finish([agent(port, 1, 1, ["--no_python", "/bin/true"], join_timeout=2)])[0]
    elapsed = time.monotonic() - start
    assert status == 3, (status, err)
    assert f"could not connect to the store at 127.0.0.1:{port}" in err, err
    assert elapsed < 15, elapsed
    print(f"an unreachable store: exit 3 with the address and reason after {elapsed:.1f} s: passed")


def case_a_c10d_endpoint_naming_a_node_by_its_address_or_full_name_is_hosted_there():
    """--rdzv_endpoint=$HEAD_NODE_IP:PORT (PyTorch's Slurm example) or the head's full name: as
    torchrun decides, the agent on the machine the endpoint names hosts the store. Two nodes in
    network namespaces, each with a host name of its own (a UTS namespace) and an /etc/hosts that
    names both (a mount namespace)."""
    from netns import NamespacePair

    try:
        pair = NamespacePair().__enter__()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("network namespaces unavailable here:", e)
        sys.exit(77)
    folder = tempfile.mkdtemp()
    hosts = os.path.join(folder, "hosts")
    with open(hosts, "w") as f:
        f.write("127.0.0.1 localhost\n")
        for i, addr in enumerate(NamespacePair.ADDRS):
            f.write(f"{addr} node{i}.cluster.test node{i}\n")
    try:
        for endpoint in (NamespacePair.ADDRS[0], "node0.cluster.test"):
            port, procs = free_port(), []
            for i in (1, 0):
                own = f"hostname node{i} && mount --bind {hosts} /etc/hosts && exec \"$@\""
                procs.append(pair.run_in(
                    i, ["unshare", "--uts", "--mount", "sh", "-c", own, "sh", DDPRUN, "--nnodes=2",
                        "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}:{port}",
                        "--rdzv_conf=join_timeout=20", "--nproc_per_node=1", "--no_python",
                        "/bin/true"],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            # (Where no agent hosted the store, both wait out the join timeout and fail.)
            for status, _, err in finish(procs):
                assert status == 0, (endpoint, err)
    finally:
        pair.__exit__(None, None, None)
        subprocess.run(["rm", "-rf", folder], check=True)
    print("c10d endpoint by node 0's address and by its full name: node 0 hosted the store, the job "
          "ran: passed")


def case_torch_ddp_across_two_nodes():
    port = free_port()
    result = tempfile.mktemp(suffix=".json")
    env = {**os.environ, "PYTHON_EXEC": PY, "RESULT_FILE": result}
    procs = [subprocess.Popen([DDPRUN, "--nnodes=2", f"--node_rank={n}", "--nproc_per_node=1",
                               f"--master_port={port}", EXAMPLE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for n in (1, 0)]
    for status, _, err in finish(procs):
        assert status == 0, err
    res = json.load(open(result))
    assert res["world"] == 2 and res["identical"], res
    assert res["losses"][-1] < 0.5 * res["losses"][0], res["losses"][::10]
    print("PyTorch DDP (gloo) across 2 agents through node 0's store: replicas identical: passed")


def case_torch_ddp_across_two_c10d_agents():
    endpoint = f"127.0.0.1:{free_port()}"
    result = tempfile.mktemp(suffix=".json")
    env = {**os.environ, "PYTHON_EXEC": PY, "RESULT_FILE": result}
    procs = [subprocess.Popen([DDPRUN, "--nnodes=2", "--rdzv_backend=c10d",
                               f"--rdzv_endpoint={endpoint}", "--rdzv_id=ddp_c10d",
                               "--nproc_per_node=1", EXAMPLE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    for status, _, err in finish(procs):
        assert status == 0, err
    res = json.load(open(result))
    assert res["world"] == 2 and res["identical"], res
    assert res["losses"][-1] < 0.5 * res["losses"][0], res["losses"][::10]
    print("PyTorch DDP (gloo) across 2 c10d agents, the store in the first: replicas identical: passed")


if __name__ == "__main__":
    DDPRUN = os.path.abspath(sys.argv[1])
    globals()["case_" + sys.argv[2]]()
