"""Elastic (--nnodes=MIN:MAX) jobs: agents as real processes on loopback, on either multi-node
backend: c10d with the store in a standalone ddprund (unless a case says otherwise), or etcd on a real
3-member etcd cluster.

    elastic_test.py DDPRUN DDPRUND CASE [c10d|etcd]
        (CASE: one of the functions named case_*; on etcd, exits 77 without etcd installed)
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from agents import agent_command
from etcd_cluster import EtcdCluster, have_etcd
from proc_util import finish, free_port, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another, such as
# scripts/torch2/python (torch 2.6) for the tests labelled torch2.
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
BACKEND = "c10d"


class Ddprund:
    def __init__(self, port=0):
        self.proc = subprocess.Popen([DDPRUND, "--host", "127.0.0.1", "--port", str(port),
                                      "--log-level", "warn"], stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline())
        self.endpoint = f"127.0.0.1:{self.port}"

    def restart(self, outage_s):
        """SIGKILL, and after `outage_s` a new ddprund on the same port: it knows nothing of any job."""
        self.proc.kill()
        self.proc.wait()
        time.sleep(outage_s)  # the outage itself, not a synchronisation
        self.__init__(self.port)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


class Etcd(EtcdCluster):
    def __init__(self):
        super().__init__(members=3)
        self.endpoint = self.endpoints()


def Store():
    """The job's rendezvous store on the backend under test; .endpoint is what --rdzv_endpoint takes."""
    return Etcd() if BACKEND == "etcd" else Ddprund()


# A dead agent's presence ends with its connection on c10d, with its lease's TTL (the heartbeat
# timeout) on etcd: the etcd cases use a short one.
HEARTBEAT_S = 2


def agent(endpoint, nnodes, script, *args, run_id="job", conf="last_call_timeout=1", extra=(),
          stderr=subprocess.PIPE):
    if BACKEND == "etcd":
        conf += f",heartbeat_timeout={HEARTBEAT_S}"
    return subprocess.Popen(
        agent_command(DDPRUN, nnodes=nnodes, nproc=1, endpoint=endpoint, run_id=run_id,
                      backend=BACKEND, conf=conf, extra=extra,
                      command=["--no_python", "/bin/sh", "-c", script, *args]),
        stdout=subprocess.PIPE, stderr=stderr, text=True)


def logged(path, text):
    """How many lines of the file at `path` contain `text`."""
    with open(path) as f:
        return sum(text in line for line in f)


def count(d, prefix):
    return sum(1 for f in os.listdir(d) if f.startswith(prefix))


# In rounds of `hold` nodes the workers wait (signal_probe); in other rounds they report and exit 0.
def workload(hold):
    return (f'if [ "$WORLD_SIZE" = {hold} ] && [ ! -e "$0/go" ]; then exec {PY} {PROBE} "$0/w$1"; fi; '
            'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')


def case_survivors_restart_with_a_smaller_world():
    with Store() as s:
        d = tempfile.mkdtemp()
        procs = []
        for i in range(3):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(s.endpoint, "2:3", workload(3), d, str(i)))
        wait_for(lambda: sum(count(f"{d}/w{i}", "ready.") for i in range(3)) == 3, "3 workers")
        kill_ns = time.time_ns()
        procs[2].kill()
        for status, _, err in finish(procs[:2]):
            assert status == 0, err
        ran = [f for f in os.listdir(d) if f.startswith("ran.")]
        assert sorted(f.split(".")[3:] for f in ran) == [["2", "0"], ["2", "0"]], ran  # world 2, no restart counted
        latency = max(int(open(f"{d}/{f}").read()) for f in ran) - kill_ns
        assert latency < (2e9 if BACKEND == "c10d" else (HEARTBEAT_S + 2) * 1e9), latency
        print(f"{BACKEND}: one of 3 agents SIGKILLed: the survivors run again at WORLD_SIZE=2 "
              f"{latency / 1e6:.0f} ms later: passed")


