"""What only the etcd backend has: a job riding out the loss of etcd members, all of them for a
while, or not; TLS; and etcd that cannot serve the job (not etcd, auth on, the wrong CA), on a real
etcd cluster (Debian's etcd-server) on loopback, started and stopped by the test. The elastic
behaviour shared with c10d runs against both backends in elastic_test.py.

    etcd_test.py DDPRUN CASE     (CASE: one of the functions named case_*; exits 77 without etcd)
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from agents import agent_command
from elastic_test import count, workload  # the elastic cases' workers
from etcd_cluster import EtcdCluster, changes, have_etcd, make_certificates
from proc_util import alive, finish, free_port, wait_for
from relay import Relay

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None


def agent(cluster, nnodes, script, *args, conf="last_call_timeout=1,heartbeat_timeout=3",
          order=None, endpoint=None):
    """An agent of job "job" on `cluster` (its members in `order`, or at `endpoint`)."""
    return subprocess.Popen(
        agent_command(DDPRUN, nnodes=nnodes, nproc=1, endpoint=endpoint or cluster.endpoints(order),
                      run_id="job", backend="etcd", conf=conf,
                      command=["--no_python", "/bin/sh", "-c", script, *args]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def job_of_two_waiting_workers(cluster, d, conf, order=None):
    """Two agents whose workers wait (signal_probe) until SIGTERMed; returns the agents."""
    procs = []
    for i in range(2):
        os.makedirs(f"{d}/w{i}")
        procs.append(agent(cluster, "2:2", workload(2), d, str(i), conf=conf, order=order))
    try:
        wait_for(lambda: count(f"{d}/w0", "ready.") + count(f"{d}/w1", "ready.") == 2, "2 workers",
                 timeout=60)
    except AssertionError:
        for p in procs:
            p.kill()
        raise AssertionError("no 2 workers: " + " | ".join(p.communicate()[1] for p in procs))
    return procs


def worker_pids(d):
    pids = []
    for i in range(2):
        ready = next(f for f in os.listdir(f"{d}/w{i}") if f.startswith("ready."))
        pids.append(int(open(f"{d}/w{i}/{ready}").read()))
    return pids


def finish_without_restart(procs, d):
    for pid in worker_pids(d):
        os.kill(pid, signal.SIGTERM)
    results = finish(procs)
    said = "\n--- the next agent:\n".join(err for _, _, err in results)  # (every node's view)
    for status, _, err in results:
        assert status == 0, said
        assert "stopping this node's workers" not in err and "restarting" not in err, said
        assert "has not brought the job's changes" not in err, said  # no watch found behind
    assert count(d, "ran.") == 0, os.listdir(d)  # no second round ran


def lose_one_member(which):
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        # A heartbeat timeout close to an election's length (etcd's defaults: 1 s to notice, then a
        # vote): the agents must not take an election for a lost lease.
        procs = job_of_two_waiting_workers(cluster, d, "last_call_timeout=1,heartbeat_timeout=3")
        leader = cluster.leader()
        victim = leader if which == "leader" else next(n for n in cluster.names if n != leader)
        cluster.kill(victim)
        # Longer than the heartbeat timeout: the leases must have been kept alive elsewhere.
        time.sleep(4.5)
        finish_without_restart(procs, d)
        print(f"the etcd {which} ({victim}) SIGKILLed under a running job: no restart, exit 0: passed")


def case_losing_the_leader_costs_no_restart():
    lose_one_member("leader")


def case_losing_a_follower_costs_no_restart():
    lose_one_member("follower")


def has_leader(cluster):
    try:
        return cluster.leader() is not None
    except AssertionError:
        return False


def case_an_election_longer_than_the_heartbeat_timeout_costs_no_restart():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        # (A heartbeat of 5 s: after the election a node has its lease's TTL to get a renewal
        # through a member that may still be catching up; 3 s failed once beside a whole suite.)
        procs = job_of_two_waiting_workers(cluster, d, "last_call_timeout=1,heartbeat_timeout=5")
        leader = cluster.leader()
        stopped = next(n for n in cluster.names if n != leader)
        # The leader gone and one follower frozen: the last member cannot win a vote, so the
        # cluster has no leader for twice the heartbeat timeout, and no lease can run out.
        cluster.procs[stopped].send_signal(signal.SIGSTOP)
        cluster.kill(leader)
        time.sleep(10)
        cluster.procs[stopped].send_signal(signal.SIGCONT)
        wait_for(lambda: has_leader(cluster), "a new etcd leader", timeout=30)
        for p in procs:
            assert p.poll() is None, p.communicate()[1]
        finish_without_restart(procs, d)
        print("the etcd leader SIGKILLed and a follower SIGSTOPped for 10 s (heartbeat 5 s): "
              "no restart, exit 0: passed")


def case_a_stalled_member_holding_the_watch_is_left_behind():
    with EtcdCluster() as cluster:
        stalled, order = follower_under_every_watch(cluster)
        d = tempfile.mkdtemp()
        procs = []
        for i in range(3):
            os.makedirs(f"{d}/w{i}")
            procs.append(agent(cluster, "2:3", workload(3), d, str(i), order=order,
                               conf="last_call_timeout=1,heartbeat_timeout=2"))
        wait_for(lambda: sum(count(f"{d}/w{i}", "ready.") for i in range(3)) == 3, "3 workers")
        # SIGSTOP: the member's sockets stay open and silent, its watches deliver nothing more.
        cluster.procs[stalled].send_signal(signal.SIGSTOP)
        procs[2].kill()
        killed = time.monotonic()
        took = wait_for(lambda: count(d, "ran.") == 2, "the survivors re-formed", timeout=20) - killed
        for status, _, err in finish(procs[:2]):
            assert status == 0, err
            assert "moving this node's watch off it" in err, err
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["2", "0"], ["2", "0"]], ran
        print(f"an etcd member SIGSTOPped under every agent's watch, then an agent SIGKILLed: the "
              f"survivors moved their watches and re-formed {took:.1f} s later (heartbeat 2 s): passed")


def case_a_watch_gone_silent_on_a_member_that_still_serves_is_moved():
    with EtcdCluster() as cluster:
        relays = [Relay(port) for port in cluster.client]
        endpoint = ",".join(f"127.0.0.1:{r.port}" for r in relays)
        d = tempfile.mkdtemp()
        procs = []
        try:
            for i in range(3):
                os.makedirs(f"{d}/w{i}")
                procs.append(agent(cluster, "2:3", workload(3), d, str(i), endpoint=endpoint,
                                   conf="last_call_timeout=1,heartbeat_timeout=2"))
            wait_for(lambda: sum(count(f"{d}/w{i}", "ready.") for i in range(3)) == 3, "3 workers")
            # Every agent's watch stays open and brings nothing more, while its member goes on
            # answering renewals and requests on other connections.
            silenced = sum(r.silence(b"POST /v3/watch") for r in relays)
            assert silenced == 3, silenced
            procs[2].kill()
            killed = time.monotonic()
            # Nobody writes before the survivors learn that the third node left: they can only
            # learn it by finding their watches behind.
            try:
                took = wait_for(lambda: count(d, "ran.") == 2, "the survivors re-formed",
                                timeout=30) - killed
            except AssertionError:
                for p in procs:
                    p.kill()
                raise AssertionError("the survivors did not re-form: " + " | ".join(
                    p.communicate()[1][-3000:] for p in procs[:2]))
            for status, _, err in finish(procs[:2]):
                assert status == 0, err
                assert "has not brought the job's changes through this node's watch" in err, err
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for r in relays:
                r.close()
        ran = sorted(f.split(".")[3:] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["2", "0"], ["2", "0"]], ran
        assert took < 15, took
        print(f"every agent's watch silenced (its member still serving), then an agent SIGKILLed: "
              f"the survivors found their watches behind, moved them and re-formed {took:.1f} s "
              "later (heartbeat 2 s): passed")


def case_another_jobs_changes_on_the_same_etcd_move_no_watch():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        # Every renewal finds the members' revision ahead of the job's keys: the other job's.
        procs = job_of_two_waiting_workers(cluster, d, "last_call_timeout=1,heartbeat_timeout=2")
        ends = time.monotonic() + 8  # four heartbeats: a range backs off, then another
        puts = 0
        while time.monotonic() < ends:
            cluster.etcdctl("put", f"/ddprun/other-job/beat{puts % 5}", str(puts))
            puts += 1
        finish_without_restart(procs, d)
        print(f"another job wrote {puts} times on the same etcd while a job of two ran: no watch "
              "was found behind, no restart, exit 0: passed")


def live_worker(d, i):
    for f in os.listdir(f"{d}/w{i}"):
        pid = int(open(f"{d}/w{i}/{f}").read()) if f.startswith("ready.") else 0
        if pid and alive(pid):
            return pid
    return None


def follower_under_every_watch(cluster):
    """A follower, and an endpoint order that puts every agent's watch on it (agents open their
    watch on the second endpoint they are given)."""
    leader = cluster.leader()
    follower = next(n for n in cluster.names if n != leader)
    return follower, [leader, follower] + [n for n in cluster.names if n not in (leader, follower)]


def case_a_node_paused_past_its_lease_rejoins_past_a_silent_member():
    with EtcdCluster() as cluster:
        silent, order = follower_under_every_watch(cluster)
        d = tempfile.mkdtemp()
        procs = job_of_two_waiting_workers(cluster, d, "last_call_timeout=1,heartbeat_timeout=2",
                                           order=order)
        stale = live_worker(d, 0)
        procs[0].send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        wait_for(lambda: len(cluster.etcdctl("get", "--prefix", "--keys-only",
                                             "/ddprun/job/nodes/").stdout.split()) == 1,
                 "the paused node's presence gone", timeout=20)
        cluster.procs[silent].send_signal(signal.SIGSTOP)
        # Past twice the heartbeat: the lease is long gone, whatever grace an agent gives itself.
        time.sleep(max(0.0, 4.5 - (time.monotonic() - paused)))
        procs[0].send_signal(signal.SIGCONT)
        woke = time.monotonic()
        try:
            gone = wait_for(lambda: not alive(stale), "the woken node's stale worker stopped",
                            timeout=10) - woke
            wait_for(lambda: live_worker(d, 0) not in (None, stale) and live_worker(d, 1),
                     "both nodes' workers of the re-formed round", timeout=30)
        finally:
            cluster.procs[silent].send_signal(signal.SIGCONT)
        for i in range(2):
            os.kill(live_worker(d, i), signal.SIGTERM)
        results = finish(procs)
        for status, _, err in results:
            assert status == 0, err
        assert "rejoins the job as a new node" in results[0][2], results[0][2]
        for _, _, err in results:  # the rejoin's change to the keys is not a watch left behind
            assert "has not brought the job's changes" not in err, err
        assert gone < 1.0, gone
        print(f"an agent paused past its lease woke with the member under its watch silent: its "
              f"stale worker stopped {gone * 1000:.0f} ms after it woke, it rejoined through another "
              "member, and the job finished: passed")


def fresh_worker(d, i, before):
    """Agent i's live worker if it is not `before` (a worker of a later round), else None."""
    pid = live_worker(d, i)
    return pid if pid not in (None, before) else None


