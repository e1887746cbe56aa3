"""PyTorch's TCPStore client (1.13: legacy dialect; 2.x: modern) against ddprund: every operation
both have."""
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from ddprund_process import Ddprund  # noqa: E402


def main(binary):
    with Ddprund(binary) as server:
        timeout = datetime.timedelta(seconds=20)
        store = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timeout)
        other = dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=timeout)

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
        # torch 1.13 keeps using the connection after a timeout; the server must not desync it.
        store.set("after_timeout", b"ok")
        assert store.get("after_timeout") == b"ok"
        other.set("never", b"late")
        assert store.get("counter") == b"3"

        # A get that blocks until another client sets the key.
        other.set("late_key", b"value")
        assert store.get("late_key") == b"value"

        # The master-side worker count: init/ keys as TCPStore(world_size=...) sends them.
        members = [dist.TCPStore("127.0.0.1", server.port, world_size=2, is_master=False,
                                 timeout=timeout) for _ in range(2)]
        assert members[0].get("counter") == b"3"

        status, err = server.stop()
        assert status == 0, (status, err)
    print(f"torch {torch.__version__} TCPStore client: every operation passed against ddprund")


if __name__ == "__main__":
    main(sys.argv[1])
