"""A DCP save's replicated items held once per node (MemoryStorageWriter, MemoryStorageReader).

DCP writes an item that several ranks hold (the same MetadataIndex: DDP's parameters and optimizer
state, HSDP's replicated shards, a step counter) on one rank of the job only, and reads it back
from there. A rank's region must restore from its own node's memory, so each node keeps one copy
of every item its ranks hold: the rank DCP chose where it is on the node (the persisted layout's
.metadata points there), else the node's rank with the fewest bytes kept so far. Every other rank
of the node keeps a reference instead of the bytes, ("at", the keeper's global rank), so a node of
N DDP ranks holds, sends and persists one replica, not N. A "node" here is an agent, whose ranks
share its folder of regions: under srun or mpirun each task is one of its own.

The coordinator decides in prepare_global_plan, from what each rank said it holds in its local
plan's storage_data (a planner that drops storage_data leaves every rank keeping everything). Ranks
are numbered by agent, so a rank's agent is named by its first rank (_replica.holder_rank). A
reference names the save by (TORCHELASTIC_RESTART_COUNT, this process's count of DCP saves), the
same on every rank of one dcp.save; the reader takes the keeper's slot of the same step, run, world
size and save from the node's regions, checks its checksum before a byte is copied and that it was
not overwritten after, and refuses (naming the rank) where the node does not hold it. As with DCP's
own reads, a replicated item is taken to be the same on every rank that holds it.
"""
import dataclasses
import mmap
import os
from collections import defaultdict

from ddprun import _replica
from ddprun import checkpoint as _ckpt

_saves = 0  # this process's DCP saves into memory so far



def _restarted():
    """An in-process restart (ddprun.inprocess): saves count from the attempt's start, as in a
    process started for it."""
    global _saves
    _saves = 0

@dataclasses.dataclass(frozen=True)
class Held:
    """What a rank's local plan holds (its storage_data on the way to the coordinator)."""
    rank: int
    node: int  # the global rank of its agent's local rank 0 (_replica.holder_rank)
    items: tuple  # ((MetadataIndex, bytes), ...)


@dataclasses.dataclass(frozen=True)
class KeptElsewhere:
    """What the coordinator gives back (the final plan's storage_data): {index: keeper's rank}."""
    at: dict


def held(plan):
    """`plan` (a rank's local plan) saying which items it holds, for the coordinator."""
    items = tuple((item.index, (item.tensor_storage_size() or 1)
                   if hasattr(item, "tensor_storage_size") else 1) for item in plan.items)
    return dataclasses.replace(plan, storage_data=Held(_ckpt._my_rank(), _replica.holder_rank(),
                                                       items))


def keepers(plans):
    """The global plans (DCP's, deduplicated across the job) with each one's KeptElsewhere: every
    item held by several ranks of a node kept by one of them. Unchanged where a plan lost what
    held() put in it."""
    said = [p.storage_data for p in plans]
    if not all(isinstance(s, Held) for s in said):
        return plans
    chosen = {item.index: n for n, p in enumerate(plans) for item in p.items}
    kept = [0] * len(plans)  # bytes each rank keeps, DCP's choices first
    for n, s in enumerate(said):
        sizes = dict(s.items)
        kept[n] = sum(sizes[item.index] for item in plans[n].items if item.index in sizes)
    at = [{} for _ in plans]
    by_node = defaultdict(list)
    for n, s in enumerate(said):
        by_node[s.node].append(n)
    for members in by_node.values():
        holders, sizes = defaultdict(list), {}
        for n in members:
            for index, size in said[n].items:
                holders[index].append(n)
                sizes[index] = size
        for index, ns in holders.items():
            if len(ns) < 2:
                continue
            keeper = chosen.get(index)
            if keeper not in ns:
                keeper = min(ns, key=lambda n: (kept[n], n))
                kept[keeper] += sizes[index]
            for n in ns:
                if n != keeper:
                    at[n][index] = said[keeper].rank
    return [dataclasses.replace(p, storage_data=KeptElsewhere(a)) for p, a in zip(plans, at)]


def kept_elsewhere(plan):
    """{index: keeper's global rank} for the items of this rank's final plan's save that another
    rank of the node keeps."""
    return plan.storage_data.at if isinstance(plan.storage_data, KeptElsewhere) else {}


def next_save():
    """This save's identity: every rank of one dcp.save counts it alike."""
    global _saves
    _saves += 1
    return (int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), _saves)


class Keeper:
    """Rank `rank`'s slot of the save `committed` (this rank's verified slot) names, from the node's
    regions, its checksum checked: the items' places in it, and whether it is still that slot."""

    def __init__(self, committed, rank, save):
        self.rank = rank
        for holder, slot, record in _replica.node_slots(committed, rank):
            structure, _ = holder.read(slot, record)
            if structure[0] != "dcp" or len(structure) < 4 or structure[3] != save:
                continue
            m = mmap.mmap(holder.fd, _ckpt.HEADER + 2 * holder.slot_size, flags=mmap.MAP_SHARED)
            base = _ckpt.HEADER + slot * holder.slot_size
            self._seen = _replica.slot_identity(m, slot)
            if self._seen[0] == record and _ckpt._crc(m, base, record[2]) == record[3]:
                self.map, self.slot, self.places = m, slot, structure[2]
                self.data_start = base + _ckpt._up(record[5], _ckpt._ALIGN)
                return
            m.close()
        folder = _ckpt._region_dir()
        raise _ckpt.CheckpointError(
            f"checkpoint: step {committed.step}: items of this rank's DCP state are kept by global "
            f"rank {rank}'s slot, which this node's regions do not hold intact ({folder}; a job "
            f"started again with another --nproc_per_node?): refused")

    def still_there(self):
        return _replica.slot_identity(self.map, self.slot) == self._seen

    def close(self):
        self.map.close()