def case_a_leader_paused_past_its_lease_writes_nothing_as_leader_when_it_wakes():
    """The leader SIGSTOPped past its lease, and the etcd member under its watch with it (so that
    its socket holds none of what happened meanwhile): another node leads and re-forms the job
    without it. Woken, it believes it leads until its watch, moved, says otherwise, and the store
    refuses what it writes as the leader meanwhile. (It used to rewrite, from its stale view, the
    end of the round it last knew and the survivors' placements in it: a placement landing after
    the next round's left a node waiting for a round that never reached it, for the whole join
    timeout.)"""
    with EtcdCluster() as cluster:
        silent, order = follower_under_every_watch(cluster)  # the paused leader's watch on it
        others = [order[0], order[2], order[1]]  # the other agents' watches elsewhere
        d = tempfile.mkdtemp()
        conf = "last_call_timeout=1,heartbeat_timeout=2"
        hold = f'exec {PY} {PROBE} "$0/w$1"'  # every round's workers wait for SIGTERM
        procs = []
        history = cluster.history("/ddprun/job/", order[0])  # (not through the member paused)
        try:
            for i in range(3):
                os.makedirs(f"{d}/w{i}")
                procs.append(agent(cluster, "2:3", hold, d, str(i), conf=conf,
                                   order=order if i == 0 else others))
                if i == 0:  # the first to join leads
                    wait_for(lambda: cluster.etcdctl("get", "/ddprun/job/leader").stdout.strip(),
                             "the first agent leading", timeout=30)
            leader = cluster.etcdctl("get", "/ddprun/job/leader",
                                     "--print-value-only").stdout.strip()
            assert f"_{procs[0].pid}_" in leader, (leader, procs[0].pid)
            wait_for(lambda: all(live_worker(d, i) for i in range(3)), "a round of three",
                     timeout=60)
            first = [live_worker(d, i) for i in range(3)]
            procs[0].send_signal(signal.SIGSTOP)
            paused = time.monotonic()
            cluster.procs[silent].send_signal(signal.SIGSTOP)
            wait_for(lambda: fresh_worker(d, 1, first[1]) and fresh_worker(d, 2, first[2]),
                     "the round of two without the paused leader", timeout=30)
            second = [first[0], live_worker(d, 1), live_worker(d, 2)]
            time.sleep(max(0.0, 4.5 - (time.monotonic() - paused)))  # past twice its lease
            procs[0].send_signal(signal.SIGCONT)
            wait_for(lambda: all(fresh_worker(d, i, second[i]) for i in range(3)),
                     "the round of three with the woken node", timeout=30)
        finally:
            cluster.procs[silent].send_signal(signal.SIGCONT)
            for p in procs:
                p.send_signal(signal.SIGCONT)
            for i in range(3):
                pid = live_worker(d, i) if os.path.isdir(f"{d}/w{i}") else None
                if pid:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            try:
                results = finish(procs, timeout=60)
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                history.terminate()
                made = changes(history.communicate()[0])
        said = "\n--- the next agent:\n".join(err for _, _, err in results)
        for status, _, _ in results:
            assert status == 0, said
        # What a deposed leader wrote would rewrite a key with the value it already had (the
        # round's end for the same reason, a placement in the same round), or take a placement
        # back to an older round. The leaders' own writes do neither.
        last = {}
        for revision, key, value in made:
            name = key[len("/ddprun/job/"):]
            before = last.get(name)
            last[name] = value
            if value is None or not (name == "interrupt" or name.startswith("place/")):
                continue
            assert value != before, (revision, name, value, made)
            if name != "interrupt" and before is not None:
                assert json.loads(value)["round"] >= json.loads(before)["round"], \
                    (revision, name, value, made)
        refused = "no longer holds the job's leadership" in results[0][2]
        print(f"a leader paused 4.5 s (its lease 2 s) with the member under its watch: the others "
              f"re-formed without it; woken, "
              f"{'its writes as the leader were refused' if refused else 'it wrote nothing as the leader'}; "
              f"no key of the {len(made)} changes went back or was written again; the job of three "
              "ran again and finished: passed")


