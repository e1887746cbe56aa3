"""Nobody outside a job can read, change or end it: ddprund with --auth-token-file, agents with
--rdzv_conf auth_token_file, strangers of every kind (torch's own TCPStore client, raw bytes, a wrong
token, a replayed handshake, another job's token), the static backend's agent-hosted store, and the
operations endpoints (metrics on loopback, owner-only logs). Real processes on loopback.

    auth_test.py DDPRUN DDPRUND CASE     (CASE: one of the functions named case_*)
"""
import hashlib
import hmac
import json
import os
import re
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from agents import Processes, agent_command
from proc_util import free_port, listening_address, wait_for

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
PROCS = Processes()  # killed at the end whatever happened

# Every worker leaves "$0/pid.$RANK.<time>" (one per start: a restart leaves more) and waits for "$0/go".
HOLD = ('touch "$0/pid.$RANK.$(date +%s%N)"; while [ ! -e "$0/go" ]; do sleep 0.05; done')

MAGIC = 0x3C85F7CE
OP_SET, OP_GET, OP_PING, OP_LIST_KEYS = 1, 3, 13, 17
OP_WATCH, OP_AUTH_BEGIN, OP_AUTH_PROVE = 200, 206, 207


def secret_file(text=None):
    fd, path = tempfile.mkstemp(suffix=".token")
    os.write(fd, (text or os.urandom(24).hex()).encode() + b"\n")
    os.close(fd)
    return path


