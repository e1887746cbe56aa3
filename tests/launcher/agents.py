"""How the process tests start ddprun's agents and ddprund: an agent's command line with the
rendezvous flags, the processes a test starts (killed at its end, whatever happened), a ddprund on
loopback, and a job on nodes in network namespaces (host namespaces on one bridge, the job's
ddprund in a head namespace) that the multi-node tests' clusters build on."""
import os
import subprocess
import tempfile

from netns import bridged_job_store, remove_namespaces
from proc_util import agents_ended


def agent_command(ddprun, *, nnodes, nproc, endpoint=None, run_id=None, backend="c10d",
                  conf=None, extra=(), command=()):
    """ddprun's command line for one node of a job: `nnodes` and `nproc` per node, at `endpoint`
    (none: the static rendezvous of --master_port in `extra`), with `extra` flags, running
    `command` (a script and its arguments, or --no_python and a program)."""
    rdzv = []
    if endpoint is not None:
        rdzv = [f"--rdzv_backend={backend}", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={run_id}"]
    if conf:
        rdzv.append(f"--rdzv_conf={conf}")
    return [ddprun, f"--nnodes={nnodes}", f"--nproc_per_node={nproc}", *rdzv, *extra, *command]


def rdzv_id(run_id):
    """The rendezvous id of job `run_id` in this test: its own (the pid's), so that a variant of the
    test running beside it (torch 2.14's) is another job, with checkpoint folders of its own."""
    return f"{run_id}-{os.getpid()}"


class Processes:
    """The processes a test starts, each killed at the end of the `with` block if still running."""

    def __init__(self):
        self.started = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                p.wait()

    def start(self, args, log=None, **kw):
        """Popen of `args` with stdout piped and stderr piped or written to the file `log`."""
        kw.setdefault("stdout", subprocess.PIPE)
        if "stderr" not in kw:
            kw["stderr"] = open(log, "w") if log else subprocess.PIPE
        self.started.append(subprocess.Popen(args, text=True, **kw))
        return self.started[-1]

    def ddprund(self, ddprund, *extra):
        """A ddprund on loopback, on a port the OS chose: its process, its port, its log's path."""
        log = tempfile.mktemp(suffix=".ddprund.log")
        p = self.start([ddprund, "--host", "127.0.0.1", "--port", "0", *extra], log=log)
        return p, int(p.stdout.readline()), log


class BridgedJob:
    """Host namespaces `<prefix><pid><i>` on one bridge (addresses NET.11, NET.12, ...) and a head
    namespace with the jobs' ddprund at NET.1; an agent per (job, host), started in its host's
    namespace with the rendezvous flags (`CONF`) every such test uses, and rdzv_id(job). Skips the test (exit 77) where namespaces cannot be made."""

    CONF = "last_call_timeout=1,join_timeout=90,heartbeat_timeout=3"

    def __init__(self, prefix, hosts, net, ddprun, ddprund, nsenter=False):
        tag = str(os.getpid())
        self.head, self.hosts = f"{prefix}h{tag}", [f"{prefix}{tag}{i}" for i in range(hosts)]
        self.net, self.ddprun, self.ddprund = net, ddprun, ddprund
        # nsenter rather than `ip netns exec` where the agent must see the machine's /sys (cgroups):
        # `ip netns exec` mounts a /sys of its own.
        self.nsenter = nsenter
        self.procs, self.agents = [], {}

    def __enter__(self):
        addrs = [f"{self.net}.{11 + i}" for i in range(len(self.hosts))]
        store, self.port = bridged_job_store(self.head, self.hosts, self.net, addrs, self.ddprund)
        self.procs.append(store)
        return self

    def __exit__(self, *exc):
        for p in [*self.agents.values(), *self.procs]:
            if p.poll() is None:
                p.kill()
            p.wait()
        remove_namespaces([self.head, *self.hosts])

    def in_host(self, i):
        """The prefix that runs a command in host i's namespace."""
        if self.nsenter:
            return ["nsenter", f"--net=/var/run/netns/{self.hosts[i]}"]
        return ["ip", "netns", "exec", self.hosts[i]]

    def agent(self, run_id, i, *, nnodes, nproc=1, extra=(), command=(), env=None, wrap=()):
        """Starts host i's agent of job `run_id` (stdout discarded, stderr piped), inside the
        command line `wrap` where given, and returns it."""
        cmd = agent_command(self.ddprun, nnodes=nnodes, nproc=nproc,
                            endpoint=f"{self.net}.1:{self.port}", run_id=rdzv_id(run_id),
                            conf=self.CONF, extra=extra, command=command)
        self.agents[(run_id, i)] = subprocess.Popen(
            [*wrap, *self.in_host(i), *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "GLOO_SOCKET_IFNAME": "eth0", **(env or {})})
        return self.agents[(run_id, i)]

    def finish(self, run_id, codes):
        """Each agent's stderr once it ended with its code in `codes` (host -> exit status; a list
        of hosts: 0 for each)."""
        if not isinstance(codes, dict):
            codes = {i: 0 for i in codes}
        errs = agents_ended(self.agents, {(run_id, i): code for i, code in codes.items()})
        return {i: errs[(run_id, i)] for i in codes}

    def kill(self, run_id, i):
        """SIGKILLs host i's agent of job `run_id` (its workers die with it)."""
        self.agents[(run_id, i)].kill()
        self.agents[(run_id, i)].wait()

    def status(self, run_id):
        """`ddprun status` of job `run_id`, asked from the head namespace: its stdout and stderr."""
        r = subprocess.run(["ip", "netns", "exec", self.head, self.ddprun, "status",
                            "--rdzv_backend=c10d", f"--rdzv_endpoint={self.net}.1:{self.port}",
                            f"--rdzv_id={rdzv_id(run_id)}"],
                           capture_output=True, text=True, timeout=60)
        return r.stdout + r.stderr

