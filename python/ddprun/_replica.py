"""Replicated state held once per node: checkpoint.save(step, state, replicated=...).

Under DDP every rank holds the same parameters and optimizer state; saved rank by rank, a node of N
ranks would hold, persist and send it N times. A "node" here is an agent (its workers, as many as
DDPRUN_CHECKPOINT_SLOTS says, share its folder of regions; under srun or mpirun each task's agent
has one, which holds its state itself). With `replicated`, local rank 0 (the node's holder) lays the
replicated tensors out first in its slot and writes each one's CRC (its tile: its bytes and the
zeros up to the next 64-byte boundary) in the payload's last bytes. Every other local rank (a
referrer) takes the CRC of each of its own replicated tensors, waits for the holder's slot of the
same step and run, and checks that the layout and every CRC match: a mismatch is a CheckpointError
naming the tensor (the state is not the same on every rank, and restoring the holder's would be a
silent wrong answer). It then saves only a reference (the holder's global rank, the tiles' CRCs)
with its other tensors. A holder's and a referrer's saves are matched by their place among their
process's saves with `replicated` (the same call of the training loop), not by step number. Where
the holder saved that step without `replicated`, did not begin it within START_WAIT seconds or
commit it within COMMIT_WAIT, or has saved again since, the referrer saves its replicated tensors
itself (one warning per process): more memory, never a wrong answer.

The agents copy, persist and restore slots by global rank as before. The holder's slot at a step is
its rank's slot at that step, which the agents' agreement on a step requires of every rank; ranks
are numbered by node, so the holder lands on the referrer's node with it. load() finds the holder's
slot among the node's regions and checks every tile's CRC against the reference before a byte
reaches the caller; one it cannot find or that does not match is refused.
"""
import mmap
import os
import struct
import threading
import time
import warnings
import zlib

from ddprun import checkpoint as _ckpt

START_WAIT = 30.0  # seconds a referrer waits for the holder to begin saving the same step
COMMIT_WAIT = 600.0  # and then, at most, for it to commit it
_POLL, _POLL_MAX = 0.0005, 0.01  # the first look after another, and the longest gap
_ordinal = 0
_STAGING = 64 << 20  # the most of a CUDA tensor's bytes brought to the host at once for its CRC
_staging = None
_staging_lock = threading.Lock()
_warned = False


def indices(state, replicated, tensors):
    """The indices in `tensors` (state's tensors, in _flatten's order) that `replicated` names: all
    of them for True, none for a false value, or those under the given top-level keys of a dict."""
    if replicated is True:
        return list(range(len(tensors)))
    if not replicated:
        return []
    if isinstance(replicated, str) or not isinstance(state, dict):
        raise ValueError("checkpoint.save: replicated is True, False, or a collection of the "
                         "state's top-level keys (the state must then be a dict)")
    replicated = list(replicated)
    missing = [k for k in replicated if k not in state]
    if missing:
        raise ValueError(f"checkpoint.save: replicated names {missing}, not keys of the state")
    ids = set()
    for key in replicated:
        part = []
        _ckpt._flatten(state[key], part)
        ids.update(id(t) for t in part)
    return [i for i, t in enumerate(tensors) if id(t) in ids]


def role(shared):
    """"holder", "referrer" or None (nothing replicated, or the only worker of its agent)."""
    if not shared or _ckpt._slots() < 2:
        return None
    return "holder" if _ckpt._slot() == 0 else "referrer"


def holder_rank():
    """The global rank of this agent's local rank 0 (an agent's ranks are consecutive; the only
    worker of its agent, as under srun or mpirun, is its own)."""
    return _ckpt._my_rank() - (_ckpt._slot() if _ckpt._slots() > 1 else 0)


def layout(tensors, order, start=0):
    """Places for tensors[i], i in `order`, laid out one after the other from `start`: {i: place},
    and the end of the last one's tile."""
    places, offset = {}, start
    for i in order:
        t = tensors[i]
        nbytes = t.numel() * t.element_size()
        places[i] = _ckpt._Tensor(offset, nbytes, t.dtype, tuple(t.shape), str(t.device))
        offset = _ckpt._up(offset + nbytes, _ckpt._ALIGN)
    return places, offset