def case_a_new_node_scales_the_job_up():
    with Store() as s:
        d = tempfile.mkdtemp()
        procs = []
        for i in range(2):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(s.endpoint, "2:4", workload(2), d, str(i), conf="last_call_timeout=0.3"))
        wait_for(lambda: count(f"{d}/w0", "ready.") + count(f"{d}/w1", "ready.") == 2, "2 workers")
        procs.append(agent(s.endpoint, "2:4", workload(2), d, "2", conf="last_call_timeout=0.3"))
        for status, _, err in finish(procs):
            assert status == 0, err
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["3", "0"]] * 3, ran
        # The two nodes of the first round keep their ranks; the newcomer comes after them.
        first = {f.split(".")[1]: f.split(".")[2] for f in os.listdir(d) if f.startswith("ran.")}
        assert sorted([first["0"], first["1"]]) == ["0", "1"] and first["2"] == "2", first
        print("a third node joining a 2-node job scales it to WORLD_SIZE=3, not counted as a restart, "
              "the first two keeping their ranks: passed")


def case_a_spare_takes_a_dead_nodes_place():
    with Store() as s:
        d = tempfile.mkdtemp()
        procs = []
        for i in range(3):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(s.endpoint, "2:2", workload(2), d, str(i)))
        wait_for(lambda: sum(count(f"{d}/w{i}", "ready.") for i in range(3)) == 2, "2 workers")
        spare = next(i for i in range(3) if count(f"{d}/w{i}", "ready.") == 0)
        victim = next(i for i in range(3) if i != spare)
        open(f"{d}/go", "w").close()  # the next round's workers finish
        procs[victim].kill()
        for status, _, err in finish([p for i, p in enumerate(procs) if i != victim]):
            assert status == 0, err
        ran = sorted(f.split(".")[1] for f in os.listdir(d) if f.startswith("ran."))
        assert str(spare) in ran and len(ran) == 2, (ran, spare)
        print("with 3 agents for 2:2 the third waits as a spare and replaces a SIGKILLed node: passed")


def case_a_node_failing_its_health_check_never_joins():
    with Store() as s:
        d = tempfile.mkdtemp()
        report = 'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"'
        sick = agent(s.endpoint, "2:3", report, d, "2",
                     extra=["--health_check", "echo checking; echo GPU 2 is missing >&2; exit 3"])
        status, _, err = finish([sick])[0]
        assert status == 4, (status, err)
        assert "kept out of the job: the health check failed (exit status 3: GPU 2 is missing)" in err, err
        healthy = [agent(s.endpoint, "2:3", report, d, str(i), extra=["--health_check", "true"])
                   for i in range(2)]
        for status, _, err in finish(healthy):
            assert status == 0, err
        ran = sorted(f.split(".")[1:4] for f in os.listdir(d) if f.startswith("ran."))
        assert [r[0] for r in ran] == ["0", "1"] and all(r[2] == "2" for r in ran), ran
        # A check that hangs is bounded by its timeout.
        slow = agent(s.endpoint, "2:3", report, d, "3",
                     extra=["--health_check", "echo probing; sleep 60", "--health_check_timeout=0.5"])
        status, _, err = finish([slow])[0]
        assert status == 4 and "timed out after 0.5 s: probing" in err, (status, err)
        print(f"{BACKEND}: a node whose --health_check fails (or hangs) exits 4 with the reason and "
              "never joins; the others run without it: passed")


def case_a_node_whose_health_check_starts_failing_leaves():
    with Store() as s:
        d = tempfile.mkdtemp()
        # Attempt 0: every worker waits for "go"; then rank 0 fails. Later attempts report and end.
        script = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then touch "$0/ready.$1"; '
                  'while [ ! -e "$0/go" ]; do sleep 0.05; done; '
                  'if [ "$RANK" = 0 ]; then exit 3; fi; exec sleep 60; fi; '
                  'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')
        procs = [agent(s.endpoint, "2:3", script, d, str(i),
                       extra=["--max_restarts=1", "--health_check", f'test ! -e "{d}/sick.{i}"'])
                 for i in range(3)]
        wait_for(lambda: count(d, "ready.") == 3, "3 workers")
        open(f"{d}/sick.2", "w").close()  # node 2 turns sick while its workers run
        open(f"{d}/go", "w").close()
        results = finish(procs)
        assert results[2][0] == 4 and "the health check failed (exit status 1)" in results[2][2], results[2]
        for status, _, err in results[:2]:
            assert status == 0, err
        ran = sorted(f.split(".")[1:] for f in os.listdir(d) if f.startswith("ran."))
        assert [r[0] for r in ran] == ["0", "1"] and all(r[2:] == ["2", "1"] for r in ran), ran
        print(f"{BACKEND}: a node whose --health_check fails between rounds leaves, and the others "
              "restart without it at WORLD_SIZE=2: passed")


