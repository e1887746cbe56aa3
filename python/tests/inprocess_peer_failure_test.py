"""ddprun.inprocess without a job: which failures of a training wait for the agent's abort. What a
real gloo collective raises when its peer's process ends is a peer's failure (it waits); a real
error of the training's own, a RuntimeError too, is not (it is this rank's failure at once).

    inprocess_peer_failure_test.py PACKAGE_DIR
"""
import os
import socket
import subprocess
import sys

PEER = """
import os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", rank=1, world_size=2)
dist.all_reduce(torch.ones(4))
os._exit(1)
"""


def collective_error():
    """What rank 0's second all-reduce raises once rank 1's process ended after the first."""
    import torch
    import torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    peer = subprocess.Popen([sys.executable, "-c", PEER])
    try:
        dist.init_process_group("gloo", rank=0, world_size=2)
        dist.all_reduce(torch.ones(4))
        assert peer.wait(timeout=60) == 1
        try:
            dist.all_reduce(torch.ones(4))
        except RuntimeError as e:
            return e
        raise AssertionError("the all-reduce with a peer gone did not fail")
    finally:
        peer.kill()
        peer.wait()


def main():
    sys.path.insert(0, sys.argv[1])
    from ddprun import inprocess
    import torch
    e = collective_error()
    assert inprocess._peer_failure(e), f"{type(e).__name__}: {e}"
    try:
        torch.ones(2, 3) @ torch.ones(2, 3)
    except RuntimeError as own:
        assert not inprocess._peer_failure(own), f"{type(own).__name__}: {own}"
    assert not inprocess._peer_failure(ValueError("Connection reset by peer"))
    try:  # a wrapper of the training's own around the collective's error
        try:
            raise e
        except RuntimeError as inner:
            raise ValueError("the step failed") from inner
    except ValueError as wrapped:
        assert inprocess._peer_failure(wrapped)
    print(f"a gone peer's all-reduce error waits for the abort ({type(e).__name__}: "
          f"{str(e)[:80]}...), a shape error of the training's own does not: passed")


if __name__ == "__main__":
    main()