def tile_bounds(places, shared, section):
    """(start, end) of each shared tensor's tile in the section."""
    starts = [places[i].offset for i in shared]
    return list(zip(starts, starts[1:] + [section]))


def trailer_size(shared):
    return _ckpt._up(4 * len(shared), 8)


def holder_sums(m, base, data_start, places, shared, section, payload):
    """The holder's payload CRC (structure, tiles, its other tensors, then the tiles' CRCs, which
    it writes at the payload's end), its bytes all in: one pass, tile by tile."""
    crc = _ckpt._crc(m, base, data_start)
    tiles = []
    for a, b in tile_bounds(places, shared, section):
        tile = _ckpt._crc(m, base + data_start + a, b - a)
        tiles.append(tile)
        crc = _ckpt._crc_combine(crc, tile, b - a)
    trailer_at = payload - trailer_size(shared)
    crc = _ckpt._crc(m, base + data_start + section, trailer_at - data_start - section, crc)
    m[base + trailer_at:base + payload] = struct.pack(f"<{len(tiles)}I", *tiles).ljust(
        payload - trailer_at, b"\0")
    return _ckpt._crc(m, base + trailer_at, payload - trailer_at, crc)


def _tensor_crc(t, pad):
    """The CRC of tensor `t`'s bytes followed by `pad` zeros (a CUDA tensor's through a bounded
    page-locked buffer)."""
    import torch
    src = t.detach()
    if not src.is_contiguous():
        src = src.contiguous()
    flat = (src.view(-1) if src.dim() else src.view(1)).view(torch.uint8)
    n, crc = flat.numel(), 0
    if n and not src.is_cuda:
        crc = _ckpt._crc(flat.numpy(), 0, n)
    elif n:
        global _staging
        chunk = min(n, _STAGING)
        with _staging_lock:
            if _staging is None or _staging.numel() < chunk:  # one buffer per process, grown
                _staging = torch.empty(max(chunk, 1 << 20), dtype=torch.uint8, pin_memory=True)
            for a in range(0, n, chunk):
                b = min(n, a + chunk)
                _staging[:b - a].copy_(flat[a:b])
                crc = _ckpt._crc(_staging.numpy(), 0, b - a, crc)
    return zlib.crc32(bytes(pad), crc) if pad else crc


def _same_layout(mine, theirs, shared):
    return all(theirs[i].offset == mine[i].offset and theirs[i].nbytes == mine[i].nbytes and
               theirs[i].dtype == mine[i].dtype and tuple(theirs[i].shape) == tuple(mine[i].shape)
               for i in shared)


def next_ordinal():
    """This save's place among this process's saves with replicated= (1, 2, ...): a holder's
    and a referrer's saves of the same call of the training loop have the same one, whatever
    their step numbers (a step saved twice is two saves)."""
    global _ordinal
    _ordinal += 1
    return _ordinal


def _restarted():
    """An in-process restart (ddprun.inprocess): saves count from the attempt's start, as in a
    process started for it."""
    global _ordinal
    _ordinal = 0


class _Holder:
    """A holder's region file, open once (a region grown meanwhile replaces the file under its name,
    not this one): its slots' records, structure and tiles, read with pread, or mapped."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)
        self.head = os.pread(self.fd, _ckpt.HEADER, 0)
        self.valid = len(self.head) == _ckpt.HEADER and self.head[:8] == _ckpt.MAGIC
        self.slot_size = struct.unpack_from("<Q", self.head, 8)[0] if self.valid else 0

    def close(self):
        os.close(self.fd)

    def identity(self, slot):
        """A slot's record, rank and run tag as this file has them now."""
        return slot_identity(os.pread(self.fd, _ckpt.HEADER, 0), slot)

    def slots(self, rank, step, run, world, states):
        """[(slot, record)] of `rank` at `step` of run `run` and world size `world` in one of
        `states`, the newest first."""
        if not self.valid:
            return []
        found = []
        for s in (0, 1):
            record, their_rank, their_run = self.identity(s)
            if record[0] in states and record[1] == step and their_rank == rank and \
                    their_run == run and (record[7] == world or record[0] == _ckpt._WRITING):
                found.append((s, record))
        return sorted(found, key=lambda f: -f[1][4])

    def newest_step(self):
        steps = [_ckpt._read_record(self.head, s)[1] for s in (0, 1)
                 if self.valid and _ckpt._read_record(self.head, s)[0] != _ckpt._EMPTY]
        return max(steps) if steps else None

    def read(self, slot, record):
        """The slot's structure and tiles' CRCs (None where it holds no replicated state)."""
        base = _ckpt.HEADER + slot * self.slot_size
        structure = _ckpt._safe_loads(os.pread(self.fd, record[5], base))
        if len(structure) < 4 or not structure[3] or structure[3][0] != "holds":
            return structure, None
        shared = structure[3][1]
        size = trailer_size(shared)
        tiles = struct.unpack_from(f"<{len(shared)}I",
                                   os.pread(self.fd, size, base + record[2] - size))
        return structure, list(tiles)


