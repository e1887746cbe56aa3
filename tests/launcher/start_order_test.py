"""Jobs whose pods start in any order, as on Kubernetes: node 1 starts first, naming the master by a
name that does not resolve yet (each node in a network namespace of its own, with an /etc/hosts of
its own: `ip netns exec` puts /etc/netns/<ns>/hosts in its place); the name is added 5 s later and
node 0 started. The job forms and runs, for the static backend (--master_addr) and c10d
(--rdzv_endpoint, the job's ddprund in the head namespace), and torch 2.14's torchrun behaves alike
(exit status 0, formed within the same bound). A SIGTERM during the wait ends the agent within
--shutdown_timeout + 1 s.

    start_order_test.py DDPRUN DDPRUND CASE
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from netns import bridge_hosts, remove_namespaces
from proc_util import free_port, left_running

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH2 = os.path.join(HERE, "..", "..", "scripts", "torch2", "python")
DDPRUN = DDPRUND = None
NET = "10.221.0"
ADDRS = [f"{NET}.11", f"{NET}.12"]
NAME = "trainjob-node-0-0.trainjob"
STORE_NAME = "trainjob-rdzv.trainjob"
WORKER = 'echo "$RANK $WORLD_SIZE $MASTER_ADDR" > "$OUT/ran.$RANK"'


class Pods:
    def __init__(self):
        tag = str(os.getpid())
        self.head, self.hosts = f"soh{tag}", [f"so{tag}{i}" for i in range(2)]
        self.out = tempfile.mkdtemp()
        self.procs = []

    def __enter__(self):
        try:
            bridge_hosts(self.head, self.hosts, NET, ADDRS)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            print("network namespaces unavailable here:", e)
            remove_namespaces([self.head, *self.hosts])
            sys.exit(77)
        for ns in [self.head, *self.hosts]:
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write("127.0.0.1 localhost\n")
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        remove_namespaces([self.head, *self.hosts])
        for ns in [self.head, *self.hosts]:
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def resolve(self, name, addr):
        """`name` resolves to `addr` in every namespace from now on (appended in place: the bind
        mount of each /etc/hosts sees it)."""
        for ns in [self.head, *self.hosts]:
            with open(f"/etc/netns/{ns}/hosts", "a") as f:
                f.write(f"{addr} {name}\n")

    def start(self, ns, cmd, env=None):
        p = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "OUT": self.out, **(env or {})})
        self.procs.append(p)
        return p


def static_cmd(launcher, node_rank, port):
    return [*launcher, "--nnodes=2", f"--node_rank={node_rank}", "--nproc_per_node=1",
            f"--master_addr={NAME}", f"--master_port={port}", "--no_python", "/bin/sh", "-c",
            WORKER]


def c10d_cmd(launcher, port, i):
    # torchrun 2.14 first asks whether the endpoint is this host (getaddrinfo), and fails at once
    # where the name does not resolve, unless rdzv_conf says (is_host=0); ddprun waits either way.
    # Its MASTER_ADDR is the host name (the namespaces share one), unless --local_addr names one.
    conf = ["--rdzv_conf=is_host=0", f"--local_addr={ADDRS[i]}"] if launcher[0] != DDPRUN else []
    return [*launcher, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
            f"--rdzv_endpoint={STORE_NAME}:{port}", "--rdzv_id=order", *conf, "--no_python",
            "/bin/sh", "-c", WORKER]


def late_master(launcher, backend):
    """Node 1 first, the name unresolvable; 5 s later the name and node 0. Returns the exit
    statuses, node 1's stderr and the seconds from node 0's start to both nodes' end."""
    with Pods() as pods:
        port = free_port()
        store = None
        if backend == "c10d":
            store = pods.start(pods.head, [DDPRUND, "--host", f"{NET}.1", "--port", "0",
                                           "--log-level", "warn"])
            port = int(store.stdout.readline())
            cmds = [c10d_cmd(launcher, port, 0), c10d_cmd(launcher, port, 1)]
        else:
            cmds = [static_cmd(launcher, 0, port), static_cmd(launcher, 1, port)]
        first = pods.start(pods.hosts[1], cmds[1])
        time.sleep(5)  # what a pod that starts later takes: the name does not exist meanwhile
        assert first.poll() is None, first.communicate()[1][-3000:]
        pods.resolve(NAME, ADDRS[0])
        pods.resolve(STORE_NAME, f"{NET}.1")
        started = time.monotonic()
        second = pods.start(pods.hosts[0], cmds[0])
        results = [(p.wait(timeout=180), p.communicate()[1]) for p in (second, first)]
        took = time.monotonic() - started
        ran = sorted(f for f in os.listdir(pods.out) if f.startswith("ran."))
        assert ran == ["ran.0", "ran.1"], (ran, results)
        assert not left_running(pods.out)
        return [r[0] for r in results], results[1][1], took


def compare(backend):
    mine = late_master([DDPRUN], backend)
    assert mine[0] == [0, 0], mine
    assert "does not resolve yet" in mine[1], mine[1][-3000:]
    theirs = late_master([TORCH2, "-m", "torch.distributed.run"], backend)
    assert theirs[0] == [0, 0], theirs
    # Formed and ended once the name resolved: ddprun within 5 s, and not later than torchrun + 2 s.
    assert mine[2] < max(5.0, theirs[2] + 2.0), (mine[2], theirs[2])
    return mine[2], theirs[2]


def case_a_static_master_that_resolves_late_is_waited_for():
    mine, theirs = compare("static")
    print(f"static: node 1 started 5 s before the master's name resolved; the job formed and "
          f"ended {mine:.1f} s after node 0 started (torchrun 2.14: {theirs:.1f} s): passed")


def case_a_c10d_endpoint_that_resolves_late_is_waited_for():
    mine, theirs = compare("c10d")
    print(f"c10d: node 1 started 5 s before the endpoint's name resolved; the job formed and ended "
          f"{mine:.1f} s after node 0 started (torchrun 2.14: {theirs:.1f} s): passed")


def case_a_sigterm_during_the_wait_ends_it():
    with Pods() as pods:
        p = pods.start(pods.hosts[1], [DDPRUN, "--shutdown_timeout=2",
                                       *static_cmd([], 1, free_port())])
        # Into the wait: its line says what it waits for (bounded by the test's timeout).
        for line in p.stderr:
            if "does not resolve yet" in line:
                break
        assert p.poll() is None
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        took = time.monotonic() - sent
        assert p.returncode == 143, (p.returncode, p.communicate()[1][-2000:])
        assert took < 2 + 1, took
    print(f"a SIGTERM while the master's name did not resolve: exit 143 after {took:.2f} s "
          f"(--shutdown_timeout=2): passed")


if __name__ == "__main__":
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    globals()["case_" + sys.argv[3]]()
