"""Helpers the process-level tests share: bounded waits on observable state, a free loopback port,
collecting processes."""
import socket
import subprocess
import time


def free_port():
    """A loopback port nobody listens on right now (for a process of the test to bind)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_address(port):
    """The local address:port a TCP listener on `port` is bound to (`ss`)."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[3]


def wait_for(pred, what, timeout=30):
    """Polls `pred` (state, not ordering) until it holds; returns the time it did. Fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def finish(procs, timeout=120):
    """Waits for each process; returns [(status, stdout, stderr)]."""
    return [(p.wait(timeout), *p.communicate()) for p in procs]


def alive(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