def job_token(secret, run_id):
    r = subprocess.run([DDPRUN, "token", f"--auth-token-file={secret}", f"--rdzv_id={run_id}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return secret_file(r.stdout.strip())


def agent(endpoint, run_id, work, token=None, backend="c10d", extra=(), log=None):
    # (No case here loses a node: a heartbeat timeout long enough that an agent starved of CPU for
    # seconds, on a loaded machine under the sanitizers, is not taken for lost.)
    conf = "last_call_timeout=1,heartbeat_timeout=15,join_timeout=20"
    if token:
        conf += f",auth_token_file={token}"
    return PROCS.start(agent_command(DDPRUN, nnodes=2, nproc=2, endpoint=endpoint, run_id=run_id,
                                     backend=backend, conf=conf, extra=["--max_restarts=1", *extra],
                                     command=["--no_python", "/bin/sh", "-c", HOLD, work]),
                       log=log)


def started(work):
    return len([f for f in os.listdir(work) if f.startswith("pid.")])


# A client of the store's wire protocol, written from its description (wire_protocol.hpp, auth.hpp).
def bytes_field(b):
    return struct.pack("<q", len(b)) + b


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the store")
        out += chunk
    return out


def read_bytes(s):
    (n,) = struct.unpack("<q", recv_exact(s, 8))
    return recv_exact(s, n)


def client_proof(token, scope, cnonce, snonce):
    return hmac.new(token, b"ddprun auth client\n" + scope + b"\n" + cnonce + snonce,
                    hashlib.sha256).digest()


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"\x00" + struct.pack("<I", MAGIC))
    return s


def authenticate(port, token, scope, proof=None, cnonce=None):
    """Runs the handshake; returns (socket or None when refused, client nonce, proof sent)."""
    s = connect(port)
    cnonce = cnonce or os.urandom(32)
    s.sendall(bytes([OP_AUTH_BEGIN]) + bytes_field(scope) + bytes_field(cnonce))
    snonce = read_bytes(s)
    assert len(snonce) == 32, snonce
    proof = proof or client_proof(token, scope, cnonce, snonce)
    s.sendall(bytes([OP_AUTH_PROVE]) + bytes_field(proof))
    if recv_exact(s, 1) != b"\x00":
        closed(s)
        return None, cnonce, proof
    server = read_bytes(s)
    expected = hmac.new(token, b"ddprun auth server\n" + scope + b"\n" + cnonce + snonce,
                        hashlib.sha256).digest()
    assert server == expected, "the store's proof does not hold"
    return s, cnonce, proof


def alive_after(s, request):
    """Sends `request` then a PING: whether the store answered the PING (False: it closed)."""
    try:
        s.sendall(request + bytes([OP_PING]) + struct.pack("<I", 7))
        s.settimeout(5)
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return False
            data += chunk
            if data.endswith(struct.pack("<I", 7)):
                return True
    except (ConnectionError, OSError):
        return False


def closed(s):
    s.settimeout(5)
    try:
        while s.recv(4096):
            pass
    except (ConnectionError, OSError):
        pass
    s.close()


def set_request(key, value):
    return bytes([OP_SET]) + bytes_field(key) + bytes_field(value)


def torch_stranger(port, key):
    """torch's own TCPStore client writes `key` = failed; returns what happened."""
    code = f"""
import datetime, sys, torch.distributed as dist
try:
    s = dist.TCPStore("127.0.0.1", {port}, is_master=False, timeout=datetime.timedelta(seconds=5))
    s.set("{key}", "failed")
    s.get("{key}")
    print("WROTE")
except Exception as e:
    print("REFUSED", type(e).__name__)
"""
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
    return r.stdout.strip()


def case_strangers_cannot_touch_a_job_and_jobs_cannot_touch_each_other():
    secret = secret_file()
    d, port, dlog = PROCS.ddprund(DDPRUND, "--auth-token-file", secret)
    ep = f"127.0.0.1:{port}"
    tokens = {job: job_token(secret, job) for job in ("ja", "jb")}
    works = {job: tempfile.mkdtemp() for job in tokens}
    logs = [tempfile.mktemp(suffix=f".agent{i}.log") for i in range(4)]
    agents = [agent(ep, job, works[job], tokens[job], log=logs[2 * j + i])
              for j, job in enumerate(tokens) for i in range(2)]

    def said():
        return "\n".join(f"{path}:\n" + open(path).read()[-3000:] for path in logs)

    for job in tokens:
        try:
            wait_for(lambda: started(works[job]) == 4, f"job {job}'s 4 workers", 60)
        except AssertionError as e:
            raise AssertionError(f"{e}: {said()}") from None
    scope = {job: f"/ddprun/{job}/".encode() for job in tokens}
    token = {job: open(tokens[job], "rb").read().strip() for job in tokens}
    closed_key = b"/ddprun/ja/closed"

    # torch's own client, which cannot authenticate: refused whatever it sends.
    assert torch_stranger(port, "ddprun/ja/closed").startswith("REFUSED")
    # Raw bytes, and requests without a handshake: reading, listing, watching, writing.
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    raw.sendall(os.urandom(4096))
    closed(raw)
    for request in (bytes([OP_GET]) + bytes_field(closed_key), bytes([OP_LIST_KEYS]),
                    bytes([OP_WATCH, 1]) + bytes_field(b"/ddprun/"),
                    set_request(closed_key, b"failed")):
        assert not alive_after(connect(port), request), request
    # A wrong token, the secret's scope asked with a job token, a replayed handshake.
    wrong = os.urandom(32).hex().encode()
    assert authenticate(port, wrong, scope["ja"])[0] is None
    assert authenticate(port, token["ja"], b"")[0] is None
    good, cnonce, proof = authenticate(port, token["ja"], scope["ja"])
    assert good is not None and alive_after(good, bytes([OP_GET]) + bytes_field(b"/ddprun/ja/x"))
    assert authenticate(port, token["ja"], scope["ja"], proof=proof, cnonce=cnonce)[0] is None
    # Job A's token: refused for job B's scope; in its own scope, job B's keys close it, and so do
    # the requests that would tell of every key.
    assert authenticate(port, token["ja"], scope["jb"])[0] is None
    for request in (set_request(b"/ddprun/jb/closed", b"failed"), bytes([OP_LIST_KEYS]),
                    bytes([OP_WATCH, 1]) + bytes_field(b"/ddprun/"),
                    bytes([OP_GET]) + bytes_field(b"/ddprun/jb/settings")):
        s, _, _ = authenticate(port, token["ja"], scope["ja"])
        assert not alive_after(s, request), request
    # The operator's secret reads any job (ddprun status), and a job's own token reads its own.
    for job in tokens:
        for cred in (secret, tokens[job]):
            r = subprocess.run([DDPRUN, "status", "--rdzv_backend=c10d", f"--rdzv_endpoint={ep}",
                                f"--rdzv_id={job}", f"--rdzv_conf=auth_token_file={cred}",
                                "--json"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0 and json.loads(r.stdout)["world_size"] == 4, r.stderr
    r = subprocess.run([DDPRUN, "status", "--rdzv_backend=c10d", f"--rdzv_endpoint={ep}",
                        "--rdzv_id=ja"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "auth_token_file" in r.stderr, (r.returncode, r.stderr)

    for job in tokens:
        open(os.path.join(works[job], "go"), "w").close()
    for a in agents:
        try:
            assert a.wait(60) == 0, said()
        except subprocess.TimeoutExpired:
            raise AssertionError(f"an agent still ran after 60 s: {said()}") from None
    for job in tokens:  # nothing restarted: one start per worker
        assert started(works[job]) == 4, (os.listdir(works[job]), said())
    log = open(dlog).read()
    assert "before authenticating" in log and "matches no token" in log, log[-3000:]
    assert "outside its scope" in log, log[-3000:]
    print("strangers, raw bytes, wrong tokens, a replay and another job's token refused; two jobs "
          "side by side undisturbed: passed")


def case_an_agent_without_the_token_is_a_clear_error():
    secret = secret_file()
    d, port, _ = PROCS.ddprund(DDPRUND, "--auth-token-file", secret)
    work = tempfile.mkdtemp()
    t0 = time.monotonic()
    a = agent(f"127.0.0.1:{port}", "jn", work)
    _, err = a.communicate(timeout=60)
    assert a.returncode != 0 and "auth_token_file" in err, err[-2000:]
    wrong = secret_file()
    a = agent(f"127.0.0.1:{port}", "jn", work, token=wrong)
    _, err = a.communicate(timeout=60)
    assert a.returncode != 0 and "refused this token" in err, err[-2000:]
    # A job with a token does not talk to a store that cannot prove it knows it.
    _, open_port, _ = PROCS.ddprund(DDPRUND)
    a = agent(f"127.0.0.1:{open_port}", "jn", work, token=wrong)
    _, err = a.communicate(timeout=60)
    assert a.returncode != 0 and "does not authenticate" in err, err[-2000:]
    assert time.monotonic() - t0 < 40, "not within join_timeout"
    assert started(work) == 0
    print("no token, a wrong token, and a store without one: clear errors at once: passed")


def impostor_store():
    """A store that answers the handshake without knowing any token; returns its port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = listener.accept()
        with conn:
            hello = recv_exact(conn, 10)  # VALIDATE, PING
            begin = recv_exact(conn, 9)  # AUTH_BEGIN, the scope's length
            (n,) = struct.unpack("<q", begin[1:])
            recv_exact(conn, n + 8 + 32)  # the scope, the client's nonce
            conn.sendall(hello[6:10] + bytes_field(os.urandom(32)))
            recv_exact(conn, 1 + 8 + 32)  # AUTH_PROVE
            conn.sendall(b"\x00" + bytes_field(os.urandom(32)))  # accepted, with a made-up proof
            while conn.recv(4096):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def case_a_secret_file_others_can_read_is_warned_of_on_stderr_after_the_port():
    """ddprund prints its port alone on stdout (what scripts read) even where reading its options
    has something to say: a secret others can read is a warning on stderr."""
    secret = secret_file()
    os.chmod(secret, 0o644)
    _, port, dlog = PROCS.ddprund(DDPRUND, "--auth-token-file", secret)  # (the port: stdout's line)
    assert 0 < port < 65536, port
    wait_for(lambda: "can be read by others than its owner" in open(dlog).read(),
             "the warning on stderr", 30)
    print("a secret readable by others: the port alone on stdout, the warning on stderr: passed")


def case_a_store_that_cannot_prove_the_token_is_refused():
    token = secret_file()
    port = impostor_store()
    r = subprocess.run([DDPRUN, "status", "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                        "--rdzv_id=ja", f"--rdzv_conf=auth_token_file={token}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3 and "could not prove that it knows this token" in r.stderr, (
        r.returncode, r.stderr)
    print("a store that accepts the proof but cannot prove the token back is refused: passed")


def case_static_backend_store_serves_only_the_job():
    """Node 0's agent hosts the job's store (for agents, with the token) and the workers' store
    beside it: torch workers form a process group, a stranger cannot write the job's keys."""
    token = secret_file()
    port = free_port()
    work = tempfile.mkdtemp()
    train = os.path.join(work, "train.py")
    with open(train, "w") as f:
        f.write("import os, sys, torch, torch.distributed as dist\n"
                "dist.init_process_group('gloo')\n"
                "t = torch.ones(1) * (dist.get_rank() + 1)\n"
                "dist.all_reduce(t)\n"
                "open(os.path.join(sys.argv[1], f'sum.{dist.get_rank()}'), 'w').write(str(int(t.item())))\n"
                "while not os.path.exists(os.path.join(sys.argv[1], 'go')):\n"
                "    import time; time.sleep(0.05)\n"
                "dist.destroy_process_group()\n")
    conf = f"--rdzv_conf=auth_token_file={token},join_timeout=30"
    agents = [PROCS.start([DDPRUN, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=2",
                     "--master_addr=127.0.0.1", f"--master_port={port}", conf, "--max_restarts=0",
                     train, work], env=dict(os.environ, PYTHON_EXEC=PY)) for r in range(2)]
    wait_for(lambda: len([f for f in os.listdir(work) if f.startswith("sum.")]) == 4,
             "the workers' all-reduce", 120)
    assert torch_stranger(port, "ddprun/none/closed").startswith("REFUSED")
    assert not alive_after(connect(port), set_request(b"/ddprun/none/stopped", b"1 15"))
    open(os.path.join(work, "go"), "w").close()
    for a in agents:
        assert a.wait(120) == 0, a.communicate()[1][-3000:]
    sums = {open(os.path.join(work, f"sum.{r}")).read() for r in range(4)}
    assert sums == {"10"}, sums
    print("static backend with a token: workers train, a stranger is refused: passed")


def case_operations_endpoints_are_private():
    """Metrics listen on loopback unless told otherwise; the run's log folder and the event log are
    readable by their owner only."""
    base = tempfile.mkdtemp()
    events = os.path.join(base, "events.jsonl")
    log = tempfile.mktemp()
    a = PROCS.start([DDPRUN, "--nproc_per_node=1", f"--log_dir={base}", f"--event_log={events}",
               "--metrics_port=0", "--no_python", "/bin/sh", "-c", HOLD, base], log=log)
    wait_for(lambda: started(base) == 1, "the worker")
    text = open(log).read()
    m = re.search(r"metrics at http://([^ ]+):(\d+)/metrics", text)
    assert m and m.group(1) == "127.0.0.1", text
    port = m.group(2)
    assert listening_address(port) == f"127.0.0.1:{port}", listening_address(port)
    run_dirs = [d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))]
    assert len(run_dirs) == 1, os.listdir(base)
    assert stat.S_IMODE(os.stat(os.path.join(base, run_dirs[0])).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(events).st_mode) == 0o600
    open(os.path.join(base, "go"), "w").close()
    assert a.wait(60) == 0
    # Given an address, there: every address.
    b = PROCS.start([DDPRUN, "--nproc_per_node=1", "--metrics_addr=::", "--metrics_port=0",
               "--no_python", "/bin/sh", "-c", HOLD, base], log=log)
    wait_for(lambda: "metrics at http://::" in open(log).read(), "the metrics line")
    b.kill()
    bad = subprocess.run([DDPRUN, "--metrics_addr=nowhere", "--no_python", "true"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "not an IP address" in bad.stderr, bad.stderr
    print("metrics on loopback by default, owner-only log folder and event log: passed")


def main(cases=None):
    """Runs the case sys.argv[3] names, from `cases` (another test file's globals) or this file's."""
    global DDPRUN, DDPRUND
    DDPRUN, DDPRUND = map(os.path.abspath, sys.argv[1:3])
    with PROCS:
        (cases or globals())["case_" + sys.argv[3]]()


if __name__ == "__main__":
    main()
