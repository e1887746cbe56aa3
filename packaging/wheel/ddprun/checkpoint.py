"""Checkpoints held in memory by ddprun's agent: saved in the time of a memory copy, restored after any
worker failure (ddprun --checkpoint_memory_limit; docs/operations.md).

    from ddprun import checkpoint
    step, state = checkpoint.load()          # (None, None) on a fresh start
    if state is not None:
        model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optim"])
    for step in range(0 if step is None else step + 1, steps):
        ...
        checkpoint.save(step, {"model": model.state_dict(), "optim": optimizer.state_dict()})

`state` is a nested dict/list/tuple of tensors (CPU or CUDA) and picklable values. save() returns once
every byte is in the local rank's shared-memory region, which the agent created and which outlives
the worker: two slots, the save going to the one not holding the newest complete checkpoint, which
is committed (step, size, checksum) only when every byte is in. load() returns the newest step that
every rank of the job had committed when this worker was started (the agents agree on it through the
rendezvous before the workers start: DDPRUN_CHECKPOINT_STEP), its tensors on the devices they were
saved from. Outside ddprun save() does nothing (with one warning) and load() returns (None, None).

Region layout (little-endian; the agent reads the header): at 0 the magic b"DDPCKPT1", at 8 the slot
size; at 64 + 64*i slot i's record: state (0 empty, 1 being written, 2 committed), step, size, checksum
(the 64-bit wrapping sum of the payload's 8-byte words), sequence (newer commits higher), the pickled
structure's size; slot i's payload at 4096 + i * slot size: the pickled structure, then each tensor's
bytes at a 64-byte boundary.
"""
import mmap
import os
import pickle
import stat
import struct
import warnings

MAGIC = b"DDPCKPT1"
HEADER = 4096
_RECORD = struct.Struct("<QqQQQQ")  # state, step, size, checksum, sequence, structure size
_EMPTY, _WRITING, _COMMITTED = 0, 1, 2
_ALIGN = 64
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class CheckpointError(RuntimeError):
    """A checkpoint could not be saved or restored (the message says why and what to change)."""


class _Tensor:
    """Where a tensor of the state lies in a slot's payload."""

    def __init__(self, offset, nbytes, dtype, shape, device):
        self.offset, self.nbytes, self.dtype, self.shape, self.device = \
            offset, nbytes, dtype, shape, device


_region = None  # this process's mapping of its local rank's region
_warned = False


def _up(n, to):
    return (n + to - 1) // to * to


def _record_offset(slot):
    return 64 + 64 * slot


def _read_record(m, slot):
    return _RECORD.unpack_from(m, _record_offset(slot))


class _Region:
    """The local rank's region file, mapped."""

    def __init__(self, path, slot_size, create):
        self.path, self.slot_size = path, slot_size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            size = HEADER + 2 * slot_size
            if create:
                try:
                    os.posix_fallocate(fd, 0, size)  # a full /dev/shm fails here, not as SIGBUS later
                except OSError as e:
                    os.unlink(path)
                    raise CheckpointError(
                        f"checkpoint: {os.path.dirname(path)} cannot hold this rank's {size} bytes "
                        f"(two slots of {slot_size}): {e.strerror}. Enlarge /dev/shm (a container: "
                        f"--shm-size, e.g. --shm-size={_human(_needed_for_node(size))}) or lower the "
                        f"checkpoint's size") from None
            # Every page mapped at once (fallocate gave them memory): no save or load takes a page
            # fault per page.
            self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | (_POPULATE if create else 0))
        finally:
            os.close(fd)
        if create:
            self.map[0:8] = MAGIC
            struct.pack_into("<Q", self.map, 8, slot_size)

    def records(self):
        return [_read_record(self.map, s) for s in (0, 1)]


def _human(n):
    for unit, size in (("g", 1 << 30), ("m", 1 << 20)):
        if n >= size:
            return f"{-(-n // size)}{unit}"
    return str(n)