def slot_identity(header, slot):
    """A slot's record, rank and run tag in a region's `header` (bytes or a mapping)."""
    return (_ckpt._read_record(header, slot), _ckpt._rank_of(header, slot),
            struct.unpack_from("<Q", header, _ckpt._RUN_AT + 8 * slot)[0])


def open_holder(path):
    try:
        return _Holder(path)
    except FileNotFoundError:
        return None


def _holds(structure):
    return structure[3] if len(structure) > 3 and structure[3] and \
        structure[3][0] == "holds" else None


def _wait_for_holder(step, run, ordinal):
    """The holder's committed (structure, tiles) of this save (step `step`, its `ordinal`), or a
    reason it is not to be had."""
    folder, rank, world = _ckpt._region_dir(), holder_rank(), _ckpt._my_world()
    path = os.path.join(folder, "rank0")
    started, poll = time.monotonic(), _POLL
    writing_since = None
    while True:
        begun = os.path.exists(path + ".new")  # a grown region being made
        for name in (path, path + ".new"):
            holder = open_holder(name)
            if holder is None:
                continue
            try:
                begun = begun or not holder.valid  # made, its header not written yet
                ahead = []
                for slot, record in holder.slots(rank, step, run, world, (_ckpt._COMMITTED,)):
                    structure, tiles = holder.read(slot, record)
                    if holder.identity(slot)[0] != record:
                        continue  # overwritten while read: looked at again
                    holds = _holds(structure)
                    theirs = holds[3] if holds and len(holds) > 3 else None
                    if tiles is None or theirs == ordinal:
                        return structure, tiles
                    if theirs is not None and theirs > ordinal:
                        ahead.append(theirs)
                if ahead:  # this save's is no longer there: the holder saved again since
                    return f"local rank 0 is {min(ahead) - ordinal} save(s) ahead of this rank"
                if holder.slots(rank, step, run, world, (_ckpt._WRITING,)):
                    begun = True
                newest = holder.newest_step()
                if name == path and newest is not None and newest > step:
                    return f"local rank 0 has saved step {newest} and not step {step}"
            finally:
                holder.close()
        now = time.monotonic()
        if begun and writing_since is None:
            writing_since = now
        if writing_since is None and now - started > START_WAIT:
            return f"local rank 0 did not begin saving step {step} within {START_WAIT:.0f} s"
        if writing_since is not None and now - writing_since > COMMIT_WAIT:
            return f"local rank 0's save of step {step} took over {COMMIT_WAIT:.0f} s"
        time.sleep(poll)
        poll = min(poll * 2, _POLL_MAX)


