"""Operating a job: `ddprun status` on a live job (c10d, static, etcd), the agent's --event_log, and
the Prometheus metrics of ddprund (--metrics-port) and of an agent (--metrics_port). Real processes
on loopback.

    operations_test.py DDPRUN DDPRUND CASE     (CASE: one of the functions named case_*)
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from agents import Processes, agent_command
from etcd_cluster import EtcdCluster, have_etcd
from proc_util import free_port, listening_address, wait_for
from job_logs import events, metrics

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
PROCS = Processes()  # killed at the end whatever happened

# Every worker waits for "$0/go" (or "$0/fail.$RANK", then exits 3), so the test decides when the
# round ends.
HOLD = ('while [ ! -e "$0/go" ]; do if [ -e "$0/fail.$RANK" ]; then rm -f "$0/fail.$RANK"; '
        'exit 3; fi; sleep 0.05; done')


def agent(backend, endpoint, run_id, work, extra=(), nnodes="2", log=None):
    return PROCS.start(agent_command(DDPRUN, nnodes=nnodes, nproc=2, endpoint=endpoint,
                                     run_id=run_id, backend=backend,
                                     conf="last_call_timeout=1,heartbeat_timeout=2",
                                     extra=["--max_restarts=1", *extra],
                                     command=["--no_python", "/bin/sh", "-c", HOLD, work]),
                       log=log)


def status(backend, endpoint, run_id, *extra):
    r = subprocess.run([DDPRUN, "status", f"--rdzv_backend={backend}",
                        f"--rdzv_endpoint={endpoint}", f"--rdzv_id={run_id}", *extra],
                       capture_output=True, text=True, timeout=60)
    return r


def status_json(backend, endpoint, run_id):
    r = status(backend, endpoint, run_id, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def world_size(backend, endpoint, run_id):
    """The job's world size, or 0 while the store has no such job yet."""
    r = status(backend, endpoint, run_id, "--json")
    return json.loads(r.stdout)["world_size"] if r.stdout else 0


def running(work, n):
    return lambda: len([f for f in os.listdir(work) if f.startswith("pid.")]) >= n


def check_live_status(backend, endpoint, run_id, work, agents, store_outlives_job=True):
    """A 2-node job of 2 workers each: its status while running, after a failure, and at the end."""
    wait_for(lambda: world_size(backend, endpoint, run_id) == 4, "round 0 formed")
    s = status_json(backend, endpoint, run_id)
    assert s["found"] and s["round"] == 0 and s["world_size"] == 4, s
    assert s["restarts"] == 0 and s["max_restarts"] == 1 and not s["closed"], s
    assert [n["node_rank"] for n in s["nodes"]] == [0, 1], s
    assert [n["ranks"] for n in s["nodes"]] == [[0, 1], [2, 3]], s
    assert all(n["host"] == socket.gethostname() and n["nproc"] == 2 for n in s["nodes"]), s
    assert all(n["since_ms"] and abs(n["since_ms"] / 1000 - time.time()) < 300 for n in s["nodes"])
    assert s["last_failure"] is None and s["spares"] == [], s
    if backend != "static":  # the elastic rounds' leader is one of the two agents
        assert s["leader"]["host"] == socket.gethostname(), s
        assert s["leader"]["id"] in [n["id"] for n in s["nodes"]], s
    table = status(backend, endpoint, run_id)
    assert table.returncode == 0 and "round 0" in table.stdout, table
    assert "restarts 0 of 1" in table.stdout and "2-3" in table.stdout, table.stdout

    # A failure: the job restarts (1 of 1), and status names the root cause.
    open(os.path.join(work, "fail.3"), "w").close()
    wait_for(lambda: status_json(backend, endpoint, run_id)["restarts"] == 1, "the restart", 60)
    wait_for(lambda: status_json(backend, endpoint, run_id)["world_size"] == 4, "round 1", 60)
    s = status_json(backend, endpoint, run_id)
    f = s["last_failure"]
    assert f and f["rank"] == 3 and f["local_rank"] == 1 and f["exitcode"] == 3, s
    assert "last failure: rank 3" in status(backend, endpoint, run_id).stdout
    # The second failure spends the budget: the job closes as failed.
    open(os.path.join(work, "fail.2"), "w").close()
    for a in agents:
        assert a.wait(60) == 1
    if not store_outlives_job:  # static: the store was node 0's agent's, gone with it
        gone = status(backend, endpoint, run_id, "--rdzv_conf=join_timeout=1")
        assert gone.returncode == 3 and "cannot read the job's store" in gone.stderr, gone
        return
    s = status_json(backend, endpoint, run_id)
    assert s["closed"] and s["closed_reason"] == "failed" and s["restarts"] == 1, s
    assert s["last_failure"]["rank"] == 2, s
    missing = status(backend, endpoint, run_id + "-nope", "--json")
    assert missing.returncode == 3 and "no job" in missing.stderr, missing
    assert json.loads(missing.stdout)["found"] is False