def case_a_worker_failure_restarts_every_node():
    with Store() as s:
        d = tempfile.mkdtemp()
        fail = ('if [ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then exit 3; fi; '
                'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')
        procs = [agent(s.endpoint, "2:2", fail, d, str(i), extra=["--max_restarts=1"]) for i in range(2)]
        for status, _, err in finish(procs):
            assert status == 0, err
        # (Rank 0 of the first attempt may finish before rank 1's failure restarts the job.)
        restarted = sorted(f.split(".")[2:] for f in os.listdir(d) if f.endswith(".2.1"))
        assert restarted == [["0", "2", "1"], ["1", "2", "1"]], os.listdir(d)
        procs = [agent(s.endpoint, "2:2", fail, d, str(i), run_id="nobudget") for i in range(2)]
        roots = []
        for status, _, err in finish(procs):
            assert status == 1, err
            roots.append(err[err.index("Root Cause"):])
        assert roots[0] == roots[1] and "exitcode  : 3" in roots[0], roots
        print("a worker failure restarts every node (budget job-wide); without budget both nodes "
              "print the same root cause: passed")


def case_a_signal_ends_the_wait_for_other_nodes():
    with Store() as s:
        d = tempfile.mkdtemp()
        lonely = agent(s.endpoint, "2:2", workload(0), d, "0", conf="join_timeout=600")
        # The agent handles signals once it has logged its first line (the run line).
        first = lonely.stderr.readline()
        assert "run job" in first, first
        lonely.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        status, _, err = finish([lonely], timeout=30)[0]
        took = time.monotonic() - sent
        assert status == 128 + signal.SIGTERM, (status, err)
        assert took < 5, took
        # It left the job: a node joining now waits for a second, it does not form a round with it.
        late = agent(s.endpoint, "2:2", workload(0), d, "1", conf="join_timeout=1")
        status, _, err = finish([late])[0]
        assert status == 3 and "only 1 of at least 2 nodes joined" in err, (status, err)
        assert count(d, "ran.") == 0, os.listdir(d)
        print(f"{BACKEND}: SIGTERM to an agent waiting for other nodes (join_timeout 600 s) ends it "
              f"{took * 1000:.0f} ms later with status 128+15, having left the job: passed")


def case_a_peer_lost_at_the_exit_barrier_re_forms_the_job():
    with Store() as s:
        d = tempfile.mkdtemp()
        os.makedirs(f"{d}/wb")
        # Node a's worker finishes at once; node b's waits until SIGTERMed (or its agent dies).
        # "$$$$": workers' arguments go through torchrun's ${local_rank} macro, where "$$" is "$".
        script = (f'if [ "$1" = b ]; then exec {PY} {PROBE} "$0/wb"; fi; '
                  'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT.$$$$"')
        a = agent(s.endpoint, "2:2", script, d, "a")
        b = agent(s.endpoint, "2:2", script, d, "b")
        wait_for(lambda: count(f"{d}/wb", "ready.") == 1 and count(d, "ran.a.") == 1,
                 "a at the exit barrier, b's worker running")
        b.kill()  # a's exit barrier fails: the round must end, not run again
        finish([b])
        c = agent(s.endpoint, "2:2", script, d, "c")
        for status, _, err in finish([a, c]):
            assert status == 0, err
        ran_a = [f for f in os.listdir(d) if f.startswith("ran.a.")]
        assert len(ran_a) == 2 and count(d, "ran.c.") == 1, os.listdir(d)
        print(f"{BACKEND}: a peer SIGKILLed while this node waits at the exit barrier: the job "
              "re-forms with a newcomer, this node's workers run once more: passed")