def reference(step, tensors, places, shared, section):
    """A referrer's reference to the holder's replicated tensors of this save (holder's global
    rank, shared indices, section size, tiles' CRCs), checked against its own; None where the
    holder has none to give (this rank then saves them itself). Raises where they differ."""
    global _warned
    ordinal = next_ordinal()
    bounds = tile_bounds(places, shared, section)
    mine = [_tensor_crc(tensors[i], b - a - places[i].nbytes) for i, (a, b) in zip(shared, bounds)]
    got = _wait_for_holder(step, _ckpt.run_tag(os.environ.get("TORCHELASTIC_RUN_ID", "")), ordinal)
    rank = holder_rank()
    if isinstance(got, str) or got[1] is None:
        if not _warned:
            why = got if isinstance(got, str) else \
                f"local rank 0 saved step {step} without replicated="
            warnings.warn(f"ddprun.checkpoint.save: {why}: this rank holds its replicated state "
                          f"itself (once per rank, not once per node; said once)", stacklevel=3)
            _warned = True
        return None
    structure, tiles = got
    holds = _holds(structure)
    if tuple(holds[1]) != tuple(shared):
        raise _ckpt.CheckpointError(
            f"checkpoint: step {step}: this rank names other tensors replicated than local rank 0 "
            f"(global rank {rank}) does: {len(shared)} against {len(holds[1])} (the tensors' "
            f"indices in the state: {list(shared)[:8]}... against {list(holds[1])[:8]}...)")
    if holds[2] != section or not _same_layout(places, structure[2], shared):
        raise _ckpt.CheckpointError(
            f"checkpoint: step {step}: this rank's replicated tensors are not laid out as local "
            f"rank 0's (global rank {rank}): a shape or dtype differs, so they are not replicated "
            f"(save them without replicated=)")
    for n, (i, a, b) in enumerate(zip(shared, mine, tiles)):
        if a != b:
            p = places[i]
            raise _ckpt.CheckpointError(
                f"checkpoint: step {step}: replicated tensor {n} (of shape {tuple(p.shape)}, "
                f"{p.dtype}) differs from local rank 0's (global rank {rank}): CRC {a:08x} against "
                f"{b:08x}. The state named replicated must be the same on every rank (as DDP's "
                f"parameters and optimizer state are; BatchNorm's running statistics are not, "
                f"without SyncBatchNorm); save what differs without replicated=")
    return ("replica_of", rank, tuple(shared), section, tuple(tiles))


class _Mapped:
    """A holder's region mapped from the very file whose records were checked."""

    def __init__(self, fd, size):
        self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)

    def close(self):
        self.map.close()


def node_slots(committed, rank):
    """(holder, slot, record) for each committed slot of global rank `rank` at the step, run and
    world size of `committed` (a rank's verified slot) among this node's regions; each region's
    file is closed once its slots were given (a mapping made from it meanwhile stays valid)."""
    folder = _ckpt._region_dir()
    for name in sorted(os.listdir(folder)):
        if not name.startswith("rank") or not name[4:].isdigit():
            continue
        holder = open_holder(os.path.join(folder, name))
        if holder is None:
            continue
        try:
            for slot, record in holder.slots(rank, committed.step, committed.run,
                                             committed.world, (_ckpt._COMMITTED,)):
                yield holder, slot, record
        finally:
            holder.close()


def holder_slot(committed, ref, places):
    """The holder's slot that `ref` (a referrer's reference, read from `committed`, its verified
    slot) names, mapped, every tile's CRC checked: (mapping, data start, still_there)."""
    _, rank, shared, section, tiles = ref
    bounds = tile_bounds(places, shared, section)
    for holder, slot, record in node_slots(committed, rank):
        structure, _ = holder.read(slot, record)
        holds = _holds(structure)
        if not holds or tuple(holds[1]) != tuple(shared) or \
                not _same_layout(places, structure[2], shared):
            continue
        mapped = _Mapped(holder.fd, _ckpt.HEADER + 2 * holder.slot_size)
        seen = holder.identity(slot)
        data_start = _ckpt.HEADER + slot * holder.slot_size + _ckpt._up(record[5], _ckpt._ALIGN)
        if seen[0] == record and all(_ckpt._crc(mapped.map, data_start + a, b - a) == tile
                                     for (a, b), tile in zip(bounds, tiles)):

            def still_there(m=mapped.map, slot=slot, seen=seen):
                return slot_identity(m, slot) == seen

            return mapped, data_start, still_there
        mapped.close()
    folder = _ckpt._region_dir()
    raise _ckpt.CheckpointError(
        f"checkpoint: step {committed.step}: this rank's replicated state is held by global rank "
        f"{rank}'s slot, which this node's regions do not hold intact ({folder}): refused")