def case_status_of_a_live_job_on_every_backend():
    # c10d, on ddprund.
    _, port, _ = PROCS.ddprund(DDPRUND)
    work = tempfile.mkdtemp()
    ep = f"127.0.0.1:{port}"
    agents = [agent("c10d", ep, "st", work) for _ in range(2)]
    check_live_status("c10d", ep, "st", work, agents)
    # static: node 0's agent holds the store.
    work = tempfile.mkdtemp()
    port = free_port()
    agents = [PROCS.start([DDPRUN, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=2",
                     f"--master_port={port}", "--max_restarts=1", "--no_python", "/bin/sh", "-c",
                     HOLD, work], log=tempfile.mktemp()) for r in (0, 1)]
    check_live_status("static", f"127.0.0.1:{port}", "none", work, agents,
                      store_outlives_job=False)
    backends = "c10d, static"
    if have_etcd():
        with EtcdCluster(members=1) as etcd:
            work = tempfile.mkdtemp()
            ep = etcd.endpoints()
            agents = [agent("etcd-v3", ep, "st", work) for _ in range(2)]
            check_live_status("etcd-v3", ep, "st", work, agents)
            backends += ", etcd"
    unreachable = status("c10d", f"127.0.0.1:{free_port()}", "x", "--rdzv_conf=join_timeout=1")
    assert unreachable.returncode == 3 and "cannot read" in unreachable.stderr, unreachable
    print(f"ddprun status of a live 2-node job, after a restart and at its end ({backends}): "
          "passed")


def events_of(path):
    """The log's events (job_logs.events), which are in the order of their times."""
    every = events(path)
    times = [e["time_ms"] for e in every]
    assert times == sorted(times), "events out of order"
    return every


def case_event_log_records_a_restart_and_a_node_loss():
    _, port, _ = PROCS.ddprund(DDPRUND)
    ep = f"127.0.0.1:{port}"
    work = tempfile.mkdtemp()
    logs = [tempfile.mktemp(suffix=".events") for _ in range(2)]
    agents = [agent("c10d", ep, "ev", work, nnodes="1:2", extra=[f"--event_log={logs[i]}"])
              for i in range(2)]
    wait_for(running(work, 0), "start")
    wait_for(lambda: world_size("c10d", ep, "ev") == 4, "round 0")
    open(os.path.join(work, "fail.1"), "w").close()  # a worker failure: restart 1 of 1
    wait_for(lambda: status_json("c10d", ep, "ev")["restarts"] == 1, "the restart", 60)
    wait_for(lambda: sum(e["event"] == "workers_started" for e in events_of(logs[0])) == 2,
             "the restarted workers")
    victim = agents[1]
    victim.kill()  # a node lost: the other re-forms alone (elastic 1:2)
    wait_for(lambda: any(e["event"] == "round_formed" and e["num_nodes"] == 1
                         for e in events_of(logs[0])), "the re-formed round", 60)
    open(os.path.join(work, "go"), "w").close()
    assert agents[0].wait(60) == 0
    ev = events_of(logs[0])
    names = [e["event"] for e in ev]
    assert names[0] == "agent_started" and names[-1] == "job_end", names
    assert ev[-1]["state"] == "succeeded"
    assert all(e["node"] == socket.gethostname() and e["run_id"] == "ev" for e in ev)
    joined = [e for e in ev if e["event"] == "node_joined"]
    assert len(joined) >= 2 and all(e["host"] and e["nproc"] == 2 for e in joined), joined
    assert any(e["event"] == "node_left" for e in ev), names
    rounds = [e for e in ev if e["event"] == "round_formed"]
    assert rounds[0]["world_size"] == 4 and len(rounds[0]["members"]) == 2, rounds
    assert rounds[-1]["world_size"] == 2 and rounds[-1]["members"] == [joined[0]["node_id"]] or \
        len(rounds[-1]["members"]) == 1, rounds
    failed = [e for e in ev if e["event"] == "worker_exited" and not e["stopped_by_ddprun"]
              and e.get("exitcode") != 0]
    all_failed = failed + [e for e in events_of(logs[1]) if e["event"] == "worker_exited"
                           and not e["stopped_by_ddprun"] and e.get("exitcode") != 0]
    assert any(e["rank"] == 1 and e["exitcode"] == 3 for e in all_failed), all_failed
    assert any(e["event"] == "restart" and e["restart_count"] == 1 for e in ev), names
    assert any(e["event"] == "workers_interrupted" for e in ev), names
    started = [e for e in ev if e["event"] == "workers_started"]
    assert all(len(e["workers"]) == 2 and all(w["pid"] > 0 for w in e["workers"])
               for e in started), started
    assert any(e["event"] == "exit_barrier" and e["passed"] for e in ev), names
    # The killed agent's log ends where it died: every line it wrote is whole.
    assert events_of(logs[1])[-1]["event"] != "job_end"
    print(f"event log: {len(ev)} events across a restart and a node loss, each a whole JSON line: "
          "passed")