def case_a_node_with_other_job_settings_is_refused():
    with Store() as s:
        d = tempfile.mkdtemp()
        restarts = {"a": "1", "b": "2"}
        procs = {k: agent(s.endpoint, "2:2", workload(0), d, k, extra=[f"--max_restarts={v}"])
                 for k, v in restarts.items()}
        # Whichever joins first fixes the job's settings; the other is refused at join.
        wait_for(lambda: any(p.poll() is not None for p in procs.values()), "a refused node")
        refused = next(k for k, p in procs.items() if p.poll() is not None)
        kept = "b" if refused == "a" else "a"
        status, _, err = finish([procs[refused]])[0]
        assert status == 3, (status, err)
        assert (f"this node's --max_restarts={restarts[refused]} differs from the job's "
                f"--max_restarts={restarts[kept]}" in err), err
        # The job goes on with a node that agrees.
        agreeing = agent(s.endpoint, "2:2", workload(0), d, "c",
                         extra=[f"--max_restarts={restarts[kept]}"])
        for status, _, err in finish([procs[kept], agreeing]):
            assert status == 0, err
        ran = sorted(f.split(".")[1] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == sorted([kept, "c"]), ran
        print(f"{BACKEND}: a node with another --max_restarts is refused at join, naming both values; "
              "the job runs with one that agrees: passed")


def case_the_store_restarting_costs_no_restart():
    assert BACKEND == "c10d", "c10d only: a standalone ddprund restarting"
    with Ddprund() as s:
        d = tempfile.mkdtemp()
        # 2 nodes wait in their first round; a third scales the job up, where rank 2 fails once;
        # the restarted round of 3 reports and ends.
        script = (f'if [ "$WORLD_SIZE" = 2 ] || [ "$TORCHELASTIC_RESTART_COUNT$RANK" = 00 ] || '
                  f'[ "$TORCHELASTIC_RESTART_COUNT$RANK" = 01 ]; then '
                  f'mkdir -p "$0/w$1.$WORLD_SIZE"; exec {PY} {PROBE} "$0/w$1.$WORLD_SIZE"; fi; '
                  'if [ "$TORCHELASTIC_RESTART_COUNT$RANK" = 02 ]; then exit 3; fi; '
                  'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')
        logs = [f"{d}/agent{i}.log" for i in range(3)]
        conf = f"last_call_timeout=1,heartbeat_timeout={HEARTBEAT_S}"
        procs = [agent(s.endpoint, "2:3", script, d, str(i), conf=conf, extra=["--max_restarts=1"],
                       stderr=open(logs[i], "w")) for i in range(2)]
        ready = [f"{d}/w{i}.2" for i in range(2)]
        wait_for(lambda: all(os.path.isdir(r) and count(r, "ready.") == 1 for r in ready),
                 "both nodes' workers")
        pids = sorted(open(f"{r}/{os.listdir(r)[0]}").read() for r in ready)
        # Down for less than the heartbeat timeout, then for longer (every node finds it down:
        # connection refused, so nobody is expelled).
        outages = []
        for n, outage_s in ((1, 1.0), (2, HEARTBEAT_S + 1.0)):
            start = time.monotonic()
            s.restart(outage_s)
            wait_for(lambda: all(logged(logs[i], "reconnected to the rendezvous store") == n
                                 for i in range(2)), f"both agents back after restart {n}")
            outages.append(time.monotonic() - start - outage_s)
        # The same workers, never stopped.
        assert sorted(open(f"{r}/{os.listdir(r)[0]}").read() for r in ready) == pids
        assert all(not os.path.exists(f"{r}/got.0") and not os.path.exists(f"{r}/got.1")
                   for r in ready), os.listdir(d)
        for i in range(2):
            assert logged(logs[i], "stopping this node's workers") == 0, open(logs[i]).read()
        # The job goes on: a newcomer scales it up, and a worker failure still restarts every node.
        procs.append(agent(s.endpoint, "2:3", script, d, "2", conf=conf,
                           extra=["--max_restarts=1"], stderr=open(logs[2], "w")))
        for p, log in zip(procs, logs):
            assert p.wait(60) == 0, open(log).read()
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["3", "1"]] * 3, os.listdir(d)
        print(f"ddprund SIGKILLed and restarted twice under a 2-node job (down 1 s, then "
              f"{HEARTBEAT_S + 1} s with a {HEARTBEAT_S} s heartbeat timeout): both agents back "
              f"within {max(outages) * 1000:.0f} ms of its return, no worker restarted; then a "
              "third node scaled the job up and a worker failure restarted all three: passed")


def case_a_store_gone_longer_than_reconnect_timeout_is_a_clear_failure():
    assert BACKEND == "c10d", "c10d only: a standalone ddprund that does not come back"
    with Ddprund() as s:
        d = tempfile.mkdtemp()
        conf = f"last_call_timeout=1,heartbeat_timeout={HEARTBEAT_S},reconnect_timeout=3"
        for i in range(2):
            os.makedirs(f"{d}/w{i}")
        procs = [agent(s.endpoint, "2:2", workload(2), d, str(i), conf=conf) for i in range(2)]
        wait_for(lambda: count(f"{d}/w0", "ready.") + count(f"{d}/w1", "ready.") == 2,
                 "both nodes' workers")
        s.proc.kill()
        gone = time.monotonic()
        for status, _, err in finish(procs):
            assert status == 3, (status, err)
            assert "could not reconnect within 3 s (rdzv_conf reconnect_timeout)" in err, err
            assert "is down (connection refused) for every node" in err, err
        took = time.monotonic() - gone
        # Both workers were stopped.
        assert count(f"{d}/w0", "got.") + count(f"{d}/w1", "got.") == 2, os.listdir(d)
        assert 3 <= took < 10, took
        print(f"ddprund gone for good: both agents stopped their workers and exited 3 {took:.1f} s "
              "later (reconnect_timeout=3), saying why: passed")


