"""ddprun.checkpoint's DCP storage without a job (torch 2): two ranks of one node save through
MemoryStorageWriter (two processes, gloo), and each item they both hold is kept by one of them: the
two slots hold one replica between them; each rank reads its state back exactly, the items the
other rank keeps included. The keeping rank's slot altered is refused before a byte reaches the
caller's tensors (and read again once put back), and so is a slot that is gone. The planning on its own: items DCP chose stay
with that rank, the rest go to the node's rank keeping the fewest bytes, and a plan that lost its
storage_data (a planner of the user's) keeps everything.

    dcp_node_items_test.py PACKAGE_DIR    (the folder holding the ddprun package)
"""
import os
import shutil
import sys
import tempfile

from fresh_package import expect_error, fresh

SIZES = {"big": 1 << 20, "mid": 1 << 18, "small": 1 << 10}  # float32 elements


def state(fill):
    import torch
    return {name: torch.full((n,), fill + i, dtype=torch.float32)
            for i, (name, n) in enumerate(SIZES.items())} | {"position": 40}


def rank_main(rank, package, folder, store, phase):
    """One of the two ranks: saves step 3, or loads it back and checks it."""
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": str(rank), "RANK": str(rank),
                       "DDPRUN_CHECKPOINT_SLOT": str(rank), "WORLD_SIZE": "2",
                       "LOCAL_WORLD_SIZE": "2", "DDPRUN_CHECKPOINT_SLOTS": "2",
                       "TORCHELASTIC_RUN_ID": "job"})
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    ckpt = fresh(package)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        if phase == "save":
            dcp.save(state(1.0), storage_writer=ckpt.MemoryStorageWriter(3))
            return
        os.environ["DDPRUN_CHECKPOINT_STEP"] = "3"
        into = state(-7.0)
        dcp.load(into, storage_reader=ckpt.MemoryStorageReader())
        want = state(1.0)
        assert all(torch.equal(into[k], want[k]) for k in SIZES) and into["position"] == 40
    finally:
        dist.destroy_process_group()


def two_ranks(package, folder, phase):
    import torch.multiprocessing as mp
    store = tempfile.mktemp()
    mp.start_processes(rank_main, args=(package, folder, store, phase), nprocs=2,
                       start_method="spawn")


def rank_1_refused(package, folder, why):
    """Rank 1 alone (no_dist) reads step 3, some of whose items rank 0 keeps: refused, naming
    why, before a byte reaches its tensors."""
    import torch
    import torch.distributed.checkpoint as dcp
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "1", "RANK": "1",
                       "DDPRUN_CHECKPOINT_SLOT": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "DDPRUN_CHECKPOINT_SLOTS": "2", "TORCHELASTIC_RUN_ID": "job",
                       "DDPRUN_CHECKPOINT_STEP": "3"})
    ckpt = fresh(package)
    into = state(-7.0)
    expect_error(lambda: dcp.load(into, storage_reader=ckpt.MemoryStorageReader(), no_dist=True),
                 why, kind=None)
    untouched = state(-7.0)
    assert all(torch.equal(into[k], untouched[k]) for k in SIZES), \
        "the caller's tensors were overwritten"


def planning(package):
    """keepers() on DCP's own plans of four ranks on two nodes."""
    import dataclasses
    import torch
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
    fresh(package)
    from ddprun import _dcp_node_items as node_items
    plans = []
    for rank in range(4):
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank % 2),
                           "DDPRUN_CHECKPOINT_SLOT": str(rank % 2), "DDPRUN_CHECKPOINT_SLOTS": "2"})
        planner = DefaultSavePlanner()
        planner.set_up_planner({k: torch.zeros(n) for k, n in SIZES.items()}, None, rank == 0)
        plans.append(node_items.held(planner.create_local_plan()))
    final, _ = DefaultSavePlanner().create_global_plan(plans)
    chosen = {item.index.fqn: n for n, p in enumerate(final) for item in p.items}
    assert sorted(chosen) == sorted(SIZES), chosen
    kept = node_items.keepers(final)
    for ranks in ((0, 1), (2, 3)):
        keeps = {n: {index.fqn for index, _ in final[n].storage_data.items} -
                 {index.fqn for index in node_items.kept_elsewhere(kept[n])} for n in ranks}
        # Each item once on the node, and where DCP chose one of the node's ranks, that rank.
        assert sorted(keeps[ranks[0]] | keeps[ranks[1]]) == sorted(SIZES) and \
            not keeps[ranks[0]] & keeps[ranks[1]], keeps
        assert all(fqn in keeps[n] for fqn, n in chosen.items() if n in ranks), (chosen, keeps)
        assert all(set(node_items.kept_elsewhere(kept[n]).values()) <= set(ranks) for n in ranks)
    # A planner that lost the storage_data: every rank keeps everything.
    bare = [dataclasses.replace(p, storage_data=None) for p in final]
    assert all(node_items.kept_elsewhere(p) == {} for p in node_items.keepers(bare))


def main():
    package = sys.argv[1]
    import torch
    if torch.__version__ < "2":
        print("torch.distributed.checkpoint's storage needs torch 2: skipped")
        sys.exit(77)
    planning(package)
    folder = tempfile.mkdtemp(dir="/dev/shm")
    try:
        two_ranks(package, folder, "save")
        replica = 4 * sum(SIZES.values())
        slots = [os.path.getsize(os.path.join(folder, f"rank{r}")) for r in (0, 1)]
        # Two slots a region: four slots of the replica's size without the keeping, two with it.
        assert 2 * replica <= sum(slots) < 3 * replica, (slots, replica)
        two_ranks(package, folder, "load")

        path = os.path.join(folder, "rank0")
        with open(path, "r+b") as f:  # a byte of one of rank 0's tensors (1.0, 2.0 or 3.0 each)
            data = f.read()
            at = min(i for i in (data.find(bytes.fromhex(fill) * 16, 4096) for fill in
                                 ("0000803f", "00000040", "00004040")) if i > 0) + 8
            f.seek(at)
            f.write(bytes([data[at] ^ 0xFF]))
        rank_1_refused(package, folder, "which this node's regions do not hold intact")
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(bytes([data[at]]))
        two_ranks(package, folder, "load")  # put back: read again
        os.remove(path)
        rank_1_refused(package, folder, "which this node's regions do not hold intact")
    finally:
        shutil.rmtree(folder)  # (rank 1's region and the budget's lock file, in /dev/shm)
    print(f"two ranks' DCP saves kept one replica of the {replica} bytes between them (regions "
          f"{slots[0]} and {slots[1]} bytes, two slots each), each rank read its own state back "
          f"exactly; the other rank's slot altered or gone was refused, the caller's tensors "
          f"untouched; planning keeps DCP's choices and every item once a node: passed")


if __name__ == "__main__":
    main()
