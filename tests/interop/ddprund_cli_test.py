"""ddprund as a user runs it: port 0, the modern handshake on the wire, signals, bad flags, a busy port."""
import os
import signal
import socket
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from ddprund_process import Ddprund  # noqa: E402


def modern_ping(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"\x00" + struct.pack("<I", 0x3C85F7CE) + b"\x0d" + struct.pack("<I", 4242))
        reply = s.recv(4)
        assert struct.unpack("<I", reply)[0] == 4242, reply


def main(binary):
    for sig in (signal.SIGTERM, signal.SIGINT):
        with Ddprund(binary) as d:
            modern_ping(d.port)
            d.proc.send_signal(sig)
            assert d.proc.wait(10) == 0, f"exit status after {sig.name}"
            assert "shutting down" in d.proc.stderr.read()

    bad = subprocess.run([binary, "--port", "0", "--no-such-flag"], capture_output=True, text=True,
                         timeout=10)
    assert bad.returncode == 2, bad
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr

    missing = subprocess.run([binary], capture_output=True, text=True, timeout=10)
    assert missing.returncode == 2 and "--port" in missing.stderr, missing

    with Ddprund(binary) as d:
        busy = subprocess.run([binary, "--host", "127.0.0.1", "--port", str(d.port)],
                              capture_output=True, text=True, timeout=10)
        assert busy.returncode == 1, busy
        assert "cannot listen on 127.0.0.1:%d" % d.port in busy.stderr, busy.stderr
        modern_ping(d.port)  # the running daemon is unaffected
    print("ddprund CLI: passed")


if __name__ == "__main__":
    main(sys.argv[1])
