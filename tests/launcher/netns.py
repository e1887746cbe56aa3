"""Two network namespaces joined by a veth pair, made (and removed) by a test: hosts with their own
addresses, reachable only from each other."""
import os
import subprocess


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
