"""A stop ends every wait: an agent told to stop (SIGTERM, or its head node's control channel
closing) while it waits outside its workers' run exits within --shutdown_timeout + 1 s, in every
phase, for every backend, and leaves no process behind. join_timeout is 60 s, so a wait that ignored
the stop would show as a minute.

    stop_test.py DDPRUN BACKEND     (BACKEND: static, c10d or etcd)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from proc_util import alive, free_port, listening_address, wait_for

DDPRUN = None
SHUTDOWN_TIMEOUT = 2
LIMIT = SHUTDOWN_TIMEOUT + 1.0
CONF = "join_timeout=60,last_call_timeout=1,heartbeat_timeout=3"


class Agent:
    """One ddprun agent; stopped by SIGTERM or, with `control`, by closing its head's channel. Each
    phase waits for its `agent_started` event first: from then on the agent handles signals (before,
    a SIGTERM ends it as it would any process)."""

    started = 0  # agents so far: each gets an event log of its own

    def __init__(self, args, control, folder):
        Agent.started += 1
        self.events = os.path.join(folder, f"events-{Agent.started}.jsonl")
        cmd = [DDPRUN, f"--shutdown_timeout={SHUTDOWN_TIMEOUT}", f"--event_log={self.events}",
               *(["--head_control"] if control else []), *args]
        self.control = control
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if control else subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def recorded(self, name, **fields):
        try:
            with open(self.events) as f:
                for line in f:
                    e = json.loads(line)
                    if e.get("event") == name and all(e.get(k) == v for k, v in fields.items()):
                        return True
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        return False

    def stop(self):
        """Stops the agent; returns how long it took to exit."""
        start = time.monotonic()
        if self.control:
            self.proc.stdin.close()
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("the agent did not exit within 90 s of its stop")
        return time.monotonic() - start

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def accepting(port):
    try:
        listening_address(port)
        return True
    except (IndexError, subprocess.CalledProcessError):
        return False


def check_stop(what, agent, control, leftovers=()):
    took = agent.stop()
    err = agent.proc.stderr.read()
    how = "control channel closed" if control else "SIGTERM"
    assert agent.proc.returncode == 128 + signal.SIGTERM, (what, how, agent.proc.returncode, err)
    assert took < LIMIT, f"{what} ({how}): exited {took:.2f} s after the stop (limit {LIMIT} s)"
    for pid in leftovers:
        wait_for(lambda: not alive(pid), f"process {pid} of {what} to be gone", 5)
    print(f"{what} ({how}): exited {took:.2f} s after the stop")


def running(agent, what):
    """wait_for's predicate `what`, failing at once with the agent's stderr if it exits."""
    def check():
        if agent.proc.poll() is not None:
            raise AssertionError(f"the agent exited {agent.proc.returncode} before the phase: "
                                 f"{agent.proc.stderr.read()}")
        return what()
    return check


def waiting_phase(what, args, control, folder, ready=None):
    """An agent stopped once it has started (and, if given, once `ready(agent)` holds)."""
    agent = Agent(args, control, folder)
    try:
        wait_for(running(agent, lambda: agent.recorded("agent_started") and
                         (ready is None or ready(agent))), f"'{what}' to begin", 30)
        check_stop(what, agent, control)
    finally:
        agent.kill()


def health_check_phase(args, control, folder):
    """The node's --health_check runs (a command that would take a minute)."""
    pid_file = os.path.join(folder, "health.pid")
    agent = Agent([f"--health_check=echo $$ > {pid_file}; exec sleep 60", *args], control, folder)
    wait_for(running(agent, lambda: os.path.exists(pid_file) and open(pid_file).read().strip()),
             "the health check to start", 30)
    pid = int(open(pid_file).read())
    try:
        check_stop("a health check running", agent, control, leftovers=[pid])
    finally:
        agent.kill()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def exit_barrier_phase(node_args, control, folder, job_wide_stop):
    """The node whose rank 0 succeeded waits at the exit barrier for the other node's worker, which
    holds until a file appears (or a minute passes). That node is stopped. With `job_wide_stop`
    (static: a node's stop is the job's) the other one then stops with it; an elastic job's other
    node goes on to re-form the job without it instead."""
    release = os.path.join(folder, "release")
    hold = ("import os,sys,time\n"
            "if os.environ['RANK'] == '0': sys.exit(0)\n"
            "t = time.monotonic() + 60\n"
            f"while not os.path.exists({release!r}) and time.monotonic() < t: time.sleep(0.05)\n")
    cmd = ["--no_python", sys.executable, "-c", hold]
    agents = [Agent([*node_args(n), *cmd], control, folder) for n in (0, 1)]
    try:
        wait_for(lambda: any(a.recorded("worker_exited", rank=0) for a in agents),
                 "rank 0 to succeed", 60)
        waiting = next(a for a in agents if a.recorded("worker_exited", rank=0))
        check_stop("waiting at the exit barrier", waiting, control)
        if job_wide_stop:
            other = next(a for a in agents if a is not waiting)
            assert other.proc.wait(timeout=30) == 128 + signal.SIGTERM, other.proc.stderr.read()
    finally:
        open(release, "w").close()
        for a in agents:
            a.kill()


