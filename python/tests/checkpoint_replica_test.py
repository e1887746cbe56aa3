"""ddprun.checkpoint without a job, two local ranks of one node as two processes: state saved with
replicated= is held once, in local rank 0's slot (local rank 1's region holds a reference and its
own tensors), and both ranks load exactly what they saved (empty and 0-dim tensors too; a step
saved twice, the state changed between, matches each save with its own); a replicated tensor that differs
between the ranks is refused at the save, naming it; the holder's slot altered after the save, or
gone, is refused at the load with the caller's tensors untouched; a holder that saved without
replicated= leaves the other rank holding its state itself, with a warning.

    checkpoint_replica_test.py PACKAGE_DIR    (the folder holding the ddprun package)
"""
import mmap
import os
import shutil
import struct
import subprocess
import sys
import tempfile

RANK = r"""
import os, sys, warnings, torch
sys.path.insert(0, sys.argv[1])
from ddprun import checkpoint
rank, mode = int(os.environ["RANK"]), sys.argv[2]
shared = torch.arange(1 << 20, dtype=torch.float32) * 0.5
if mode == "differ" and rank == 1:
    shared[777] = -1.0
if mode == "twice" and os.environ.get("DDPRUN_CHECKPOINT_STEP"):
    shared *= 2  # what the second save of the step held
state = {"model": {"w": shared, "b": torch.ones(3, dtype=torch.bfloat16), "e": torch.empty(0),
                   "z": torch.tensor(3.5)},
         "rng": torch.full((5,), float(rank))}
if os.environ.get("DDPRUN_CHECKPOINT_STEP"):
    live = {"model": {"w": torch.zeros(1 << 20), "b": torch.zeros(3, dtype=torch.bfloat16),
                      "e": torch.empty(0), "z": torch.tensor(0.0)},
            "rng": torch.zeros(5)}
    try:
        step, got = checkpoint.load(into=live)
    except checkpoint.CheckpointError as e:
        untouched = all(not t.any() for t in (live["model"]["w"], live["model"]["b"],
                                              live["model"]["z"], live["rng"]))
        print("refused", "untouched" if untouched else "overwritten", e)
        sys.exit(0)
    exact = all(torch.equal(got["model"][k], state["model"][k]) for k in state["model"]) and \
        torch.equal(got["rng"], state["rng"])
    print("loaded", step, "exact" if exact and got["rng"] is live["rng"] else "DIFFERENT")
    sys.exit(0)
with warnings.catch_warnings(record=True) as said:
    warnings.simplefilter("always")
    try:
        if mode in ("twice", "again"):  # the same step saved twice ("twice": the state changed
            checkpoint.save(4, state, replicated=("model",))  # between: the second save matches
            if mode == "twice":  # the holder's second)
                shared *= 2
        checkpoint.save(4, state, replicated=False if mode == "holder_plain" and rank == 0
                        else ("model",))
    except checkpoint.CheckpointError as e:
        print("refused", e)
        sys.exit(0)
print("saved", " | ".join(str(w.message) for w in said))
"""


def ranks(package, folder, mode, load=False):
    """Runs local ranks 0 and 1 at once; their outputs."""
    procs = []
    for r in (0, 1):
        env = {**os.environ, "DDPRUN_CHECKPOINT_DIR": folder, "RANK": str(r), "LOCAL_RANK": str(r),
               "DDPRUN_CHECKPOINT_SLOT": str(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "DDPRUN_CHECKPOINT_SLOTS": "2", "TORCHELASTIC_RUN_ID": "replica-test"}
        if load:
            env["DDPRUN_CHECKPOINT_STEP"] = "4"
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, package, mode], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def allocated(path):
    return os.stat(path).st_blocks * 512


def alter_holders_tile(folder):
    """Flips a byte of the replicated tensor in local rank 0's committed slot of step 4."""
    with open(os.path.join(folder, "rank0"), "r+b") as f, mmap.mmap(f.fileno(), 0) as region:
        slot = [s for s in (0, 1) if struct.unpack_from("<Qq", region, 64 + 64 * s) == (2, 4)][0]
        meta = struct.unpack_from("<Q", region, 64 + 64 * slot + 40)[0]
        at = 4096 + slot * struct.unpack_from("<Q", region, 8)[0] + (meta + 63) // 64 * 64 + 100
        region[at] ^= 0x01