def _needed_for_node(size):
    return size * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _region_dir():
    return os.environ.get("DDPRUN_CHECKPOINT_DIR")


def _region_path(folder):
    return os.path.join(folder, "rank%s" % os.environ.get("LOCAL_RANK", "0"))


def _held_elsewhere(folder, own):
    """Bytes the other local ranks' regions hold."""
    total = 0
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if path != own:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):  # the regions, not the modules' folder
                total += st.st_size
    return total


def _existing_region(path):
    """The region at `path` (a restarted worker's: the agent kept it), or None where there is none."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return None
    if head[:8] != MAGIC:
        return None
    return _Region(path, struct.unpack_from("<Q", head, 8)[0], create=False)


def _open_region(folder, payload):
    """This rank's region, able to hold `payload` bytes per slot: made (or remade larger) here."""
    global _region
    path = _region_path(folder)
    if _region is None:
        _region = _existing_region(path)
    if _region is not None and _region.slot_size >= payload:
        return _region
    slot_size = _up(payload + payload // 16, 1 << 20)  # room for the state to grow a little
    size = HEADER + 2 * slot_size
    limit = os.environ.get("DDPRUN_CHECKPOINT_MEMORY_LIMIT")
    others = _held_elsewhere(folder, path)
    if limit and others + size > int(limit):
        raise CheckpointError(
            f"checkpoint: this rank's state needs {size} bytes (two slots of {slot_size}); with the "
            f"{others} bytes the node's other ranks hold that is over --checkpoint_memory_limit "
            f"({limit} bytes)")
    if _region is not None:  # the state outgrew its slots: a new region, the old one kept until
        old = _region         # the first save into the new one is committed
        _region = _Region(path + ".new", slot_size, create=True)
        _region.replaces = old
    elif os.path.exists(path):
        os.unlink(path)  # not a region: what a crashed first save left
        _region = _Region(path, slot_size, create=True)
    else:
        _region = _Region(path, slot_size, create=True)
    return _region


def _walk(state, leaf):
    """`state` rebuilt with `leaf(value)` for each value that is no dict, list or plain tuple."""
    if isinstance(state, dict):
        items = ((k, _walk(v, leaf)) for k, v in state.items())
        return dict(items) if type(state) is dict else type(state)(items)
    if isinstance(state, list):
        return [_walk(v, leaf) for v in state]
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return tuple(_walk(v, leaf) for v in state)
    return leaf(state)


class _Ref:
    def __init__(self, index):
        self.index = index


def _flatten(state, tensors):
    """`state` with each tensor replaced by its index in `tensors`."""
    import torch

    def take(value):
        if not isinstance(value, torch.Tensor):
            return value
        tensors.append(value)
        return _Ref(len(tensors) - 1)
    return _walk(state, take)


def _unflatten(state, tensors):
    return _walk(state, lambda value: tensors[value.index] if isinstance(value, _Ref) else value)


def _checksum(m, start, size):
    import torch
    words = torch.frombuffer(m, dtype=torch.int64, offset=start, count=size // 8)
    return int(words.sum().item()) & 0xFFFFFFFFFFFFFFFF


def save(step, state):
    """Saves `state` as step `step` of this rank; returns once every byte is in shared memory."""
    global _warned
    folder = _region_dir()
    if not folder:
        if not _warned:
            warnings.warn("ddprun.checkpoint.save: not started by ddprun: nothing is saved",
                          stacklevel=2)
            _warned = True
        return
    import torch
    tensors = []
    structure = _flatten(state, tensors)
    places, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        places.append(_Tensor(offset, nbytes, t.dtype, tuple(t.shape), str(t.device)))
        offset = _up(offset + nbytes, _ALIGN)
    meta = pickle.dumps((structure, places), protocol=4)
    data_start = _up(len(meta), _ALIGN)
    payload = _up(data_start + offset, 8)
    region = _open_region(folder, payload)
    m = region.map
    records = region.records()
    # The slot not holding the newest complete checkpoint.
    newest = max((0, 1), key=lambda s: records[s][4] if records[s][0] == _COMMITTED else -1)
    slot = 1 - newest if records[newest][0] == _COMMITTED else 0
    sequence = max(r[4] for r in records) + 1
    base = HEADER + slot * region.slot_size
    _RECORD.pack_into(m, _record_offset(slot), _WRITING, step, 0, 0, 0, 0)
    m[base:base + len(meta)] = meta
    if data_start > len(meta):
        m[base + len(meta):base + data_start] = bytes(data_start - len(meta))
    data = torch.frombuffer(m, dtype=torch.uint8, offset=base + data_start,
                            count=max(payload - data_start, 1))
    for t, p in zip(tensors, places):
        if p.nbytes == 0:
            continue
        src = t.detach()
        if not src.is_contiguous():
            src = src.contiguous()
        data[p.offset:p.offset + p.nbytes].copy_(src.view(-1).view(torch.uint8) if src.dim()
                                                 else src.view(1).view(torch.uint8))
    checksum = _checksum(m, base, payload)
    _RECORD.pack_into(m, _record_offset(slot), _WRITING, step, payload, checksum, sequence,
                      len(meta))
    struct.pack_into("<Q", m, _record_offset(slot), _COMMITTED)  # last: now it counts
    old = getattr(region, "replaces", None)
    if old is not None:  # the larger region holds a complete checkpoint: it takes the old one's place
        os.replace(region.path, old.path)
        region.path = old.path
        region.replaces = None
        old.map.close()


def load(into=None):
    """(step, state) of the newest step every rank of the job holds, or (None, None). With `into`,
    a state of the same structure (the model's and optimizer's state dicts as they are after
    building them, say), each tensor is restored into the tensor at its place in `into`, and the
    state returned holds those very tensors (and the saved values of everything else): no memory
    is allocated for the tensors, as with torch.distributed.checkpoint.load. Without it, new
    tensors on the devices they were saved from."""
    global _region
    folder, agreed = _region_dir(), os.environ.get("DDPRUN_CHECKPOINT_STEP")
    if not folder or agreed is None:
        return None, None
    step = int(agreed)
    path = _region_path(folder)
    if _region is None:
        _region = _existing_region(path)
    if _region is None:
        raise CheckpointError(f"checkpoint: step {step} (agreed by the agents) is not in {path}")
    m = _region.map
    found = [s for s, r in enumerate(_region.records()) if r[0] == _COMMITTED and r[1] == step]
    if not found:
        raise CheckpointError(f"checkpoint: step {step} (agreed by the agents) is not in {path}")
    slot = found[0]
    _, _, size, checksum, _, meta_size = _read_record(m, slot)
    base = HEADER + slot * _region.slot_size
    if _checksum(m, base, size) != checksum:
        raise CheckpointError(f"checkpoint: step {step} in {path} fails its checksum")
    import torch
    structure, places = pickle.loads(m[base:base + meta_size])
    data_start = _up(meta_size, _ALIGN)
    targets = None
    if into is not None:
        targets = []
        _flatten(into, targets)
        if len(targets) != len(places) or any(
                t.dtype != p.dtype or tuple(t.shape) != p.shape for t, p in zip(targets, places)):
            raise CheckpointError(f"checkpoint: step {step}'s tensors do not match those of `into` "
                                  f"({len(places)} saved, {len(targets)} given, or a shape or "
                                  f"dtype differs)")
    tensors = []
    for i, p in enumerate(places):
        out = targets[i] if targets is not None else torch.empty(p.shape, dtype=p.dtype,
                                                                 device=p.device)
        if p.nbytes:
            src = torch.frombuffer(m, dtype=torch.uint8, offset=base + data_start + p.offset,
                                   count=p.nbytes)
            flat = out.view(-1) if out.dim() else out.view(1)
            if not out.is_contiguous():
                raise CheckpointError("checkpoint: load(into=...) needs contiguous tensors")
            flat.view(torch.uint8).copy_(src)
        tensors.append(out)
    return step, _unflatten(structure, tensors)