def case_all_members_down_for_less_than_the_heartbeat_costs_no_restart():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        procs = job_of_two_waiting_workers(cluster, d, "last_call_timeout=1,heartbeat_timeout=10")
        down = time.monotonic()
        for n in cluster.names:
            cluster.kill(n)
        time.sleep(4)  # the outage: longer than a keep-alive interval (10/3 s), shorter than 10 s
        for n in cluster.names:
            cluster.start(n)
        back = wait_for(cluster.healthy, "the restarted etcd cluster") - down
        assert back < 8, f"etcd took {back:.1f} s to come back: too close to the 10 s heartbeat"
        # Past the heartbeat timeout since the outage began: a lease not renewed since would be gone.
        time.sleep(max(0.0, 11 - (time.monotonic() - down)))
        finish_without_restart(procs, d)
        print(f"every etcd member SIGKILLed and restarted ({back:.1f} s without etcd, heartbeat 10 s): "
              "no restart, exit 0: passed")


def case_all_members_down_for_longer_than_the_reconnect_timeout_stops_the_workers():
    with EtcdCluster() as cluster:
        d = tempfile.mkdtemp()
        procs = job_of_two_waiting_workers(
            cluster, d, "last_call_timeout=1,heartbeat_timeout=3,reconnect_timeout=4")
        pids = worker_pids(d)
        down = time.monotonic()
        for n in cluster.names:
            cluster.kill(n)
        results = finish(procs, timeout=60)
        took = time.monotonic() - down
        for status, _, err in results:
            assert status != 0, err
            assert "etcd is unreachable: every member refused connections" in err, err
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}") or \
                open(f"/proc/{pid}/stat").read().split()[2] == "Z", f"worker {pid} outlived its agent"
        # Nobody can change the job without etcd: the workers wait for it past their leases, for the
        # reconnect timeout.
        assert 4 <= took < 3 + 4 + 6, took
        print(f"every etcd member gone for good: both agents stopped their workers and said etcd is "
              f"unreachable {took:.1f} s later (heartbeat 3 s, reconnect_timeout 4 s): passed")


