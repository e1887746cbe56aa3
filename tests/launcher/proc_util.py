"""Helpers the process-level tests share: bounded waits on observable state, a free loopback port,
collecting processes, a script written to a file."""
import os
import random
import socket
import subprocess
import tempfile
import time


def free_port():
    """A loopback port nobody uses right now, for a process of the test to bind later. It is drawn
    below the kernel's ephemeral range: a port the OS picks for anyone else (a server bound to port
    0, a client's end of a connection) never lands there, so it stays free until then, whatever runs
    beside the test."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    if ephemeral_low > 11024:
        for _ in range(200):
            port = random.randrange(10000, ephemeral_low)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                    return port
                except OSError:
                    continue
    with socket.socket() as s:  # (a machine whose ephemeral range starts low)
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


def agents_ended(agents, codes, timeout=300):
    """Each agent's stderr (a text pipe) once it ended with its code in `codes` (agents' key ->
    exit status); an agent still running after `timeout` is killed and fails the test."""
    errs = {}
    for key, code in codes.items():
        p = agents[key]
        try:
            _, errs[key] = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            _, errs[key] = p.communicate()
            raise AssertionError(f"{key} did not finish: {errs[key][-3000:]}")
        assert p.returncode == code, (key, p.returncode, errs[key][-5000:])
    return errs


def alive(pid):
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # (gone before the open, or before the read)
        return False


def script(text):
    """The path of a new .py file holding `text` (a worker a test writes inline)."""
    fd, path = tempfile.mkstemp(suffix=".py")
    os.write(fd, text.encode())
    os.close(fd)
    return path


def running_where(match):
    """The pids (text) of processes but this one whose command line (bytes, NUL-separated)
    satisfies `match`, now."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():  # a test names what it looks for too
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if match(f.read()):
                    found.append(pid)
        except OSError:
            pass
    return found


def left_where(match, seconds=10):
    """running_where(match), once none is left or `seconds` passed."""
    deadline = time.monotonic() + seconds
    while (found := running_where(match)) and time.monotonic() <= deadline:
        time.sleep(0.05)
    return found


def left_running(text, seconds=10):
    """Processes whose command line contains `text`, once none is left or `seconds` passed."""
    return left_where(lambda cmdline: text.encode() in cmdline, seconds)


def static_job_status(ddprun, port, *extra):
    """`ddprun status` of the static job whose node 0 listens on loopback `port`."""
    return subprocess.run([ddprun, "status", "--rdzv_backend=static",
                           f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=none", *extra],
                          capture_output=True, text=True, timeout=60)


def allocated_under(folder):
    """Bytes allocated (what df counts) in a node's checkpoint folder: its regions and the copies it
    keeps for and holds for peers, less the modules the agent writes there (python/); a file of
    several names (a copy held for a peer linked to a kept one) once."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(folder):
        if root == folder and "python" in dirs:
            dirs.remove("python")
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            if st.st_nlink > 1 and (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total
