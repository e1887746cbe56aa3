"""A worker in uninterruptible sleep (D state) longer than TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT
makes its node leave the job: no restart there, exit status 4, the summary naming the worker, its
state and kernel wait channel; an elastic job goes on without the node.

    uninterruptible_test.py DDPRUN DDPRUND PROBE CASE
"""
import os
import subprocess
import sys
import tempfile
import time
from proc_util import alive, finish, wait_for

DDPRUN = DDPRUND = PROBE = None


def case_a_stuck_worker_takes_its_node_out_without_a_restart():
    d = tempfile.mkdtemp()
    # (ddprun, as torchrun, reads $$ in arguments as an escaped $: the shell's pid from /proc.)
    script = ('read -r pid rest < /proc/self/stat; echo "$pid" > "$0/pid.$RANK"; '
              f'if [ "$RANK" = 1 ]; then exec {PROBE}; fi; exec sleep 60')
    start = time.monotonic()
    r = subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=2", "--max_restarts=3",
                        "--no_python", "/bin/sh", "-c", script, d],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT": "1"})
    took = time.monotonic() - start
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "worker local_rank 1 (rank 1, pid" in r.stderr, r.stderr
    assert "uninterruptible sleep (state D, kernel wait channel" in r.stderr, r.stderr
    assert "restarting" not in r.stderr, r.stderr
    for rank in (0, 1):
        pid = int(open(f"{d}/pid.{rank}").read())
        assert not alive(pid), f"rank {rank} (pid {pid}) outlived ddprun"
    assert took < 10, took
    print(f"a worker in D state for 1 s: its node out in {took:.1f} s, exit 4, no restart, nothing "
          "left running: passed")


def case_an_elastic_job_goes_on_without_the_stuck_node():
    daemon = subprocess.Popen([DDPRUND, "--host", "127.0.0.1", "--port", "0", "--log-level",
                               "warn"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(daemon.stdout.readline())
        d = tempfile.mkdtemp()
        script = ('if [ "$WORLD_SIZE" = 1 ]; then touch "$0/alone.$1"; exit 0; fi; '
                  f'touch "$0/ready.$1"; if [ "$1" = b ]; then exec {PROBE}; fi; exec sleep 60')
        agents = [subprocess.Popen(
            [DDPRUN, "--nnodes=1:2", "--nproc_per_node=1", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=dstate",
             "--rdzv_conf=last_call_timeout=1", "--max_restarts=1", "--no_python", "/bin/sh", "-c",
             script, d, name], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT": "1"})
            for name in ("a", "b")]
        wait_for(lambda: os.path.exists(f"{d}/ready.a") and os.path.exists(f"{d}/ready.b"),
                 "a 2-node round", timeout=60)
        (sa, _, ea), (sb, _, eb) = finish(agents)
        assert sb == 4 and "state D" in eb, (sb, eb)
        assert sa == 0, ea
        assert os.path.exists(f"{d}/alone.a") and not os.path.exists(f"{d}/alone.b")
        print("c10d 1:2: the node whose worker is stuck in D state leaves (exit 4); the other "
              "re-forms alone and finishes: passed")
    finally:
        daemon.kill()
        daemon.wait()


if __name__ == "__main__":
    DDPRUN, DDPRUND, PROBE = (os.path.abspath(p) for p in sys.argv[1:4])
    globals()["case_" + sys.argv[4]]()