def metrics_port(log):
    """The port of the metrics line in `log`, after checking that it listens on loopback only."""
    m = None
    def found():
        nonlocal m
        with open(log) as f:
            m = re.search(r"metrics at http://([^ ]+):(\d+)/metrics", f.read())
        return m is not None
    wait_for(found, f"the metrics line in {log}")
    port = int(m.group(2))
    assert m.group(1) == "127.0.0.1", m.group(0)
    assert listening_address(port) == f"127.0.0.1:{port}", listening_address(port)
    return port


def case_metrics_are_scraped_while_a_job_runs():
    _, port, dlog = PROCS.ddprund(DDPRUND, "--metrics-port", "0")
    ep = f"127.0.0.1:{port}"
    work = tempfile.mkdtemp()
    alog = tempfile.mktemp()
    agents = [agent("c10d", ep, "mx", work, extra=["--metrics_port=0"], log=alog),
              agent("c10d", ep, "mx", work)]
    dport, aport = metrics_port(dlog), metrics_port(alog)
    wait_for(lambda: metrics(aport).get('ddprun_workers{state="running"}') == 2, "running workers")
    d = metrics(dport)
    # Owned: the 2 agents' presence keys and the rendezvous leader's claim.
    assert d["ddprund_connections"] >= 2 and d["ddprund_owned_keys"] == 3, d
    assert d["ddprund_keys"] >= 5 and d["ddprund_value_bytes"] > 0, d
    assert d['ddprund_requests_total{op="compare_set"}'] > 0, d
    assert d["ddprund_connections_refused_total"] == 0, d
    a = metrics(aport)
    assert a["ddprun_world_size"] == 4 and a["ddprun_num_nodes"] == 2, a
    assert a["ddprun_round"] == 0 and a["ddprun_restarts"] == 0 and a["ddprun_max_restarts"] == 1
    assert a["ddprun_nodes_present"] == 2, a
    # A scraper that never finishes its request, garbage, a wrong path and a wrong method cost only
    # themselves: the next scrape is answered at once.
    stalled = socket.create_connection(("127.0.0.1", dport))
    stalled.sendall(b"GET /metr")
    garbage = socket.create_connection(("127.0.0.1", dport))
    garbage.sendall(os.urandom(4096))
    for path, code in (("/", 404), ("/metrics", 200)):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{dport}{path}", timeout=5)
            got = 200
        except urllib.error.HTTPError as e:
            got = e.code
        assert got == code, (path, got)
    post = urllib.request.Request(f"http://127.0.0.1:{dport}/metrics", data=b"x", method="POST")
    try:
        urllib.request.urlopen(post, timeout=5)
        raise AssertionError("POST answered")
    except urllib.error.HTTPError as e:
        assert e.code == 405
    t0 = time.monotonic()
    metrics(dport)
    assert time.monotonic() - t0 < 1, "a stalled scraper held the server up"
    # The agent's view follows the job: a failure of one of its own workers (which node rank the
    # metered agent got is the rendezvous's choice) and its restart.
    open(os.path.join(work, f"fail.{2 * int(a['ddprun_node_rank'])}"), "w").close()
    wait_for(lambda: metrics(aport).get("ddprun_restarts") == 1 and
             metrics(aport).get('ddprun_workers{state="running"}') == 2, "the restart seen", 60)
    assert metrics(aport)['ddprun_worker_exits_total{state="failed"}'] == 1
    open(os.path.join(work, "go"), "w").close()
    for a in agents:
        assert a.wait(60) == 0
    stalled.close()
    garbage.close()
    print("metrics of ddprund and of an agent scraped while a job ran and restarted: passed")


def main():
    global DDPRUN, DDPRUND
    DDPRUN, DDPRUND = map(os.path.abspath, sys.argv[1:3])
    with PROCS:
        globals()["case_" + sys.argv[3]]()


if __name__ == "__main__":
    main()
