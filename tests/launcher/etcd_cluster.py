"""A real etcd cluster (Debian's etcd-server) on loopback ports, with its data in a temporary folder,
for the tests of the etcd backend: members can be killed, paused and restarted; clients can be given
TLS (a CA, server and client certificates made with the openssl tool) or an auth-enabled cluster.
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
from proc_util import free_port, wait_for


def have_etcd():
    return all(shutil.which(t) for t in ("etcd", "etcdctl", "openssl"))


def make_certificates(d, name="ca"):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files in `d`."""
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.pem",
            "-days", "2", "-subj", f"/CN={name}")
    for who, usage in (("server", "serverAuth,clientAuth"), ("client", "clientAuth")):
        openssl("req", *ec, "-keyout", f"{d}/{who}.key", "-out", f"{d}/{who}.csr",
                "-subj", f"/CN=ddprun-test-{who}")
        with open(f"{d}/{who}.ext", "w") as f:
            f.write(f"subjectAltName=IP:127.0.0.1\nextendedKeyUsage={usage}\n")
        openssl("x509", "-req", "-in", f"{d}/{who}.csr", "-CA", f"{d}/{name}.pem",
                "-CAkey", f"{d}/{name}.key", "-CAcreateserial", "-days", "2",
                "-extfile", f"{d}/{who}.ext", "-out", f"{d}/{who}.pem")
    return {"ca": f"{d}/{name}.pem", "cert": f"{d}/client.pem", "key": f"{d}/client.key"}


class EtcdCluster:
    """`members` etcd processes forming one cluster; with tls=True clients must speak TLS and present a
    certificate signed by the cluster's CA (self.certs). With `netns`, the members (and etcdctl) run
    in that network namespace, serving clients on `host`, an address of it."""

    def __init__(self, members=3, tls=False, attempts=5, host="127.0.0.1", netns=None, extra=()):
        self.dir = tempfile.mkdtemp()
        self.extra = list(extra)  # more flags for every member
        self.tls = tls
        self.host = host
        self.inside = ["nsenter", f"--net=/var/run/netns/{netns}"] if netns else []
        self.certs = make_certificates(self.dir) if tls else None
        self.names = [f"m{i}" for i in range(members)]
        self.scheme = "https" if tls else "http"
        self.procs = {}
        # etcd needs its ports on its command line, so they are picked by binding and releasing
        # them, and a test running beside this one may take one first: a member that cannot bind
        # exits at once, and the cluster starts again on new ports.
        for attempt in range(attempts):
            self.client = [free_port() for _ in self.names]
            self.peer = [free_port() for _ in self.names]
            for n in self.names:
                self.start(n, "new")
            try:
                wait_for(lambda: self.healthy() or self.a_member_exited(), "a healthy etcd cluster",
                         timeout=60)
            except AssertionError:
                self.stop_all()
                raise
            if not self.a_member_exited():
                return
            lost = self.port_collision()
            self.stop_all()
            if not lost:
                raise AssertionError(f"an etcd member exited at start; logs in {self.dir}")
            for n in self.names:
                shutil.rmtree(f"{self.dir}/{n}", ignore_errors=True)
        raise AssertionError(f"etcd's ports were taken {attempts} times in a row")

    def a_member_exited(self):
        return any(p.poll() is not None for p in self.procs.values())

    def port_collision(self):
        for n in self.names:
            with open(f"{self.dir}/{n}.log", errors="replace") as f:
                if "address already in use" in f.read():
                    return True
        return False

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = {}
        for n in self.names:  # a new attempt's logs start empty
            open(f"{self.dir}/{n}.log", "w").close()

    def start(self, name, state="existing"):
        i = self.names.index(name)
        cluster = ",".join(f"{n}=http://127.0.0.1:{p}" for n, p in zip(self.names, self.peer))
        url = f"{self.scheme}://{self.host}:{self.client[i]}"
        tls = []
        if self.tls:
            tls = ["--cert-file", f"{self.dir}/server.pem", "--key-file", f"{self.dir}/server.key",
                   "--trusted-ca-file", self.certs["ca"], "--client-cert-auth"]
        self.procs[name] = subprocess.Popen(
            [*self.inside, "etcd", "--name", name, "--data-dir", f"{self.dir}/{name}",
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[i]}",
             "--initial-cluster", cluster, "--initial-cluster-state", state, *tls, *self.extra],
            stdout=subprocess.DEVNULL, stderr=open(f"{self.dir}/{name}.log", "a"))

    def kill(self, name):
        self.procs[name].kill()
        self.procs[name].wait()

    def endpoints(self, order=None):
        """--rdzv_endpoint for the members, in the order of the names in `order` if given."""
        ports = [self.client[self.names.index(n)] for n in order] if order else self.client
        return ",".join(f"{self.host}:{c}" for c in ports)

    def etcdctl_command(self, *args, user=None, member=None):
        ports = [self.client[self.names.index(member)]] if member else self.client
        cmd = [*self.inside, "etcdctl", "--endpoints",
               ",".join(f"{self.scheme}://{self.host}:{c}" for c in ports), *args]
        if self.tls:
            cmd += ["--cacert", self.certs["ca"], "--cert", self.certs["cert"],
                    "--key", self.certs["key"]]
        if user:
            cmd += ["--user", user]
        return cmd

    def etcdctl(self, *args, user=None):
        return subprocess.run(self.etcdctl_command(*args, user=user), capture_output=True,
                              text=True, timeout=20, env={**os.environ, "ETCDCTL_API": "3"})

    def history(self, prefix, member):
        """A watch of every change under `prefix` from now on, through `member` (etcdctl, JSON lines
        on its stdout): terminate() it, then changes() its output."""
        return subprocess.Popen(self.etcdctl_command("watch", "--prefix", prefix, "-w", "json",
                                                     member=member),
                                stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "ETCDCTL_API": "3"})

    def status(self):
        r = self.etcdctl("endpoint", "status", "-w", "json")
        return json.loads(r.stdout) if r.stdout.strip() else []

    def healthy(self):
        return len(self.status()) == len(self.names)

    def leader(self):
        for s in self.status():
            if s["Status"]["header"]["member_id"] == s["Status"].get("leader"):
                port = int(s["Endpoint"].rsplit(":", 1)[1])
                return self.names[self.client.index(port)]
        raise AssertionError("no etcd leader")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)


def changes(watch_output):
    """(revision, key, value or None for a deletion) of each event in an etcdctl JSON watch's
    output, in the order etcd made them."""
    out = []
    for line in watch_output.splitlines():
        if not line.strip().startswith("{"):
            continue
        for ev in json.loads(line).get("Events") or []:
            kv = ev["kv"]
            value = None if ev.get("type") == 1 else base64.b64decode(kv.get("value", "")).decode()
            out.append((kv["mod_revision"], base64.b64decode(kv["key"]).decode(), value))
    return out
