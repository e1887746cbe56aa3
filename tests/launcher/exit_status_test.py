"""Every exit status ddprun can end with (docs/operations.md's table, what a scheduler acts on),
each driven by a real failure with the plainest command line a user would write, and --version.

    exit_status_test.py DDPRUN DDPRUND
"""
import os
import signal
import socket
import subprocess
import sys
import time

from proc_util import left_running

DDPRUN = DDPRUND = None


def run(*args, timeout=120, env=None):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def sh(script):
    return ["--no_python", "/bin/sh", "-c", script]


def main():
    global DDPRUN, DDPRUND
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seen = {}

    r = run("--standalone", "--nproc_per_node=2", *sh("exit 0"))
    seen[0] = r.returncode

    r = run("--standalone", "--nproc_per_node=2", *sh("exit 7"))
    seen[1] = r.returncode
    assert "exitcode  : 7" in r.stderr, r.stderr

    r = run("--max_restarts=x", *sh("true"))
    seen[2] = r.returncode
    assert "invalid int value 'x'" in r.stderr, r.stderr

    # The launch itself fails: node 0's store port is taken.
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    r = run("--nnodes=1", "--master_addr=127.0.0.1", f"--master_port={taken.getsockname()[1]}",
            *sh("true"))
    taken.close()
    seen[3] = r.returncode

    r = run("--standalone", "--nproc_per_node=1", "--health_check", "echo no GPU >&2; exit 3",
            *sh("true"))
    seen[4] = r.returncode
    assert "no GPU" in r.stderr, r.stderr

    r = run("--standalone", "--nproc_per_node=1", "--max_restarts=9", *sh("exit 3"))
    seen[5] = r.returncode
    assert "crash loop" in r.stderr, r.stderr

    p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=1", *sh("sleep 60")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not left_running("sleep 60", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=60)
    # It ends by the signal itself once the workers are stopped: 128+15 to a shell and to
    # Kubernetes (a container's exit code), -15 to Python.
    seen[128 + 15] = 128 - p.returncode if p.returncode < 0 else p.returncode
    assert not left_running("sleep 60"), left_running("sleep 60")

    assert seen == {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 143: 143}, seen

    for program, name in ((DDPRUN, "ddprun"), (DDPRUND, "ddprund")):
        v = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30)
        assert v.returncode == 0 and v.stdout.startswith(f"{name} 0.") and "(commit " in v.stdout \
            and "legacy dialect" in v.stdout and "modern one" in v.stdout, (name, v)
    # After the script, --version is the script's.
    r = run("--standalone", "--nproc_per_node=1", *sh('echo "got $0"'), "--version")
    assert r.returncode == 0 and "got --version" in r.stdout, r
    print("exit statuses 0 (success), 1 (workers failed), 2 (usage), 3 (launch failed), 4 (this "
          "node unhealthy), 5 (crash loop) and 143 (SIGTERM) each from a real failure; --version of "
          "ddprun and ddprund: passed")


if __name__ == "__main__":
    main()