def tls_conf(certs, spelling):
    if spelling == "etcd":
        return f"cacert={certs['ca']},cert={certs['cert']},key={certs['key']}"
    return f"protocol=https,ca_cert={certs['ca']},ssl_cert={certs['cert']},ssl_cert_key={certs['key']}"


def case_a_job_runs_over_tls_with_client_certificates():
    with EtcdCluster(members=1, tls=True) as cluster:
        d = tempfile.mkdtemp()
        # One agent spells the files as etcd does, the other as torchrun's etcd-v2 backend.
        procs = [agent(cluster, "2:2", workload(0), d, str(i),
                       conf=f"last_call_timeout=1,{tls_conf(cluster.certs, spelling)}")
                 for i, spelling in enumerate(("etcd", "torch"))]
        for status, _, err in finish(procs):
            assert status == 0, err
        ran = sorted(f.split(".")[2:4] for f in os.listdir(d) if f.startswith("ran."))
        assert ran == [["0", "2"], ["1", "2"]], ran
        print("a 2-node job on an etcd that requires TLS client certificates (both spellings): passed")


def case_tls_mistakes_are_clear_bounded_errors():
    with EtcdCluster(members=1, tls=True) as cluster:
        other = make_certificates(tempfile.mkdtemp(), name="other-ca")
        c = cluster.certs
        mistakes = [
            (f"cacert={other['ca']},cert={c['cert']},key={c['key']}", "is rdzv_conf cacert the CA"),
            (f"cacert={c['ca']}", "client certificate"),
            ("protocol=http", "protocol=https"),
        ]
        for conf, hint in mistakes:
            start = time.monotonic()
            p = subprocess.run(
                [DDPRUN, "--nnodes=2", "--rdzv_backend=etcd", f"--rdzv_endpoint={cluster.endpoints()}",
                 f"--rdzv_conf=join_timeout=3,{conf}", "--no_python", "/bin/true"],
                capture_output=True, text=True, timeout=60)
            took = time.monotonic() - start
            assert p.returncode == 3 and hint in p.stderr, (conf, p.returncode, p.stderr)
            assert took < 3 + 5, (conf, took)
        print("a wrong CA, no client certificate, plain HTTP to a TLS member: exit 3 within "
              "join_timeout, each with a hint: passed")