def paused_node(nnodes, n):
    """n agents of a --nnodes=`nnodes` job; one is SIGSTOPped for longer than the heartbeat timeout
    while the others go on, then woken."""
    with Store() as s:
        d = tempfile.mkdtemp()
        # Until "go" exists, workers wait (in a folder per node and world size); then they report.
        script = (f'if [ ! -e "$0/go" ]; then mkdir -p "$0/w$1.$WORLD_SIZE"; '
                  f'exec {PY} {PROBE} "$0/w$1.$WORLD_SIZE"; fi; '
                  'date +%s%N > "$0/ran.$1.$RANK.$WORLD_SIZE.$TORCHELASTIC_RESTART_COUNT"')
        conf = f"last_call_timeout=1,heartbeat_timeout={HEARTBEAT_S}"
        logs = [f"{d}/agent{i}.log" for i in range(n)]
        procs = [agent(s.endpoint, nnodes, script, d, str(i), conf=conf, stderr=open(logs[i], "w"))
                 for i in range(n)]
        first = [f"{d}/w{i}.{n}" for i in range(n)]
        wait_for(lambda: all(os.path.isdir(f) and count(f, "ready.") == 1 for f in first),
                 f"{n} workers")
        paused = n - 1
        stale = int(open(f"{first[paused]}/{os.listdir(first[paused])[0]}").read())
        procs[paused].send_signal(signal.SIGSTOP)
        # The others go on without it: with n - 1 nodes, or (N:N) they stop and wait for a node.
        if n > 2:
            wait_for(lambda: all(os.path.isdir(f"{d}/w{i}.{n - 1}") and
                                 count(f"{d}/w{i}.{n - 1}", "ready.") == 1 for i in range(n - 1)),
                     "the others re-formed without the paused node", 30)
        else:
            wait_for(lambda: count(first[0], "got.") == 1, "the other node's workers stopped", 30)
        assert os.path.exists(f"/proc/{stale}"), "the paused node's worker runs on, stale"
        open(f"{d}/go", "w").close()
        procs[paused].send_signal(signal.SIGCONT)
        woke = time.monotonic()
        stopped = wait_for(lambda: count(first[paused], "got.") == 1, "the stale worker stopped", 30)
        for p, log in zip(procs, logs):
            assert p.wait(60) == 0, open(log).read()
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [[str(n), "0"]] * n, os.listdir(d)  # all back in one round, no restart spent
        log = open(logs[paused]).read()
        assert "stopping this node's workers: this node was expelled from the job" in log, log
        assert "another node's workers failed" not in log, log
        return stopped - woke


def case_a_paused_node_stops_its_stale_workers_and_rejoins():
    took = paused_node("2:3", 3)
    print(f"{BACKEND}: one of 3 agents (2:3) SIGSTOPped past the heartbeat timeout: the others "
          f"re-form; woken, it stops its stale workers {took * 1000:.0f} ms later, says it was "
          "expelled, and rejoins: the job scales back to 3: passed")


def case_a_paused_node_of_a_fixed_size_job_rejoins_it():
    took = paused_node("2:2", 2)
    print(f"{BACKEND}: one of 2 agents (2:2) SIGSTOPped past the heartbeat timeout: the other waits; "
          f"woken, it stops its stale workers {took * 1000:.0f} ms later and rejoins; the job "
          "finishes with both: passed")