def digests(folder, local_rank):
    """The state digests of the committed slots of step 4 in a local rank's region."""
    with open(os.path.join(folder, f"rank{local_rank}"), "rb") as f:
        head = f.read(4096)
    return [struct.unpack_from("<Q", head, 328 + 8 * s)[0] for s in (0, 1)
            if struct.unpack_from("<Qq", head, 64 + 64 * s) == (2, 4)]


def main():
    package = sys.argv[1]
    folder = tempfile.mkdtemp(dir="/dev/shm")
    try:
        saved = ranks(package, folder, "same")
        assert saved == ["saved", "saved"], saved
        holder, other = (allocated(os.path.join(folder, f"rank{r}")) for r in (0, 1))
        # 4 MiB replicated: local rank 0's two slots hold it; local rank 1's hold a reference.
        assert holder >= 8 << 20 and other <= (2 << 20) + 4096, (holder, other)
        assert ranks(package, folder, "same", load=True) == ["loaded 4 exact"] * 2

        alter_holders_tile(folder)
        loaded = ranks(package, folder, "same", load=True)
        assert loaded[1].startswith("refused untouched") and "do not hold intact" in loaded[1], \
            loaded
        alter_holders_tile(folder)  # put back: loads again
        assert ranks(package, folder, "same", load=True) == ["loaded 4 exact"] * 2
        os.rename(os.path.join(folder, "rank0"), os.path.join(folder, "elsewhere"))
        gone = ranks(package, folder, "same", load=True)
        assert gone[1].startswith("refused untouched") and "global rank 0's slot" in gone[1], gone
        shutil.rmtree(folder)

        folder = tempfile.mkdtemp(dir="/dev/shm")
        assert ranks(package, folder, "twice") == ["saved", "saved"]
        assert ranks(package, folder, "twice", load=True) == ["loaded 4 exact"] * 2
        # Two states of step 4: two digests in each rank's region (the agents restore neither).
        for r in (0, 1):
            two = digests(folder, r)
            assert len(two) == 2 and two[0] != two[1] and all(d >> 32 == 1 for d in two), (r, two)
        shutil.rmtree(folder)

        # One state saved twice as step 4: one digest, though the holder's two payloads (their
        # ordinals) and so their checksums differ.
        folder = tempfile.mkdtemp(dir="/dev/shm")
        assert ranks(package, folder, "again") == ["saved", "saved"]
        for r in (0, 1):
            two = digests(folder, r)
            assert len(two) == 2 and two[0] == two[1] and two[0] >> 32 == 1, (r, two)
        with open(os.path.join(folder, "rank0"), "rb") as f:
            head = f.read(4096)
        assert struct.unpack_from("<Q", head, 64 + 24)[0] != \
            struct.unpack_from("<Q", head, 128 + 24)[0], "the holder's checksums should differ"
        shutil.rmtree(folder)

        folder = tempfile.mkdtemp(dir="/dev/shm")
        differ = ranks(package, folder, "differ")
        assert differ[0] == "saved" and differ[1].startswith("refused") and \
            "replicated tensor 0 (of shape (1048576,), torch.float32) differs from local rank " \
            "0's" in differ[1], differ
        shutil.rmtree(folder)

        folder = tempfile.mkdtemp(dir="/dev/shm")
        plain = ranks(package, folder, "holder_plain")
        assert plain[0] == "saved" and "saved step 4 without replicated=" in plain[1] and \
            "holds its replicated state itself" in plain[1], plain
        assert allocated(os.path.join(folder, "rank1")) >= 8 << 20
        assert ranks(package, folder, "holder_plain", load=True) == ["loaded 4 exact"] * 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print("replicated state held once per node (local rank 1's region a reference), loaded exactly "
          "by both ranks; a step saved twice has one state digest per state (not per payload); a "
          "differing replicated tensor refused at the save by name; an altered "
          "or missing holder refused at the load, the caller's tensors untouched; a holder "
          "saving without replicated= leaves the other rank holding its own: passed")


if __name__ == "__main__":
    main()
