"""TLS between agents and the job's store: ddprund with --tls-cert (and --tls-client-ca), the
static backend's node 0 and a c10d agent that hosts its endpoint, each running a torch job whose
store traffic crosses a relay that keeps every byte (none of the job's keys in the clear); and the
settings a node gets wrong (a wrong CA, no client certificate, TLS on one end only), each a clear
error within join_timeout. Real processes and certificates made with the openssl tool, on loopback.

    tls_test.py DDPRUN DDPRUND CASE     (CASE: one of the functions named case_*)
"""
import glob
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from etcd_cluster import make_certificates
from proc_util import free_port, left_running, wait_for

import auth_test as auth  # its processes, tokens and ddprund; its main() runs these cases too
from auth_test import PROCS, PY, job_token, secret_file

TRAIN = """import os, sys, torch, torch.distributed as dist
dist.init_process_group('gloo')
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
open(os.path.join(sys.argv[1], f'sum.{dist.get_rank()}'), 'w').write(str(int(t.item())))
dist.destroy_process_group()
"""


def pki():
    """A CA; `server` (server and client use, for 127.0.0.1) for stores and the agents that may host
    one, `client` for the others; and a stranger CA's files."""
    d = tempfile.mkdtemp()
    job = make_certificates(d)
    os.mkdir(f"{d}/other")
    other = make_certificates(f"{d}/other", "other")
    return {"ca": job["ca"], "server": (f"{d}/server.pem", f"{d}/server.key"),
            "client": (job["cert"], job["key"]), "other_ca": other["ca"],
            "other_client": (other["cert"], other["key"])}


def tls_conf(ca, own=None):
    conf = f"protocol=https,cacert={ca}"
    if own:
        conf += f",cert={own[0]},key={own[1]}"
    return conf


