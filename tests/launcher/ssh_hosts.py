"""Hosts reachable over real ssh, made (and removed) by a test: a head namespace holding a bridge, and
N host namespaces on it, each with its own address, its veth named eth0, and a real OpenSSH sshd
that accepts only a key the test generates. Every namespace shares this machine's filesystem and
process table, as hosts of a cluster share a home directory.

    with SshHosts(3) as hosts:            # hosts.addrs: ["10.215.0.2", ...]
        hosts.head(["ddprun", "-H", ...], ssh_options...)
"""
import os
import shutil
import subprocess
import tempfile
import time

from netns import bridge_hosts, remove_namespaces

SSHD = "/usr/sbin/sshd"


def available():
    """Why these hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen"), shutil.which("ip")):
        if not tool or not os.path.exists(tool):
            return "needs openssh-server, openssh-client and iproute2"
    return None


class SshHosts:
    NET = "10.215.0"

    def __init__(self, count, without_sshd=0):
        """`count` hosts with sshd, then `without_sshd` more hosts that refuse ssh connections."""
        tag = str(os.getpid())
        self.head_ns = f"dh{tag}"
        self.count, self.total = count, count + without_sshd
        self.names = [f"dh{tag}h{i}" for i in range(self.total)]
        self.addrs = [f"{self.NET}.{i + 2}" for i in range(self.total)]
        self.dir = tempfile.mkdtemp(prefix="ddprun-ssh-")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.sshd = []

    def __enter__(self):
        try:
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _setup(self):
        bridge_hosts(self.head_ns, self.names, self.NET, self.addrs)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key], check=True)
        host_key = os.path.join(self.dir, "host_key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key], check=True)
        shutil.copy(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))
        os.makedirs("/run/sshd", exist_ok=True)
        for i in range(self.count):
            config = os.path.join(self.dir, f"sshd_config{i}")
            with open(config, "w") as f:
                f.write(f"ListenAddress {self.addrs[i]}\nPort 22\nHostKey {host_key}\n"
                        f"PidFile none\nAuthorizedKeysFile {self.dir}/authorized_keys\n"
                        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                        "LogLevel INFO\n")
            p = subprocess.Popen(["ip", "netns", "exec", self.names[i], SSHD, "-D", "-e", "-f",
                                  config], stderr=subprocess.PIPE, text=True)
            self.sshd.append(p)
            # sshd says so once it listens: no polling of the port.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                line = p.stderr.readline()
                if not line:
                    raise RuntimeError(f"sshd in {self.names[i]} exited: {p.wait()}")
                if "Server listening" in line:
                    break
            else:
                raise RuntimeError("sshd did not start within 20 s")

    def ssh_flags(self, key=None):
        """The ddprun options that reach these hosts: the test's key (or `key`), no known_hosts
        prompt."""
        return [f"--ssh_identity={key or self.key}", "--ssh_option=StrictHostKeyChecking=no",
                "--ssh_option=UserKnownHostsFile=/dev/null", "--ssh_option=LogLevel=ERROR"]

    def head(self, args, **kw):
        """Starts `args` in the head namespace (it reaches every host; the hosts reach each other)."""
        return subprocess.Popen(["ip", "netns", "exec", self.head_ns, *args], **kw)

    def __exit__(self, *exc):
        for p in self.sshd:
            p.kill()
            p.wait()
        remove_namespaces([self.head_ns, *self.names])
        shutil.rmtree(self.dir, ignore_errors=True)