def whole_job_phase(node_args, control, folder, repeats=4):
    """Every node of a running job stopped at once, the first started (whose agent serves the
    store) a few ms first, as a scheduler cancelling the job does: a node that learns of the stop from its peer
    before its own signal arrives, and then loses the store, still exits at once (its store
    session must not hold it for the heartbeat timeout), with 128 + SIGTERM, and so does the node
    whose own signal comes after its run ended. Timing dependent, so done a few times."""
    limit = 2.0
    for attempt in range(repeats):
        ready = os.path.join(folder, f"ready-{attempt}")
        os.makedirs(ready)
        work = ["--no_python", "/bin/sh", "-c", f"touch {ready}/$RANK; exec sleep 60"]
        agents = [Agent([*node_args(n), *work], control, folder) for n in (0, 1)]
        try:
            wait_for(lambda: len(os.listdir(ready)) == 2, "both workers to start", 60)
            start = time.monotonic()
            for a in agents:
                if control:
                    a.proc.stdin.close()
                else:
                    a.proc.send_signal(signal.SIGTERM)
                time.sleep(0.005)
            for n, a in enumerate(agents):
                code = a.proc.wait(timeout=90)
                took = time.monotonic() - start
                err = a.proc.stderr.read()
                assert code == 128 + signal.SIGTERM, (n, code, err)
                assert took < limit, f"node {n} exited {took:.2f} s after the job's stop: {err}"
        finally:
            for a in agents:
                a.kill()
    print(f"a whole job stopped at once ({'control' if control else 'SIGTERM'}): both nodes exited "
          f"within {limit} s, {repeats} times")


def static_phases(control, folder):
    def base(port):
        return ["--nnodes=2", f"--master_port={port}", "--master_addr=127.0.0.1",
                f"--rdzv_conf={CONF}"]
    job = ["--no_python", "/bin/true"]
    port = free_port()

    waiting_phase("node 1 waiting for its master's store",  # nobody serves it
                  [*base(port), "--node_rank=1", *job], control, folder)
    port = free_port()
    waiting_phase("node 0 waiting for node 1 to join", [*base(port), "--node_rank=0", *job],
                  control, folder, lambda _: accepting(port))

    health_check_phase([*base(free_port()), "--node_rank=0", *job], control, folder)
    port = free_port()
    exit_barrier_phase(lambda n: [*base(port), f"--node_rank={n}"], control, folder, True)
    port = free_port()
    whole_job_phase(lambda n: ["--nnodes=2", f"--master_port={port}", "--master_addr=127.0.0.1",
                               f"--node_rank={n}"], control, folder)


def c10d_phases(control, folder):
    port = free_port()
    base = ["--nnodes=2", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
            "--rdzv_id=stop"]
    job = ["--no_python", "/bin/true"]

    # A client of a store that is not there (is_host=0: it never hosts it).
    waiting_phase("an agent waiting for the job's store",
                  [*base, f"--rdzv_conf={CONF},is_host=0", *job], control, folder)
    waiting_phase("an agent waiting for a second node", [*base, f"--rdzv_conf={CONF}", *job],
                  control, folder, lambda _: accepting(port))

    health_check_phase(["--nnodes=2", "--rdzv_backend=c10d",
                        f"--rdzv_endpoint=127.0.0.1:{free_port()}", "--rdzv_id=health",
                        f"--rdzv_conf={CONF}", *job], control, folder)
    barrier_port = free_port()
    exit_barrier_phase(
        lambda n: ["--nnodes=2", "--rdzv_backend=c10d",
                   f"--rdzv_endpoint=127.0.0.1:{barrier_port}", "--rdzv_id=barrier",
                   f"--rdzv_conf={CONF}"], control, folder, False)
    whole_port = free_port()
    whole_job_phase(lambda n: ["--nnodes=2", "--rdzv_backend=c10d",
                               f"--rdzv_endpoint=127.0.0.1:{whole_port}", "--rdzv_id=whole"],
                    control, folder)


def etcd_phases(control, folder):
    from etcd_cluster import EtcdCluster, have_etcd
    if not have_etcd():
        print("etcd is not installed: skipped")
        sys.exit(77)
    job = ["--no_python", "/bin/true"]
    nobody = free_port()
    waiting_phase("an agent waiting for etcd",
                  ["--nnodes=2", "--rdzv_backend=etcd-v3", f"--rdzv_endpoint=127.0.0.1:{nobody}",
                   "--rdzv_id=stop", f"--rdzv_conf={CONF}", *job], control, folder)
    with EtcdCluster(members=1) as cluster:
        endpoint = f"127.0.0.1:{cluster.client[0]}"
        base = ["--nnodes=2", "--rdzv_backend=etcd-v3", f"--rdzv_endpoint={endpoint}",
                f"--rdzv_conf={CONF}"]
        waiting_phase("an agent waiting for a second node", [*base, "--rdzv_id=wait", *job],
                      control, folder, lambda _: cluster_has_node(cluster, "wait"))
        health_check_phase([*base, "--rdzv_id=health", *job], control, folder)
        exit_barrier_phase(lambda n: [*base, "--rdzv_id=barrier"], control, folder, False)


def cluster_has_node(cluster, run_id):
    keys = cluster.etcdctl("get", "--prefix", "--keys-only", f"/ddprun/{run_id}/").stdout
    return "nodes" in keys


def main():
    global DDPRUN
    DDPRUN = os.path.abspath(sys.argv[1])
    phases = {"static": static_phases, "c10d": c10d_phases, "etcd": etcd_phases}[sys.argv[2]]
    for control in (False, True):
        phases(control, tempfile.mkdtemp())
    print(f"{sys.argv[2]}: every wait ended by SIGTERM and by the control channel closing: passed")


if __name__ == "__main__":
    main()