class Relay:
    """Forwards loopback connections to `upstream`, keeping every byte either way."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            down, _ = self.listener.accept()
            up = self.connect_upstream()
            if up is None:
                down.close()
                continue
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def connect_upstream(self):
        """A connection to the upstream, which may not listen yet (the agent that hosts it is
        still starting: the static backend's node 0 under the sanitizers); None after 60 s."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return socket.create_connection(("127.0.0.1", self.upstream), timeout=30)
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.05)

    def pump(self, a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                with self.lock:
                    self.seen += data
                b.sendall(data)
        except OSError:
            pass
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def saw(self, text):
        with self.lock:
            return text.encode() in self.seen


def torch_job(nodes):
    """An agent per (arguments, rdzv_conf) of `nodes`, two torch workers each, that all-reduce once;
    returns when every one has exited 0."""
    work = tempfile.mkdtemp()
    train = os.path.join(work, "train.py")
    with open(train, "w") as f:
        f.write(TRAIN)
    agents = [PROCS.start([auth.DDPRUN, "--nnodes=2", "--nproc_per_node=2", *args,
                     f"--rdzv_conf={conf},join_timeout=60", "--max_restarts=0", train, work],
                    env=dict(os.environ, PYTHON_EXEC=PY)) for args, conf in nodes]
    for a in agents:
        assert a.wait(180) == 0, a.communicate()[1][-3000:]
    sums = {open(os.path.join(work, f"sum.{r}")).read() for r in range(4)}
    assert sums == {"10"}, sums


def case_a_job_runs_over_tls_on_ddprund_and_on_agent_hosted_stores():
    certs = pki()
    secret = secret_file()
    # ddprund, asking for client certificates; the agents reach it through a relay that keeps the
    # bytes: the job's keys never cross it in the clear.
    _, port, _ = PROCS.ddprund(auth.DDPRUND, "--auth-token-file", secret, "--tls-cert", certs["server"][0],
                            "--tls-key", certs["server"][1], "--tls-client-ca", certs["ca"])
    relay = Relay(port)
    token = job_token(secret, "tlsjob")
    conf = f"auth_token_file={token},is_host=false," + tls_conf(certs["ca"], certs["client"])
    c10d = ["--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{relay.port}", "--rdzv_id=tlsjob"]
    torch_job([(c10d, conf), (c10d, conf)])
    assert not relay.saw("tlsjob") and not relay.saw("ddprun/"), "job keys crossed in the clear"
    assert relay.saw("\x16\x03"), "no TLS handshake crossed the relay"
    # The operator reads the job's status over TLS with the daemon's secret.
    r = subprocess.run([auth.DDPRUN, "status", "--rdzv_backend=c10d",
                        f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=tlsjob",
                        f"--rdzv_conf=auth_token_file={secret}," +
                        tls_conf(certs["ca"], certs["client"])],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # The static backend's node 0 hosts the job's store over TLS (the workers' store beside it
    # stays clear, for torch); node 1 holds a client certificate only.
    token = secret_file()
    store_port = free_port()
    relay = Relay(store_port)
    torch_job([(["--node_rank=0", "--master_addr=127.0.0.1", f"--master_port={store_port}"],
                f"auth_token_file={token}," + tls_conf(certs["ca"], certs["server"])),
               (["--node_rank=1", "--master_addr=127.0.0.1", f"--master_port={relay.port}"],
                f"auth_token_file={token}," + tls_conf(certs["ca"], certs["client"]))])
    assert relay.saw("\x16\x03") and not relay.saw("ddprun/"), "node 1's store traffic in the clear"
    # A c10d agent hosts its endpoint over TLS (is_host), the other joins it.
    token = secret_file()
    ep = f"127.0.0.1:{free_port()}"
    c10d = ["--rdzv_backend=c10d", f"--rdzv_endpoint={ep}", "--rdzv_id=hosted"]
    conf = f"auth_token_file={token}," + tls_conf(certs["ca"], certs["server"])
    torch_job([(c10d, conf), (c10d, conf)])
    print("torch jobs over TLS to ddprund (client certificates asked), the static backend's node 0 "
          "and a hosting c10d agent; no job key in the clear; status over TLS: passed")


def case_checkpoint_copies_cross_between_agents_with_the_token_over_tls():
    """A job with a token and TLS copies each node's in-memory checkpoints to its peer over a link
    that proves the token and speaks TLS (nothing in the clear is answered); a node SIGKILLed after
    step 5 and a replacement started: it resumes from step 5 with the copies its peer held."""
    certs = pki()
    secret = secret_file()
    _, port, _ = PROCS.ddprund(auth.DDPRUND, "--auth-token-file", secret, "--tls-cert", certs["server"][0],
                         "--tls-key", certs["server"][1], "--tls-client-ca", certs["ca"])
    run_id = f"tlsckpt{os.getpid()}"
    token = job_token(secret, run_id)
    conf = (f"auth_token_file={token},last_call_timeout=1,heartbeat_timeout=3,join_timeout=60," +
            tls_conf(certs["ca"], certs["server"]))
    out = tempfile.mkdtemp()
    workload = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads",
                            "checkpoint_ddp.py")

    def node(i, env=None):
        return PROCS.start([auth.DDPRUN, "--nnodes=2", "--nproc_per_node=1", "--max_restarts=3",
                      "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}",
                      f"--rdzv_id={run_id}", f"--rdzv_conf={conf}",
                      f"--event_log={out}/events.{i}.jsonl", workload, "12", out],
                     env=dict(os.environ, PYTHON_EXEC=PY, **(env or {})))

    def events(i, name):
        path = f"{out}/events.{i}.jsonl"
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [e for e in map(json.loads, f) if e["event"] == name]

    survivor, victim = node(0), node(1, {"HOLD_AT": "5"})
    wait_for(lambda: os.path.exists(f"{out}/held.1"), "the victim at step 5", 120)
    copies = f"/dev/shm/ddprun-checkpoints-{run_id}-*/peers/*.step5.ddpckpt"
    wait_for(lambda: len(glob.glob(copies)) >= 2, "step 5 copied to each peer", 60)
    # (The peer's file takes its place before the victim hears that the copy went.)
    wait_for(lambda: events(1, "checkpoint_replicated"), "the victim's word of its copies", 30)
    replicated = events(1, "checkpoint_replicated")
    host, peer_port = replicated[0]["peer"].rsplit(":", 1)
    # The survivor's checkpoint port answers nothing in the clear (the link's greeting is TLS).
    with socket.create_connection((host, int(peer_port)), timeout=30) as s:
        s.sendall(b"DDPPEER4" + bytes(32))
        got = b""
        try:
            while len(got) < 40:
                chunk = s.recv(40 - len(got))
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
    assert len(got) < 40 or b"DDPPEER4" not in got, got
    victim.kill()
    victim.wait()
    replacement = node(2)
    for a in (survivor, replacement):
        assert a.wait(240) == 0, a.communicate()[1][-3000:]
    fetched = events(2, "checkpoint_fetched")
    assert fetched and all(f["ok"] for f in fetched) and fetched[-1]["bytes"] > 0, fetched
    restored = events(2, "checkpoint_restore")
    assert restored and restored[-1]["step"] == 5 and restored[-1]["from"] == "peer", restored
    assert not left_running(out)


def case_tls_settings_a_node_gets_wrong_are_clear_errors():
    certs = pki()
    secret = secret_file()
    _, port, dlog = PROCS.ddprund(auth.DDPRUND, "--auth-token-file", secret, "--tls-cert", certs["server"][0],
                            "--tls-key", certs["server"][1], "--tls-client-ca", certs["ca"])
    _, clear_port, _ = PROCS.ddprund(auth.DDPRUND, "--auth-token-file", secret)
    token = job_token(secret, "bad")
    work = tempfile.mkdtemp()
    cases = [
        (port, tls_conf(certs["other_ca"], certs["client"]), "certificate verify failed"),
        (port, tls_conf(certs["ca"]), "certificate required"),
        (port, tls_conf(certs["ca"], certs["other_client"]), "unknown ca"),
        (port, "protocol=http", "protocol=https"),
        (clear_port, tls_conf(certs["ca"], certs["client"]), "does not serve TLS"),
    ]
    for p, conf, expected in cases:
        t0 = time.monotonic()
        a = PROCS.start([auth.DDPRUN, "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                   f"--rdzv_endpoint=127.0.0.1:{p}", "--rdzv_id=bad",
                   f"--rdzv_conf=auth_token_file={token},is_host=false,join_timeout=20,{conf}",
                   "--no_python", "/bin/sh", "-c", 'touch "$0/started"', work])
        _, err = a.communicate(timeout=60)
        assert a.returncode == 3 and expected in err, (conf, a.returncode, err[-2000:])
        assert time.monotonic() - t0 < 20, f"{conf}: not within join_timeout"
    assert not os.path.exists(os.path.join(work, "started"))
    log = open(dlog).read()
    assert "TLS handshake failed" in log, log[-3000:]
    print("a wrong CA, no client certificate, another CA's certificate, and TLS on one end only: "
          "exit 3 with the cause, within join_timeout: passed")


if __name__ == "__main__":
    auth.main(globals())
