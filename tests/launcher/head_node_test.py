"""Head-node launch over real ssh: `ddprun -H`/`--hostfile` on a head namespace starts the agents on
three host namespaces, each running a real OpenSSH sshd (ssh_hosts.py).

    head_node_test.py DDPRUN CASE     (CASE: one of the functions named case_*)
Exits 77 (skipped) where namespaces or sshd cannot be had.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from proc_util import alive, wait_for
from ssh_hosts import SshHosts, available

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "workloads", "signal_probe.py")
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "ddp_train.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None
TAG = str(os.getpid())

REPORT = ("import os,json,sys; json.dump({'argv': sys.argv[2:], 'cwd': os.getcwd(), 'env': "
          "{k: v for k, v in os.environ.items() if k.startswith(('DDP_T_', 'NCCL_', 'RANK', "
          "'WORLD_SIZE', 'LOCAL_RANK', 'GROUP_RANK', 'MASTER_'))}}, "
          "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w', encoding='utf-8'))")


HEADS = []  # every head started, killed at the end whatever happened (its agents then stop)


def run_head(hosts, args, env=None, key=None, **kw):
    # A sanitizer build's report settings reach the hosts' agents too (scripts/sanitize-test.sh).
    sanitizers = [f"--env={v}" for v in ("ASAN_OPTIONS", "UBSAN_OPTIONS") if v in os.environ]
    HEADS.append(hosts.head([DDPRUN, *hosts.ssh_flags(key), *sanitizers, *args], stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE, text=True, errors="replace",
                      env={**os.environ, "PYTHON_EXEC": PY, **(env or {})}, **kw))
    return HEADS[-1]


def host_list(hosts, slots):
    return ",".join(f"{a}:{s}" for a, s in zip(hosts.addrs, slots))


def agents_of(run_id):
    """Pids of the agents of run `run_id` (started by a head, on any host of this machine)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"--head_control" in argv and f"--rdzv_id={run_id}".encode() in argv:
            found[int(pid)] = ppid
    # An agent's guardian is a fork of it, with its command line: count the agents only.
    return [pid for pid, ppid in found.items() if ppid not in found]


def case_a_training_job_runs_across_three_hosts():
    with SshHosts(3) as hosts:
        hostfile = os.path.join(hosts.dir, "hostfile")
        with open(hostfile, "w") as f:
            f.write("# three hosts\n\n" + "".join(f"{a} slots=1  # one GPU\n" for a in hosts.addrs))
        start = time.monotonic()
        p = run_head(hosts, [f"--hostfile={hostfile}", "--env", "GLOO_SOCKET_IFNAME=eth0", EXAMPLE])
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
        for rank, addr in enumerate(hosts.addrs):
            line = next((l for l in out.splitlines() if l.startswith(f"{addr}: rank {rank} ")), None)
            assert line is not None and "bit-identical" in line, out
        print(f"DDP over gloo on 3 ssh hosts: passed in {time.monotonic() - start:.1f} s")


def case_unreachable_hosts_are_reported_together():
    with SshHosts(2, without_sshd=2) as hosts:
        run_dir = tempfile.mkdtemp()
        start = time.monotonic()
        run_id = "unreachable" + TAG
        p = run_head(hosts, ["-H", ",".join(hosts.addrs), f"--rdzv_id={run_id}", "--no_python",
                             "/usr/bin/touch", os.path.join(run_dir, "ran")])
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - start
        assert p.returncode == 3, (p.returncode, err)
        # The agents it started on the reachable hosts stop with it (their control channel
        # closed), whatever they were waiting for.
        wait_for(lambda: not agents_of(run_id), "no agent left on the reachable hosts", 10)
        assert "2 of 4 hosts cannot be used" in err, err
        for addr in hosts.addrs[2:]:
            assert f"{addr}: ssh: connect to host {addr} port 22: Connection refused" in err, err
        assert not os.path.exists(os.path.join(run_dir, "ran")), "a host ran the job anyway"
        # A wrong key: ssh's own reason, and never a password prompt (BatchMode).
        other_key = os.path.join(hosts.dir, "other")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other_key], check=True)
        p = run_head(hosts, ["-H", hosts.addrs[0], "--no_python", "/bin/true"], key=other_key,
                     stdin=subprocess.DEVNULL)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 3 and "Permission denied (publickey)" in err, (p.returncode, err)
        print(f"2 refusing hosts named together in {took:.2f} s; a refused key named: passed")


def start_probe_job(hosts, out_dir, run_id, slots=(2, 1, 1)):
    p = run_head(hosts, ["-H", host_list(hosts, slots), f"--rdzv_id={run_id}",
                         "--shutdown_timeout=5", PROBE, out_dir])
    world = sum(slots)
    wait_for(lambda: all(os.path.exists(os.path.join(out_dir, f"ready.{r}")) for r in range(world)),
             "every worker on every host", timeout=60)
    return p, world


