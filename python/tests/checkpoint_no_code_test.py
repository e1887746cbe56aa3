"""ddprun.checkpoint without a job: no code runs from a checkpoint. A forged plain-API slot whose
structure, unpickled, would run a command (create a file) is refused at load, naming what it
holds, and the file never appears; a type of the user's own is refused until checkpoint.allow()
lets it in.

    checkpoint_no_code_test.py PACKAGE_DIR
"""
import os
import pickle
import sys
import tempfile

from fresh_package import run


class Position:
    """A value of the user's own type in the state."""

    def __init__(self, at):
        self.at = at


def main():
    sys.path.insert(0, sys.argv[1])
    folder = tempfile.mkdtemp(dir="/dev/shm")
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "0", "RANK": "0",
                       "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "job",
                       "DDPRUN_CHECKPOINT_STEP": "5"})
    import torch
    from ddprun import checkpoint
    marker = os.path.join(folder, "pwned")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    # A slot written as a save writes one, its structure replaced by one that runs a command
    # (checksum and all: whoever can write a copy can compute those).
    meta = pickle.dumps(("plain", {"x": Evil()}, []), protocol=4)
    save = checkpoint._Save(5, len(meta) + 64, 0.0)
    save.map[save.base:save.base + len(meta)] = meta
    size = checkpoint._up(len(meta), 8)
    save.commit(size, len(meta), checkpoint._crc(save.map, save.base, size))
    try:
        checkpoint.load()
        raise AssertionError("a forged structure was loaded")
    except checkpoint.CheckpointError as e:
        assert "system" in str(e) and "does not unpickle" in str(e), e
    assert not os.path.exists(marker), "the forged checkpoint ran a command"

    # A type of the user's own: refused, until allowed.
    checkpoint.save(6, {"w": torch.ones(3), "position": Position(17)})
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "6"
    try:
        checkpoint.load()
        raise AssertionError("an unknown type was loaded")
    except checkpoint.CheckpointError as e:
        assert "Position" in str(e) and "checkpoint.allow" in str(e), e
    checkpoint.allow(Position)
    step, state = checkpoint.load()
    assert step == 6 and state["position"].at == 17 and torch.equal(state["w"], torch.ones(3))
    # torch's own values in the state (torch 2.x pickles a layout through a function of torch's).
    values = {"layout": torch.sparse_coo, "strided": torch.strided, "dtype": torch.bfloat16,
              "format": torch.channels_last, "size": torch.Size([2, 3])}
    checkpoint.save(7, dict(values, w=torch.zeros(2)))
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "7"
    step, state = checkpoint.load()
    assert step == 7 and all(state[k] == v for k, v in values.items()), state

    print("a forged checkpoint that would run a command is refused and runs nothing; torch's "
          "layouts, dtypes, memory formats and sizes load; a type of the user's own loads once "
          "checkpoint.allow() lets it: passed")


if __name__ == "__main__":
    run(main)