def case_a_single_node_meets_on_the_store_its_command_line_names():
    """--nnodes=1 with --rdzv_endpoint: the node joins the job's store there (the standalone
    ddprund, or etcd), as torchrun's single node does, rather than host one of its own on that
    port: `ddprun status` at the endpoint sees it."""
    with Store() as s:
        d = tempfile.mkdtemp()
        # Waits (bounded) for "go", then says where it ran.
        script = ('i=0; while [ ! -e "$0/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); '
                  'done; echo "$RANK/$WORLD_SIZE" > "$0/ran"')
        p = agent(s.endpoint, "1", script, d, run_id="alone")
        try:
            def seen():
                r = subprocess.run([DDPRUN, "status", f"--rdzv_backend={BACKEND}",
                                    f"--rdzv_endpoint={s.endpoint}", "--rdzv_id=alone"],
                                   capture_output=True, text=True, timeout=60)
                return "world size 1" in r.stdout and "--nnodes=1:1" in r.stdout
            wait_for(seen, "the single node in ddprun status at the endpoint", 60)
        finally:
            open(f"{d}/go", "w").close()
        status, _, err = finish([p])[0]
        assert status == 0, err
        assert open(f"{d}/ran").read().strip() == "0/1"
        assert "Address already in use" not in err, err
    print(f"{BACKEND}: a single node (--nnodes=1) with --rdzv_endpoint met on the store there and "
          "ran its worker; ddprun status at the endpoint saw it: passed")


def case_an_agent_hosts_the_store_when_none_runs():
    assert BACKEND == "c10d", "c10d only: etcd is never hosted by an agent"
    endpoint = f"127.0.0.1:{free_port()}"
    d = tempfile.mkdtemp()
    procs = [agent(endpoint, "2:2", workload(0), d, str(i)) for i in range(2)]
    results = finish(procs)
    for status, _, err in results:
        assert status == 0, err
    assert sum("(hosted here)" in err for _, _, err in results) == 1, [r[2] for r in results]
    print("with no ddprund at the endpoint, the first agent there hosts the store: passed")


class Proxy:
    """A TCP proxy on loopback in front of a store, as in a cluster where the store's address is a
    proxy's: until a backend is given it accepts each connection and closes it (.ended counts them),
    as a proxy does whose backend is not up yet; then it relays."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.backend = None
        self.ended = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.backend is None:
                self.ended += 1
                client.close()
                continue
            upstream = socket.create_connection(self.backend)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def case_agents_join_through_a_proxy_once_the_store_behind_it_is_up():
    assert BACKEND == "c10d", "c10d only: a ddprund behind a TCP proxy"
    proxy = Proxy()
    d = tempfile.mkdtemp()
    procs = [agent(proxy.endpoint, "2:2", workload(0), d, str(i), conf="is_host=false,join_timeout=60")
             for i in range(2)]
    wait_for(lambda: proxy.ended >= 4 or any(p.poll() is not None for p in procs),
             "the proxy to end connections of both agents")
    gave_up = [p.communicate()[1] for p in procs if p.poll() is not None]
    assert not gave_up, f"an agent gave up on a connection the proxy ended: {gave_up}"
    with Ddprund() as s:
        proxy.backend = ("127.0.0.1", s.port)
        for status, _, err in finish(procs):
            assert status == 0, err
    ran = sorted(f.split(".")[2:4] for f in os.listdir(d) if f.startswith("ran."))
    assert ran == [["0", "2"], ["1", "2"]], ran
    print(f"2 agents whose store's proxy ended {proxy.ended} connections before the store was up "
          "kept trying and ran the job once it was: passed")


def case_two_jobs_on_one_store_stay_apart():
    with Store() as s:
        d = tempfile.mkdtemp()
        procs = [agent(s.endpoint, "2:2", workload(0), d, f"{job}{i}", run_id=job)
                 for job in ("a", "b") for i in range(2)]
        for status, _, err in finish(procs):
            assert status == 0, err
        ran = sorted(f.split(".")[2:4] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["0", "2"], ["0", "2"], ["1", "2"], ["1", "2"]], ran
        print("two jobs with different --rdzv_id on one ddprund stay apart (each WORLD_SIZE=2): passed")


def case_a_late_joiner_is_told_the_job_ended():
    with Store() as s:
        d = tempfile.mkdtemp()
        for status, _, err in finish([agent(s.endpoint, "2:2", workload(0), d, str(i)) for i in range(2)]):
            assert status == 0, err
        status, _, err = finish([agent(s.endpoint, "2:2", workload(0), d, "late")])[0]
        assert status == 3 and "has already ended (succeeded)" in err, (status, err)
        print("an agent joining a finished job exits with a clear message: passed")


if __name__ == "__main__":
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    BACKEND = sys.argv[4] if len(sys.argv) > 4 else "c10d"
    if BACKEND == "etcd" and not have_etcd():
        print("etcd-server, etcd-client or openssl not installed")
        sys.exit(77)
    globals()["case_" + sys.argv[3]]()
