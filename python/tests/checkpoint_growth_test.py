"""ddprun.checkpoint without a job: a worker killed during its first save into a grown region
leaves `rank<L>.new`; the next worker's growth must not fail on it (it did, on O_EXCL, in every
attempt after: a crash loop), and the state saved and loaded is the grown one.

    checkpoint_growth_test.py PACKAGE_DIR
"""
import os
import sys
import tempfile

from fresh_package import run


def main():
    sys.path.insert(0, sys.argv[1])
    folder = tempfile.mkdtemp(dir="/dev/shm")
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "0", "RANK": "0",
                       "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "job"})
    import torch
    from ddprun import checkpoint
    checkpoint.save(1, {"w": torch.zeros(16)})
    # What a kill during the first save into a grown region leaves behind.
    with open(os.path.join(folder, "rank0.new"), "wb") as f:
        f.write(b"\0" * 4096)
    checkpoint.save(2, {"w": torch.arange(float(4 << 20))})  # outgrows the slots
    assert not os.path.exists(os.path.join(folder, "rank0.new"))
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "2"
    checkpoint._region = None  # as a new worker finds it
    step, state = checkpoint.load()
    assert step == 2 and torch.equal(state["w"], torch.arange(float(4 << 20)))
    print("a region grown past a stale rank0.new that a killed save left: saved and loaded: passed")


if __name__ == "__main__":
    run(main)
