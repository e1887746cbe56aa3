"""Elastic jobs on --rdzv_backend=etcd against a real 3-member etcd cluster (Debian's etcd-server) on
loopback, started and stopped by the test.

    etcd_test.py DDPRUN CASE     (CASE: one of the functions named case_*; exits 77 without etcd)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from proc_util import finish, free_port, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None


class EtcdCluster:
    def __init__(self, members=3):
        self.dir = tempfile.mkdtemp()
        self.names = [f"m{i}" for i in range(members)]
        self.client = [free_port() for _ in self.names]
        peer = [free_port() for _ in self.names]
        cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, peer))
        self.procs = {}
        for n, c, p in zip(self.names, self.client, peer):
            self.procs[n] = subprocess.Popen(
                ["etcd", "--name", n, "--data-dir", f"{self.dir}/{n}",
                 "--listen-client-urls", f"http://127.0.0.1:{c}",
                 "--advertise-client-urls", f"http://127.0.0.1:{c}",
                 "--listen-peer-urls", f"http://127.0.0.1:{p}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                 "--initial-cluster", cluster, "--initial-cluster-state", "new"],
                stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/{n}.log", "w"))
        wait_for(self.healthy, "a healthy etcd cluster")

    def endpoints(self):
        return ",".join(f"127.0.0.1:{c}" for c in self.client)

    def status(self):
        r = subprocess.run(["etcdctl", "--endpoints", self.endpoints(), "endpoint", "status",
                            "-w", "json"], capture_output=True, text=True,
                           env={**os.environ, "ETCDCTL_API": "3"}, timeout=10)
        return json.loads(r.stdout) if r.stdout.strip() else []

    def healthy(self):
        return len(self.status()) == len(self.names)

    def leader(self):
        for s in self.status():
            if s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
                port = int(s["Endpoint"].rsplit(":", 1)[1])
                return self.names[self.client.index(port)]
        raise AssertionError("no etcd leader")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def agent(cluster, nnodes, script, *args, conf="last_call_timeout=1,heartbeat_timeout=3"):
    return subprocess.Popen(
        [DDPRUN, f"--nnodes={nnodes}", "--nproc_per_node=1", "--rdzv_backend=etcd",
         f"--rdzv_endpoint={cluster.endpoints()}", "--rdzv_id=job", f"--rdzv_conf={conf}",
         "--no_python", "/bin/sh", "-c", script, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def count(d, prefix):
    return sum(1 for f in os.listdir(d) if f.startswith(prefix))


def workload(hold):
    return (f'if [ "$WORLD_SIZE" = {hold} ] && [ ! -e "$0/go" ]; then exec {PY} {PROBE} "$0/w$1"; fi; '
            'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')


def case_losing_the_leader_costs_no_restart():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        procs = []
        for i in range(2):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(cluster, "2:2", workload(2), d, str(i)))
        wait_for(lambda: count(f"{d}/w0", "ready.") + count(f"{d}/w1", "ready.") == 2, "2 workers")
        leader = cluster.leader()
        cluster.procs[leader].kill()
        # Longer than the 3 s heartbeat timeout: the leases must have been kept alive elsewhere.
        time.sleep(4.5)
        for i in range(2):
            rank = os.listdir(f"{d}/w{i}")[0].split(".")[1]
            os.kill(int(open(f"{d}/w{i}/ready.{rank}").read()), signal.SIGTERM)
        for status, _, err in finish(procs):
            assert status == 0, err
            assert "stopping this node's workers" not in err and "restarting" not in err, err
        assert count(d, "ran.") == 0, os.listdir(d)  # no second round ran
        print(f"the etcd leader ({leader}) SIGKILLed under a running job: no restart, exit 0: passed")


def case_survivors_re_form_after_a_dead_agent():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        procs = []
        for i in range(3):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(cluster, "2:3", workload(3), d, str(i)))
        wait_for(lambda: sum(count(f"{d}/w{i}", "ready.") for i in range(3)) == 3, "3 workers")
        procs[2].kill()
        for status, _, err in finish(procs[:2]):
            assert status == 0, err
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["2", "0"], ["2", "0"]], ran  # world 2, no restart counted
        print("on etcd, one of 3 agents SIGKILLed: the survivors run again at WORLD_SIZE=2: passed")


def case_an_endpoint_that_is_not_etcd_is_a_clear_bounded_error():
    port = free_port()
    import socket
    with socket.socket() as s:  # a TCP server that never speaks HTTP
        s.bind(("127.0.0.1", port))
        s.listen()
        p = subprocess.run(
            [DDPRUN, "--nnodes=2", "--rdzv_backend=etcd", f"--rdzv_endpoint=127.0.0.1:{port}",
             "--rdzv_conf=join_timeout=3", "--no_python", "/bin/true"],
            capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "etcd is unreachable" in p.stderr, (p.returncode, p.stderr)
    print("an endpoint that is not etcd: exit 3 with a clear message within join_timeout: passed")


if __name__ == "__main__":
    if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        print("etcd-server/etcd-client not installed")
        sys.exit(77)
    DDPRUN = sys.argv[1]
    globals()[f"case_{sys.argv[2]}"]()
