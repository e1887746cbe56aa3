"""Two network namespaces joined by a veth pair, made (and removed) by a test: hosts with their own
addresses, reachable only from each other."""
import os
import subprocess
import sys


class NamespacePair:
    ADDRS = ("10.213.0.1", "10.213.0.2")

    def __init__(self):
        tag = str(os.getpid())
        self.names = (f"ddp{tag}a", f"ddp{tag}b")
        self.links = (f"vd{tag}a", f"vd{tag}b")

    def __enter__(self):
        """Raises OSError-like errors when namespaces cannot be made here (not root, no iproute2)."""
        self._ip("netns", "add", self.names[0])
        self._ip("netns", "add", self.names[1])
        self._ip("link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1])
        for i in (0, 1):
            self._ip("link", "set", self.links[i], "netns", self.names[i])
            self._ip("-n", self.names[i], "addr", "add", f"{self.ADDRS[i]}/24", "dev", self.links[i])
            self._ip("-n", self.names[i], "link", "set", self.links[i], "up")
            self._ip("-n", self.names[i], "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)

    def run_in(self, i, cmd, **kw):
        """Starts `cmd` inside namespace i."""
        return subprocess.Popen(["ip", "netns", "exec", self.names[i], *cmd], **kw)

    def cut(self, i):
        self._ip("-n", self.names[i], "link", "set", self.links[i], "down")

    @staticmethod
    def _ip(*args):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def bridge_hosts(head_ns, host_ns, net, addrs):
    """Namespace `head_ns` with a bridge br0 at `net`.1/24, and each namespace of `host_ns` on it
    with its veth named eth0 at the matching address of `addrs`: hosts that reach each other and
    the head. Raises CalledProcessError when a namespace or link cannot be made."""
    ip = NamespacePair._ip
    ip("netns", "add", head_ns)
    ip("-n", head_ns, "link", "set", "lo", "up")
    ip("-n", head_ns, "link", "add", "br0", "type", "bridge")
    ip("-n", head_ns, "addr", "add", f"{net}.1/24", "dev", "br0")
    ip("-n", head_ns, "link", "set", "br0", "up")
    for i, (ns, addr) in enumerate(zip(host_ns, addrs)):
        ip("netns", "add", ns)
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", head_ns, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("-n", head_ns, "link", "set", f"p{i}", "master", "br0")
        ip("-n", head_ns, "link", "set", f"p{i}", "up")
        ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")


def remove_namespaces(names):
    for n in names:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def bridged_job_store(head_ns, host_ns, net, addrs, ddprund):
    """bridge_hosts(), then the job's ddprund in `head_ns` at `net`.1: returns its process and its
    port. Exits 77 (skipped) where namespaces cannot be made here, leaving none behind."""
    try:
        bridge_hosts(head_ns, host_ns, net, addrs)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("network namespaces unavailable here:", e)
        remove_namespaces([head_ns, *host_ns])
        sys.exit(77)
    store = subprocess.Popen(["ip", "netns", "exec", head_ns, ddprund, "--host", f"{net}.1",
                              "--port", "0", "--log-level", "warn"],
                             stdout=subprocess.PIPE, text=True)
    return store, int(store.stdout.readline())
