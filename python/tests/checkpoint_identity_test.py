"""ddprun.checkpoint without a job: a region saved by one global rank, read as another (what a
restore that put the wrong slot in place would do), is refused before any byte reaches the caller;
so is one of another world size than the agents agreed; a rank that the saved world did not have
gets an error naming both sizes, or (None, None) where it asks, unless its process kept an earlier
in-process attempt's state; a standby's save is refused. With torch 2 the same through
MemoryStorageReader.

    checkpoint_identity_test.py PACKAGE_DIR    (the folder holding the ddprun package)
"""
import os
import sys
import tempfile

from fresh_package import expect_error, fresh, run


def main():
    package = sys.argv[1]
    folder = tempfile.mkdtemp(dir="/dev/shm")
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "0", "RANK": "0",
                       "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "job"})
    import torch
    ckpt = fresh(package)
    ckpt.save(3, {"w": torch.arange(8.0), "position": 40})

    os.environ["DDPRUN_CHECKPOINT_STEP"] = "3"
    os.environ["RANK"] = "1"
    ckpt = fresh(package)
    into = {"w": torch.full((8,), -1.0), "position": 0}
    expect_error(lambda: ckpt.load(into=into), "holds global rank 0's state, not this rank's (1)")
    assert torch.equal(into["w"], torch.full((8,), -1.0)), "the caller's tensor was overwritten"

    os.environ["RANK"] = "0"
    os.environ["DDPRUN_CHECKPOINT_WORLD"] = "3"
    ckpt = fresh(package)
    expect_error(ckpt.load, "not of the 3 the agents agreed on")

    # A world grown from 2 to 4: rank 3 has no counterpart; rank 0 gets what rank 0 saved.
    os.environ.update({"DDPRUN_CHECKPOINT_WORLD": "2", "WORLD_SIZE": "4", "RANK": "3"})
    ckpt = fresh(package)
    expect_error(ckpt.load, "rank 3 has no counterpart")
    assert ckpt.load(new_rank="fresh") == (None, None)
    # Not in a process that kept an earlier attempt's state (an in-process restart): it would
    # train on from there while the other ranks started anew. Nor where no step is agreed.
    import importlib
    importlib.import_module("ddprun.inprocess")._carried = "an earlier attempt's training"
    expect_error(lambda: ckpt.load(new_rank="fresh"), "this process holds an earlier attempt's")
    del os.environ["DDPRUN_CHECKPOINT_STEP"]
    expect_error(ckpt.load, "nothing to restore (no step is agreed)")
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "3"
    ckpt = fresh(package)
    os.environ["RANK"] = "0"
    ckpt = fresh(package)
    step, state = ckpt.load()
    assert step == 3 and torch.equal(state["w"], torch.arange(8.0)) and state["position"] == 40
    # A standby (--standby_workers) has no rank yet: its warm-up saving is refused, and local rank
    # 0's region keeps what it held.
    os.environ["DDPRUN_STANDBY"] = "1"
    ckpt = fresh(package)
    expect_error(lambda: ckpt.save(3, {"w": torch.zeros(8), "position": 0}), "is a standby")
    del os.environ["DDPRUN_STANDBY"]
    ckpt = fresh(package)
    step, state = ckpt.load()
    assert step == 3 and torch.equal(state["w"], torch.arange(8.0)) and state["position"] == 40

    if hasattr(torch.distributed, "checkpoint") and torch.__version__ >= "2":
        # The DCP reader refuses another rank's slot too.
        os.environ.update({"WORLD_SIZE": "2", "DDPRUN_CHECKPOINT_WORLD": "2", "RANK": "1"})
        ckpt = fresh(package)
        expect_error(lambda: ckpt.MemoryStorageReader().read_metadata(),
                     "holds global rank 0's state")
    print("a slot read by another rank, or at another world size than agreed, is refused before "
          "a byte reaches the caller; a rank the saved world lacked is told so, or starts afresh: "
          "passed")


if __name__ == "__main__":
    run(main)
