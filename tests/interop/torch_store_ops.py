"""PyTorch's TCPStore client against ddprund: every operation the client has (torch 1.13 speaks the
legacy dialect; torch 2.x the modern one and adds check, append, multi_get and multi_set).

    torch_store_ops.py DDPRUND [PYTHON]

starts ddprund here and runs the client part of this file under PYTHON (default: this python; e.g.
scripts/torch2/python for torch 2.6), which only needs to reach ddprund's port.
"""
import datetime
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def client(port):
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=20)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    other = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)

    store.set("ab", b"xy")
    assert other.get("ab") == b"xy"
    store.set("bin", bytes(range(256)))
    assert other.get("bin") == bytes(range(256))

    assert store.add("counter", 5) == 5
    assert other.add("counter", -2) == 3
    assert store.get("counter") == b"3"

    assert store.compare_set("cas", "", "first") == b"first"
    assert store.compare_set("missing", "guess", "x") == b"guess"
    assert store.compare_set("cas", "wrong", "x") == b"first"
    assert store.compare_set("cas", "first", "second") == b"second"

    before = store.num_keys()
    assert store.delete_key("ab") is True
    assert store.delete_key("ab") is False
    assert store.num_keys() == before - 1

    store.wait(["counter", "cas"])
    start = time.monotonic()
    try:
        store.wait(["never"], datetime.timedelta(milliseconds=300))
        raise AssertionError("wait on a missing key returned")
    except RuntimeError:
        pass
    assert time.monotonic() - start >= 0.29
    # The client keeps using the connection after a timeout; the server must not desync it.
    store.set("after_timeout", b"ok")
    assert store.get("after_timeout") == b"ok"
    other.set("never", b"late")
    assert store.get("counter") == b"3"

    # A get that blocks until another client sets the key.
    other.set("late_key", b"value")
    assert store.get("late_key") == b"value"

    modern = torch.__version__ >= "2"
    if modern:
        assert store.check(["counter", "cas"]) is True
        assert store.check(["counter", "absent"]) is False
        store.append("log", b"a")
        other.append("log", b"bc")
        assert store.get("log") == b"abc"
        store.multi_set(["m1", "m2", "m3"], [b"1", b"", b"\x00\xff"])
        assert other.multi_get(["m3", "m1", "m2"]) == [b"\x00\xff", b"1", b""]

    # The master-side worker count: init/ keys as TCPStore(world_size=...) sends them.
    members = [dist.TCPStore("127.0.0.1", port, world_size=2, is_master=False, timeout=timeout)
               for _ in range(2)]
    assert members[0].get("counter") == b"3"
    extra = " (with check, append, multi_get, multi_set)" if modern else ""
    print(f"torch {torch.__version__} TCPStore client: every operation passed against ddprund{extra}")


def main(binary, python):
    from ddprund_process import Ddprund

    with Ddprund(binary) as server:
        r = subprocess.run([python, os.path.abspath(__file__), "--client", str(server.port)],
                           timeout=120)
        status, err = server.stop()
        assert r.returncode == 0, "the client failed"
        assert status == 0, (status, err)


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        client(int(sys.argv[2]))
    else:
        main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else sys.executable)