def case_sigint_on_the_head_stops_every_host_and_no_other_job():
    with SshHosts(3) as hosts:
        a_dir, b_dir = tempfile.mkdtemp(), tempfile.mkdtemp()
        a, world = start_probe_job(hosts, a_dir, "jobA" + TAG)
        b, _ = start_probe_job(hosts, b_dir, "jobB" + TAG)
        a_agents, b_agents = agents_of("jobA" + TAG), agents_of("jobB" + TAG)
        assert len(a_agents) == 3 and len(b_agents) == 3, (a_agents, b_agents)
        a.send_signal(signal.SIGINT)
        out, err = a.communicate(timeout=60)
        assert a.returncode == 128 + signal.SIGINT, (a.returncode, err)
        for r in range(world):
            with open(os.path.join(a_dir, f"got.{r}")) as f:
                assert f.read() == "SIGINT", f"rank {r} did not get SIGINT"
        wait_for(lambda: not any(alive(p) for p in a_agents), "job A's agents to exit", timeout=10)
        # The other job on the same hosts runs on.
        assert all(alive(p) for p in b_agents), "stopping job A stopped job B's agents"
        assert not any(os.path.exists(os.path.join(b_dir, f"got.{r}")) for r in range(world))
        b.send_signal(signal.SIGTERM)
        b.communicate(timeout=60)
        assert b.returncode == 128 + signal.SIGTERM, b.returncode
        wait_for(lambda: not any(alive(p) for p in b_agents), "job B's agents to exit", timeout=10)
        print("SIGINT on a head reached all 4 workers on 3 hosts; the other job ran on: passed")


def case_sigkill_of_the_head_leaves_nothing_on_any_host():
    with SshHosts(3) as hosts:
        out_dir = tempfile.mkdtemp()
        p, world = start_probe_job(hosts, out_dir, "jobK" + TAG)
        agents = agents_of("jobK" + TAG)
        assert len(agents) == 3, agents
        killed = time.monotonic()
        p.kill()
        p.wait()
        gone = wait_for(lambda: not any(alive(a) for a in agents), "the remote agents to exit",
                        timeout=30)
        for r in range(world):
            assert os.path.exists(os.path.join(out_dir, f"got.{r}")), f"rank {r} was not stopped"
        print(f"head SIGKILLed: every remote agent stopped its workers and exited "
              f"{gone - killed:.2f} s later: passed")


FAIL_ONCE = ("import os,sys; sys.exit(7 if os.environ['RANK']=='2' and "
             "os.environ['TORCHELASTIC_RESTART_COUNT']=='0' else 0)")


def case_a_worker_failure_restarts_every_host_and_a_final_one_is_summarised_once():
    with SshHosts(3) as hosts:
        p = run_head(hosts, ["-H", host_list(hosts, (1, 2, 1)), "--max_restarts=1", "--no_python",
                             PY, "-c", FAIL_ONCE])
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert err.count("restarting the workers (restart 1 of at most 1)") == 3, err
        p = run_head(hosts, ["-H", host_list(hosts, (1, 2, 1)), "--no_python", PY, "-c",
                             "import os,sys; sys.exit(9 if os.environ['RANK']=='3' else 0)"])
        out, err = p.communicate(timeout=120)
        assert p.returncode == 1, (p.returncode, err)
        assert err.count("Root Cause (first observed failure)") == 1, err
        assert "exitcode  : 9" in err and "rank      : 3 (local_rank: 0)" in err, err
        assert "the job failed on 3 of 3 hosts" in err, err
        print("a failure restarted all 3 hosts; a final one printed one cross-node summary: passed")


ARGS = ["a b", "it's", 'say "hi"', "ünïcødé ✓", "$HOME", "*", "", "--flag=x y", "\\n"]


def case_environment_and_arguments_arrive_intact():
    with SshHosts(3) as hosts:
        out_dir = tempfile.mkdtemp()
        work = tempfile.mkdtemp()
        with open(os.path.join(work, ".ddprun_env"), "w") as f:
            f.write("# for every host\nDDP_T_FILE=from file\nexport DDP_T_OVERRIDE=file\n")
        p = run_head(hosts, ["-H", host_list(hosts, (1, 1, 1)), "--env", "DDP_T_HERE",
                             "--env=DDP_T_SET=a=b c", "--env", "DDP_T_OVERRIDE=flag", "--no_python",
                             PY, "-c", REPORT, out_dir, *ARGS], cwd=work,
                     env={"DDP_T_HERE": "héllo 'q'", "NCCL_DEBUG": "WARN", "DDP_T_UNSENT": "x"})
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        for r, addr in enumerate(hosts.addrs):
            with open(os.path.join(out_dir, str(r)), encoding="utf-8") as f:
                got = json.load(f)
            assert got["argv"] == ARGS, got["argv"]
            assert got["cwd"] == work, got["cwd"]
            env = got["env"]
            assert env.get("DDP_T_HERE") == "héllo 'q'" and env.get("DDP_T_SET") == "a=b c", env
            assert env.get("DDP_T_FILE") == "from file" and env.get("DDP_T_OVERRIDE") == "flag", env
            assert env.get("NCCL_DEBUG") == "WARN" and "DDP_T_UNSENT" not in env, env
            assert env["RANK"] == str(r) and env["GROUP_RANK"] == str(r), env
            assert env["WORLD_SIZE"] == "3" and env["MASTER_ADDR"] == hosts.addrs[0], env
        print("--env, .ddprun_env, NCCL_* and 9 awkward arguments reached 3 hosts intact: passed")


def main():
    global DDPRUN
    DDPRUN = os.path.abspath(sys.argv[1])
    why = available()
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    try:
        globals()["case_" + sys.argv[2]]()
    finally:
        for p in HEADS:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