def case_a_job_logs_in_to_an_etcd_with_auth_on():
    """A user whose role may use only the job's prefix runs a 2-node job while etcd lets its token
    expire every second (--auth-token-ttl 1, the agents' calls 2 s apart): nothing restarts. No
    login, a wrong password and a role without access are clear errors within join_timeout."""
    with EtcdCluster(members=1, extra=["--auth-token-ttl", "1"]) as cluster:
        for args in (("user", "add", "root:rootpw"), ("role", "add", "trainer"),
                     ("role", "grant-permission", "trainer", "--prefix=true", "readwrite",
                      "/ddprun/job/"),
                     ("user", "add", "alice:alicepw"), ("user", "grant-role", "alice", "trainer"),
                     ("role", "add", "elsewhere"),
                     ("role", "grant-permission", "elsewhere", "--prefix=true", "readwrite",
                      "/other/"),
                     ("user", "add", "bob:bobpw"), ("user", "grant-role", "bob", "elsewhere"),
                     ("auth", "enable")):
            r = cluster.etcdctl(*args)
            assert r.returncode == 0, (args, r.stderr)
        d = tempfile.mkdtemp()
        passwords = {}
        for name, pw in (("alice", "alicepw"), ("wrong", "nope"), ("bob", "bobpw")):
            passwords[name] = f"{d}/{name}.pw"
            with open(passwords[name], "w") as f:
                f.write(pw + "\n")
        for user, pw, hint in ((None, None, "authentication on"),
                               ("alice", "wrong", "refused the login"),
                               ("bob", "bob", "may not use these keys")):
            conf = "join_timeout=3"
            if user:
                conf += f",user={user},password_file={passwords[pw]}"
            t0 = time.monotonic()
            p = subprocess.run(
                [DDPRUN, "--nnodes=2", "--rdzv_backend=etcd", "--rdzv_id=job",
                 f"--rdzv_endpoint={cluster.endpoints()}", f"--rdzv_conf={conf}", "--no_python",
                 "/bin/true"], capture_output=True, text=True, timeout=60)
            took = time.monotonic() - t0
            assert p.returncode == 3 and hint in p.stderr, (user, p.returncode, p.stderr)
            assert took < 3 + 5, (user, took)
        conf = (f"last_call_timeout=1,heartbeat_timeout=6,user=alice,"
                f"password_file={passwords['alice']}")
        procs = job_of_two_waiting_workers(cluster, d, conf)
        # The token's lifetime passing, several times over, is what this case is about.
        time.sleep(5)
        for pid in worker_pids(d):
            os.kill(pid, signal.SIGTERM)
        results = finish(procs)
        for status, _, err in results:
            assert status == 0, err
            assert "stopping this node's workers" not in err and "restarting" not in err, err
        assert any("logged in again as 'alice'" in err for _, _, err in results), results
        assert count(d, "ran.") == 0, os.listdir(d)
        print("etcd with authentication: a 2-node job ran as a user limited to its prefix while "
              "its token expired every second, without a restart; no login, a wrong password and "
              "a role without access: exit 3 within join_timeout, each saying so: passed")


def case_an_endpoint_that_is_not_etcd_is_a_clear_bounded_error():
    port = free_port()
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
    if not have_etcd():
        print("etcd-server, etcd-client or openssl not installed")
        sys.exit(77)
    DDPRUN = sys.argv[1]
    globals()[f"case_{sys.argv[2]}"]()
