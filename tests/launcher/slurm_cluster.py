"""A real Slurm cluster on this machine, made (and removed) by a test: munged with a key the test
generates, slurmctld in a head network namespace, and one slurmd per node namespace, each node with
its own address and veth eth0. Every daemon of a node runs in a mount namespace whose /etc/hosts
names the nodes, so that node names in SLURM_*_NODELIST resolve there as on a real cluster, without
touching this machine's /etc/hosts.

    with SlurmCluster(2) as cluster:
        cluster.run(["srun", "-N2", ...])      # from the head namespace, SLURM_CONF set
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

from netns import bridge_hosts, remove_namespaces

DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "srun", "nsenter", "unshare", "ip")


def available():
    """Why the cluster cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (daemons, network namespaces)"
    for d in DAEMONS:
        if not shutil.which(d):
            return f"needs {d} (slurmctld, slurmd, slurm-client, munge, util-linux, iproute2)"
    return None


class SlurmCluster:
    NET = "10.216.0"

    def __init__(self, nodes):
        tag = str(os.getpid())
        self.head_ns = f"sh{tag}"
        self.node_ns = [f"sh{tag}n{i}" for i in range(nodes)]
        self.nodes = [f"node{i + 1}" for i in range(nodes)]
        self.addrs = [f"{self.NET}.{i + 2}" for i in range(nodes)]
        self.dir = tempfile.mkdtemp(prefix="ddprun-slurm-")
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.procs = []

    def env(self, **extra):
        return {**os.environ, "SLURM_CONF": self.conf, **extra}

    def __enter__(self):
        try:
            self._network()
            self._munge()
            self._config()
            self._daemons()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _network(self):
        bridge_hosts(self.head_ns, self.node_ns, self.NET, self.addrs)
        self.hosts_file = os.path.join(self.dir, "hosts")
        with open(self.hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n" + f"{self.NET}.1 {socket.gethostname()}\n" +
                    "".join(f"{a} {n}\n" for a, n in zip(self.addrs, self.nodes)))

    def _munge(self):
        key = os.path.join(self.dir, "munge.key")
        subprocess.run(["mungekey", "-c", "-k", key], check=True)
        os.chmod(key, 0o600)
        self.munge_socket = os.path.join(self.dir, "munge.sock")
        # munged forks into the background once its socket is ready (-f: a root-owned key folder
        # under /tmp is fine for a test).
        subprocess.run(["munged", "-f", "--key-file", key, "--socket", self.munge_socket,
                        "--pid-file", os.path.join(self.dir, "munged.pid"), "--log-file",
                        os.path.join(self.dir, "munged.log"), "--seed-file",
                        os.path.join(self.dir, "munge.seed")], check=True)

    def _config(self):
        d = self.dir
        os.makedirs(os.path.join(d, "state"))
        for n in self.nodes:
            os.makedirs(os.path.join(d, "spool", n))
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=ddprun
SlurmctldHost={socket.gethostname()}({self.NET}.1)
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
KillWait=5
MailProg=/bin/true
NodeName=node[1-{len(self.nodes)}] NodeAddr={",".join(self.addrs)} CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=main Nodes=node[1-{len(self.nodes)}] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""")

    def _in(self, ns, cmd):
        """`cmd` in network namespace `ns` and a mount namespace with the cluster's /etc/hosts.
        (nsenter, not `ip netns exec`: that remounts /sys, and slurmd needs /sys/fs/cgroup.)"""
        return ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--", "sh", "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"', self.hosts_file, *cmd]

    def _daemons(self):
        ctl = subprocess.Popen(self._in(self.head_ns, ["slurmctld", "-D", "-i"]), env=self.env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(ctl)
        for ns, node in zip(self.node_ns, self.nodes):
            self.procs.append(subprocess.Popen(self._in(ns, ["slurmd", "-D", "-N", node]),
                                               env=self.env(), stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        # Ready when the controller reports every node idle (bounded; sinfo asks, no sleeping on
        # a guess).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = self.run(["sinfo", "-h", "-o", "%T %D"], timeout=10)
            if r.returncode == 0 and r.stdout.split() == ["idle", str(len(self.nodes))]:
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Slurm daemon exited: see {self.dir}/*.log")
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm nodes did not become idle within 60 s: {self.dir}/*.log")

    def run(self, cmd, timeout=120, **kw):
        """Runs a Slurm client command (srun, scancel, ...) in the head namespace; waits."""
        return subprocess.run(self._in(self.head_ns, cmd), env=kw.pop("env", self.env()),
                              capture_output=True, text=True, timeout=timeout, **kw)

    def start(self, cmd, **kw):
        """Starts a Slurm client command in the head namespace."""
        return subprocess.Popen(self._in(self.head_ns, cmd), env=kw.pop("env", self.env()),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def __exit__(self, *exc):
        # The nodes' slurmd first, the controller last: a slurmd stopped after slurmctld retries
        # telling it that a cancelled job's epilog completed, for 9 s, before it exits.
        for group in (self.procs[1:], self.procs[:1]):
            for p in group:
                p.terminate()
            for p in group:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        try:
            with open(os.path.join(self.dir, "munged.pid")) as f:
                os.kill(int(f.read().strip()), 15)
        except (OSError, ValueError):
            pass
        remove_namespaces([self.head_ns, *self.node_ns])
        shutil.rmtree(self.dir, ignore_errors=True)
