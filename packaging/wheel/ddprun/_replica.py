"""Replicated state held once per node: checkpoint.save(step, state, replicated=...).

Under DDP every rank holds the same parameters and optimizer state; saved rank by rank, a node of
LOCAL_WORLD_SIZE ranks would hold, persist and send it that many times. With `replicated`, local
rank 0 (the node's holder) lays the replicated tensors out first in its slot and writes each one's
CRC (its tile: its bytes and the zeros up to the next 64-byte boundary) in the payload's last bytes.
Every other local rank (a referrer) takes the CRC of each of its own replicated tensors, waits for
the holder's slot of the same step and run, and checks that the layout and every CRC match: a
mismatch is a CheckpointError naming the tensor (the state is not the same on every rank, and
restoring the holder's would be a silent wrong answer). It then saves only a reference (the
holder's global rank, the tiles' CRCs) with its other tensors. Where the holder saved that step
without `replicated`, or did not start it within START_WAIT seconds, the referrer saves its
replicated tensors itself (one warning): more memory, never a wrong answer.

The agents copy, persist and restore slots by global rank as before. The holder's slot at a step is
its rank's slot at that step, which the agents' agreement on a step requires of every rank; ranks
are numbered by node, so the holder lands on the referrer's node with it. load() finds the holder's
slot among the node's regions and checks every tile's CRC against the reference before a byte
reaches the caller; one it cannot find or that does not match is refused.
"""
import os
import struct
import time
import warnings
import zlib

from ddprun import checkpoint as _ckpt

START_WAIT = 30.0  # seconds a referrer waits for the holder to begin saving the same step
COMMIT_WAIT = 600.0  # and then, at most, for it to commit it
_POLL = 0.0005
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
    """"holder", "referrer" or None (nothing replicated, or the only rank of its node)."""
    if not shared or int(os.environ.get("LOCAL_WORLD_SIZE", "1")) < 2:
        return None
    return "holder" if int(os.environ.get("LOCAL_RANK", "0")) == 0 else "referrer"


def holder_rank():
    """The global rank of this node's local rank 0 (a node's ranks are consecutive)."""
    return _ckpt._my_rank() - int(os.environ.get("LOCAL_RANK", "0"))


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
    if not src.is_cuda:
        crc = _ckpt._crc(flat.numpy(), 0, n) if n else 0
    else:
        chunk = min(n, 64 << 20)
        buf = torch.empty(max(chunk, 1), dtype=torch.uint8, pin_memory=True)
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            buf[:b - a].copy_(flat[a:b])
            crc = _ckpt._crc(buf.numpy(), 0, b - a, crc)
    return zlib.crc32(bytes(pad), crc) if pad else crc


def _same_layout(mine, theirs, shared):
    return all(theirs[i].offset == mine[i].offset and theirs[i].nbytes == mine[i].nbytes and
               theirs[i].dtype == mine[i].dtype and tuple(theirs[i].shape) == tuple(mine[i].shape)
               for i in shared)


class _Holder:
    """The holder's region as a file, read with pread: its slots' records, structure and tiles."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)

    def close(self):
        os.close(self.fd)

    def find(self, rank, step, run, states):
        """(slot, record) of a slot of `rank` at `step` of run `run` in one of `states`, or None."""
        head = os.pread(self.fd, _ckpt.HEADER, 0)
        if len(head) < _ckpt.HEADER or head[:8] != _ckpt.MAGIC:
            return None
        self.slot_size = struct.unpack_from("<Q", head, 8)[0]
        for s in (0, 1):
            record = _ckpt._read_record(head, s)
            if record[0] in states and record[1] == step and _ckpt._rank_of(head, s) == rank \
                    and struct.unpack_from("<Q", head, _ckpt._RUN_AT + 8 * s)[0] == run:
                return s, record
        return None

    def newest_step(self):
        head = os.pread(self.fd, _ckpt.HEADER, 0)
        if len(head) < _ckpt.HEADER or head[:8] != _ckpt.MAGIC:
            return None
        steps = [_ckpt._read_record(head, s)[1] for s in (0, 1)
                 if _ckpt._read_record(head, s)[0] != _ckpt._EMPTY]
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


def _open_holder(path):
    try:
        return _Holder(path)
    except FileNotFoundError:
        return None


def _wait_for_holder(step, run):
    """The holder's committed (structure, tiles) of `step`, or a reason it is not to be had."""
    folder, rank = _ckpt._region_dir(), holder_rank()
    path = os.path.join(folder, "rank0")
    started = time.monotonic()
    writing_since = None
    while True:
        holder = _open_holder(path)  # anew each time: a grown region replaces the file
        if holder is not None:
            try:
                found = holder.find(rank, step, run, (_ckpt._COMMITTED,))
                if found is not None:
                    read = holder.read(*found)
                    again = holder.find(rank, step, run, (_ckpt._COMMITTED,))
                    if again == found:  # not overwritten while read
                        return read
                    continue
                if holder.find(rank, step, run, (_ckpt._WRITING,)) is not None:
                    writing_since = writing_since or time.monotonic()
                else:
                    newest = holder.newest_step()
                    if newest is not None and newest > step:
                        return f"local rank 0 has saved step {newest} and not step {step}"
            finally:
                holder.close()
        now = time.monotonic()
        if writing_since is None and now - started > START_WAIT:
            return f"local rank 0 did not begin saving step {step} within {START_WAIT:.0f} s"
        if writing_since is not None and now - writing_since > COMMIT_WAIT:
            return f"local rank 0's save of step {step} took over {COMMIT_WAIT:.0f} s"
        time.sleep(_POLL)


def reference(step, tensors, places, shared, section):
    """A referrer's reference to the holder's replicated tensors of `step` (holder's global rank,
    shared indices, section size, tiles' CRCs), checked against its own; None where the holder has
    none to give (this rank then saves them itself). Raises where they differ."""
    global _warned
    bounds = tile_bounds(places, shared, section)
    mine = [_tensor_crc(tensors[i], b - a - places[i].nbytes) for i, (a, b) in zip(shared, bounds)]
    got = _wait_for_holder(step, _ckpt.run_tag(os.environ.get("TORCHELASTIC_RUN_ID", "")))
    rank = holder_rank()
    if isinstance(got, str) or got[1] is None:
        if not _warned:
            why = got if isinstance(got, str) else \
                f"local rank 0 saved step {step} without replicated="
            warnings.warn(f"ddprun.checkpoint.save: {why}: this rank holds its replicated state "
                          f"itself (once per rank, not once per node)", stacklevel=3)
            _warned = True
        return None
    structure, tiles = got
    theirs = structure[2]
    if tuple(structure[3][1]) != tuple(shared) or structure[3][2] != section or \
            not _same_layout(places, theirs, shared):
        raise _ckpt.CheckpointError(
            f"checkpoint: step {step}: this rank's replicated state is not laid out as local rank "
            f"0's (global rank {rank}): its tensors differ in number, shape or dtype, so they are "
            f"not replicated (save them without replicated=)")
    for n, (i, a, b) in enumerate(zip(shared, mine, tiles)):
        if a != b:
            p = places[i]
            raise _ckpt.CheckpointError(
                f"checkpoint: step {step}: replicated tensor {n} (of shape {tuple(p.shape)}, "
                f"{p.dtype}) differs from local rank 0's (global rank {rank}): CRC {a:08x} against "
                f"{b:08x}. The state named replicated must be the same on every rank (as DDP's "
                f"is); save what differs without replicated=")
    return ("replica_of", rank, tuple(shared), section, tuple(tiles))


def holder_slot(committed, ref, places):
    """The holder's slot that `ref` (a referrer's reference, read from `committed`, its verified
    slot) names, mapped, every tile's CRC checked: (mapping, data start, still_there)."""
    _, rank, shared, section, tiles = ref
    folder = _ckpt._region_dir()
    for name in sorted(os.listdir(folder)):
        if not name.startswith("rank") or not name[4:].isdigit():
            continue
        holder = _open_holder(os.path.join(folder, name))
        if holder is None:
            continue
        try:
            found = holder.find(rank, committed.step, committed.run, (_ckpt._COMMITTED,))
            if found is None or found[1][7] != committed.world:
                continue
            structure, _ = holder.read(*found)
            slot_size = holder.slot_size
        finally:
            holder.close()
        if len(structure) < 4 or not structure[3] or tuple(structure[3][1]) != tuple(shared) or \
                not _same_layout(places, structure[2], shared):
            continue
        region = _ckpt._Region(os.path.join(folder, name), slot_size, create=False)
        base = _ckpt.HEADER + found[0] * slot_size
        data_start = base + _ckpt._up(found[1][5], _ckpt._ALIGN)
        bounds = tile_bounds(places, shared, section)
        if all(_ckpt._crc(region.map, data_start + a, b - a) == tile
               for (a, b), tile in zip(bounds, tiles)):
            sequence = found[1][4]

            def still_there(m=region.map, slot=found[0]):
                record = _ckpt._read_record(m, slot)
                return record[0] == _ckpt._COMMITTED and record[4] == sequence

            return region, data_start, still_there
        region.close()
    raise _ckpt.CheckpointError(
        f"checkpoint: step {committed.step}: this rank's replicated state is held by global rank "
        f"{rank}'s slot, which this node's regions do not hold intact ({folder}): refused")
