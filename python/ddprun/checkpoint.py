"""Checkpoints held in memory by ddprun's agent: saved in the time of a memory copy, restored after any
worker failure (ddprun --checkpoint_memory_limit; docs/operations.md).

    from ddprun import checkpoint
    step, state = checkpoint.load()          # (None, None) on a fresh start
    if state is not None:
        model.load_state_dict(state["model"]); optimizer.load_state_dict(state["optim"])
    for step in range(0 if step is None else step + 1, steps):
        ...
        checkpoint.save(step, {"model": model.state_dict(), "optim": optimizer.state_dict()})

With replicated=True (or the top-level keys of the state that are), state that is the same on every
rank (DDP's) is held once per node, in local rank 0's slot, each other rank checking its own against
it (ddprun._replica).

`state` is a nested dict/list/tuple of tensors (CPU or CUDA) and picklable values. save() returns once
every byte is in the local rank's shared-memory region, which the agent created and which outlives
the worker: two slots, the save going to the one not holding the newest complete checkpoint, which
is committed (step, size, checksum) only when every byte is in. load() returns the newest step that
every rank of the job had committed when this worker was started (the agents agree on it through the
rendezvous before the workers start: DDPRUN_CHECKPOINT_STEP), its tensors on the devices they were
saved from. Outside ddprun save() does nothing (with one warning) and load() returns (None, None).

A checkpoint is the state of one global rank at one step: every slot records the rank and the world
size it was saved with, and load() refuses a slot that is not this rank's (the agents put each rank's
own state in its region before the workers start, wherever it was held), and, for checkpoint.save's
opaque per-rank state, one saved at another world size (see load()).

Region layout (little-endian; the agent reads the header and persists slots verbatim; the layout is
docs/region_format.md's): at 0 the magic b"DDPCKPT3", at 8 the slot size; at 64 + 64*i slot i's
record: state (0 empty, 1 being written, 2 committed), step, size, checksum (zlib's CRC-32 of the
payload), sequence (newer commits higher), the structure's size, the DCP
metadata's size, the world size at the save; at 192 + 8*i the global rank that saved slot i, at
208 + 8*i its run's tag (the 64-bit FNV-1a hash of TORCHELASTIC_RUN_ID); at 256 + 8*i how long slot
i's save took (microseconds); slot i's payload at 4096 + i * slot size: the
pickled structure, then from the next 64-byte boundary the data (each tensor's bytes at a 64-byte
boundary; for torch.distributed.checkpoint saves each item as torch.save would write it, see
ddprun._dcp_storage), and, in the coordinator's region of a DCP save, the pickled DCP metadata in the
payload's last bytes (at size minus its size rounded up to 8); in a holder's slot of a save with
replicated=, the replicated tensors' CRCs there instead (ddprun._replica). A slot persisted to --checkpoint_dir is
a file of this layout with that slot as slot 0.

torch.distributed.checkpoint: MemoryStorageWriter and MemoryStorageReader (ddprun._dcp_storage).
"""
import contextlib
import fcntl
import gc
import mmap
import os
import pickle
import stat
import struct
import sys
import threading
import time
import warnings
import weakref
import zlib

MAGIC = b"DDPCKPT3"
HEADER = 4096
# state, step, size, checksum, sequence, structure size, DCP metadata size, world size
_RECORD = struct.Struct("<QqQQQQQQ")
_RANK_AT = 192  # + 8 * slot: the global rank that saved it
_RUN_AT = 208  # + 8 * slot: its run's tag
_SAVE_TIME = 256  # + 8 * slot: the save's duration in microseconds
_DIGEST_AT = 328  # + 8 * slot: the state's digest (state_digest), bit 32 set
_EMPTY, _WRITING, _COMMITTED = 0, 1, 2
_ALIGN = 64
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# CUDA bytes in a save from which its region is registered with CUDA (page-locked, once per worker:
# a few ms per GiB) so that the copies from the GPU go by DMA at the link's speed, overlapping the
# copies of the CPU tensors.
_PIN_FROM = 64 << 20


class CheckpointError(RuntimeError):
    """A checkpoint could not be saved or restored (the message says why and what to change)."""


# What a checkpoint's structure may be made of when it is read back: no code runs from a checkpoint
# (a copy held on another node, a file in --checkpoint_dir), as torch.load's weights_only has it.
# Containers, numbers, strings, torch's dtypes, layouts, memory formats and sizes, ddprun's own
# places, and torch.distributed.checkpoint's metadata classes; allow() adds more.
_SAFE_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "int", "float", "complex", "str",
                  "bytes", "bytearray", "bool", "slice", "range"}
# torch 2.x pickles a layout as torch.serialization._get_layout(name), which looks it up among torch's
# layouts only (torch's weights_only unpickler allows it too).
_SAFE_GLOBALS = {("collections", "OrderedDict"), ("ddprun.checkpoint", "_Ref"),
                 ("ddprun.checkpoint", "_Tensor"), ("torch", "Size"), ("torch", "device"),
                 ("torch.serialization", "_get_layout")}
_DCP_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
                "torch.distributed.checkpoint.planner")
_allowed = set()


def allow(*objects):
    """Lets checkpoints hold these classes (or functions) too, as torch.serialization's
    add_safe_globals does for torch.load: for a value of a type of your own in the state."""
    for obj in objects:
        _allowed.add((obj.__module__, obj.__qualname__))


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module == "builtins" and name in _SAFE_BUILTINS) or (module, name) in _SAFE_GLOBALS \
                or (module, name) in _allowed:
            return super().find_class(module, name)
        if module == "torch" or (module.startswith("torch.") and name.startswith("torch.")):
            # A memory format pickles as its dotted name under the module that defines it.
            import torch
            value = getattr(torch, name[len("torch."):] if module != "torch" else name, None)
            if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
                return value
        if module in _DCP_MODULES:
            import dataclasses
            import enum
            value = super().find_class(module, name)
            if isinstance(value, type) and (dataclasses.is_dataclass(value)
                                            or issubclass(value, enum.Enum)):
                return value
        raise CheckpointError(
            f"checkpoint: the saved state holds {module}.{name}, which ddprun does not unpickle (no "
            f"code runs from a checkpoint): call checkpoint.allow({name}) before loading to allow "
            f"it")


def _safe_loads(data):
    """pickle.loads, for what a checkpoint may hold only."""
    import io
    return _SafeUnpickler(io.BytesIO(data)).load()


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


def _rank_of(m, slot):
    return struct.unpack_from("<q", m, _RANK_AT + 8 * slot)[0]


def run_tag(run_id):
    """The 64-bit FNV-1a hash of `run_id` (a slot's run tag)."""
    h = 0xCBF29CE484222325
    for byte in run_id.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _my_rank():
    return int(os.environ.get("RANK", "0"))


def _my_world():
    return int(os.environ.get("WORLD_SIZE", "1"))


def _slot():
    """This worker's region's number in its agent's folder (its local rank, which the agent gives
    as DDPRUN_CHECKPOINT_SLOT: under --virtual_local_rank LOCAL_RANK is 0 in every worker)."""
    return int(os.environ.get("DDPRUN_CHECKPOINT_SLOT", "0"))


def _slots():
    """How many workers' regions share this worker's folder: its agent's workers (one each under
    srun or mpirun, however many tasks the node runs)."""
    return int(os.environ.get("DDPRUN_CHECKPOINT_SLOTS", "1"))


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
            # Every page mapped at once (fallocate gave them memory; a restarted worker finds them
            # in the file): no save or load takes a page fault per page.
            self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE)
        finally:
            os.close(fd)
        self.pinned = None  # not tried yet; then whether CUDA has the mapping page-locked
        if create:
            self.map[0:8] = MAGIC
            struct.pack_into("<Q", self.map, 8, slot_size)

    def records(self):
        return [_read_record(self.map, s) for s in (0, 1)]

    def pin(self):
        """Whether the mapping is registered with CUDA (page-locked), registering it on the first
        call; where CUDA refuses (no memory to lock, say) copies go through pageable memory."""
        if self.pinned is None:
            import torch
            view = torch.frombuffer(self.map, dtype=torch.uint8, count=1)
            self.address = view.data_ptr()
            del view  # the mapping stays; the view would keep it from being closed
            self.pinned = int(torch.cuda.cudart().cudaHostRegister(self.address, len(self.map), 0)) == 0
            if not self.pinned:
                warnings.warn(f"ddprun.checkpoint: CUDA could not page-lock {len(self.map)} bytes; "
                              f"CUDA tensors are copied through pageable memory", stacklevel=3)
        return self.pinned

    def close(self):
        if self.pinned:
            import torch
            torch.cuda.cudart().cudaHostUnregister(self.address)
        self.map.close()


def _human(n):
    for unit, size in (("g", 1 << 30), ("m", 1 << 20)):
        if n >= size:
            return f"{-(-n // size)}{unit}"
    return str(n)


def _needed_for_node(size):
    """What the node's /dev/shm needs for `size` bytes per rank: every rank of the node's, also
    where each task has an agent of its own (srun, mpirun)."""
    return size * int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def _region_dir():
    return os.environ.get("DDPRUN_CHECKPOINT_DIR")


def _region_path(folder):
    return os.path.join(folder, "rank%d" % _slot())


def _held_elsewhere(folder, own):
    """Bytes allocated in the node's checkpoint folder `folder` besides this rank's region `own`
    (and a grown one's): the other local ranks' regions, the copies the agent keeps for its peers
    and holds for them, a restore's and a copy's staging: everything the node's checkpoint budget
    counts (the agent's memory_use.hpp), not the modules' folder."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(folder):
        if root == folder and "python" in dirs:
            dirs.remove("python")
        for name in files:
            path = os.path.join(root, name)
            if path in (own, own + ".new"):
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_nlink > 1:  # a copy held for a peer linked to a kept one: counted once
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
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


@contextlib.contextmanager
def _budget_lock(folder):
    """Held while this rank's room is measured against the node's checkpoint budget and reserved:
    the agent takes the same lock (memory_use.hpp) for the copies it makes, so that two never both
    take the last room."""
    fd = os.open(os.path.join(folder, ".budget"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _open_region(folder, payload):
    """This rank's region, able to hold `payload` bytes per slot: made (or remade larger) here."""
    global _region
    path = _region_path(folder)
    if _region is None:
        _region = _existing_region(path)
    if _region is not None and _region.slot_size >= payload:
        return _region
    with _budget_lock(folder):
        _take_grant(folder)  # room held for an earlier request of this rank is its own
        use = _NodeUse(folder, path, payload)
        if use.over <= 0 or use.optional < use.over:  # fits, or dropping every copy would not
            return _make_region(folder, path, use)    # make it fit
    # A node's own checkpoints come before copies for its peers: the agent drops them for this.
    asked = _ask_for_room(folder, use.over)
    with _budget_lock(folder):
        _take_grant(folder)  # the room the agent freed, held for this region
        return _make_region(folder, path, _NodeUse(folder, path, payload), asked)


class _NodeUse:
    """This rank's region for `payload` against the node's checkpoint budget, measured (under the
    budget's lock): its size, what the node's folder holds besides (`others`; `optional`: the
    copies kept for and held for peers, of those), and by how much it would be `over`."""

    def __init__(self, folder, path, payload):
        self.slot_size = _up(payload + payload // 16, 1 << 20)  # room for the state to grow a little
        self.size = HEADER + 2 * self.slot_size
        self.limit = os.environ.get("DDPRUN_CHECKPOINT_MEMORY_LIMIT")
        # A grown region's old one is kept until the first save into the new one is complete.
        self.old = os.stat(path).st_blocks * 512 if _region is not None else 0
        self.others = self.optional = self.over = 0
        if self.limit:
            self.others = _held_elsewhere(folder, path)
            self.optional = sum(_held_elsewhere(os.path.join(folder, part), "")
                                for part in ("kept", "peers"))
            self.over = self.others + self.old + self.size - int(self.limit)


# How long a save waits for the agent to answer a request for room (seconds), counting only the
# time the budget's lock was free: the agent answers only when no rank holds it, and other ranks
# making large regions (seconds each; on a node of 8, more than 10 s together) may hold it first.
# At most _ROOM_WAIT_AT_MOST in all. The lock is looked at every _ROOM_LOOK_EVERY.
_ROOM_ANSWER_WITHIN = 10.0
_ROOM_WAIT_AT_MOST = 300.0
_ROOM_LOOK_EVERY = 0.05


def _room_file(folder):
    return os.path.join(folder, ".room-%d" % _slot())


def _take_grant(folder):
    """Under the budget's lock: the room the agent holds for this rank (the agent's
    room_request.hpp), given back so that this rank's measure counts it free."""
    try:
        os.unlink(_room_file(folder) + ".granted")
    except FileNotFoundError:
        pass


def _lock_held(folder):
    """Whether another process holds the budget's lock now (taken and let go at once where not)."""
    fd = os.open(os.path.join(folder, ".budget"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _ask_for_room(folder, nbytes):
    """Asks the agent for `nbytes` of the budget (its copies for peers dropped: the agent's
    room_request.hpp) and waits for its answer: _ROOM_ANSWER_WITHIN of the time the budget's lock
    was free, _ROOM_WAIT_AT_MOST in all; whether it answered. The room freed is held for this rank
    (`.room-<local rank>.granted`) until it takes the budget's lock again."""
    request = _room_file(folder)
    with open(request + ".tmp", "w") as f:
        f.write(f"{nbytes}\n")
    os.replace(request + ".tmp", request)
    began = looked = time.monotonic()
    free = 0.0  # of the time waited, that while the lock was free (as seen at each look's end)
    while os.path.exists(request):
        now = time.monotonic()
        if now - looked >= _ROOM_LOOK_EVERY:
            if not _lock_held(folder):
                free += now - looked
            looked = now
        if free > _ROOM_ANSWER_WITHIN or now - began > _ROOM_WAIT_AT_MOST:
            with _budget_lock(folder):  # the agent answers under it: never half answered
                try:
                    os.unlink(request)
                except FileNotFoundError:
                    return True
            return False
        time.sleep(0.005)
    return True


def _make_region(folder, path, use, asked=None):
    """This rank's region made (`use`: the budget measured for it); `asked`: whether the agent
    answered a request for room (None: none made)."""
    global _region
    slot_size, size, old, others, limit = use.slot_size, use.size, use.old, use.others, use.limit
    if use.over > 0:
        keeping = f" and its current region's {old} until it is complete" if old else ""
        dropped = {None: "", True: " (after the agent dropped copies kept for and held for peers "
                   "for it)", False: " (the agent did not answer a request to drop its copies for "
                   f"peers within {_ROOM_ANSWER_WITHIN:.0f} s of the budget's lock being free, "
                   f"{_ROOM_WAIT_AT_MOST:.0f} s at most)"}[asked]
        raise CheckpointError(
            f"checkpoint: this rank's state needs {size} bytes (two slots of {slot_size}){keeping};"
            f" with the {others} bytes the node's other checkpoints hold (other ranks' regions, "
            f"copies kept for and held for peers) that is over the node's checkpoint budget of "
            f"{limit} bytes (--checkpoint_memory_limit; when not given, half the size of the file "
            f"system holding {folder}){dropped}")
    if _region is not None:  # the state outgrew its slots: a new region, the old one kept until
        old = _region         # the first save into the new one is committed
        try:
            os.unlink(path + ".new")  # what a worker killed during such a save left
        except FileNotFoundError:
            pass
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


# A CRC-32 runs at about 6.5 GB/s on a core (zlib's, which releases the GIL): a large one is
# summed in pieces of at least this many bytes on threads (as many as this process may run on, at
# most 16), and the pieces' CRCs combined.
_CRC_PIECE = 16 << 20
_CRC_POLY = 0xEDB88320  # CRC-32's polynomial, bit-reflected (zlib's)
_crc_pool = None


def _gf2_times(a, b):
    """a times b modulo CRC-32's polynomial (both bit-reflected, as zlib's multmodp)."""
    product, bit = 0, 1 << 31
    while bit:
        if a & bit:
            product ^= b
        b = (b >> 1) ^ _CRC_POLY if b & 1 else b >> 1
        bit >>= 1
    return product


_X_TO_2N = [1 << 30]  # x^(2^k) modulo the polynomial, k = 0..31
for _ in range(31):
    _X_TO_2N.append(_gf2_times(_X_TO_2N[-1], _X_TO_2N[-1]))


def _crc_combine(crc1, crc2, size2):
    """The CRC-32 of A then B from A's (`crc1`) and B's (`crc2`, of `size2` bytes): zlib's
    crc32_combine, which Python's zlib does not offer."""
    shift, k = 1 << 31, 3  # x^(8 * size2), from x^(2^k) for each bit of size2
    while size2:
        if size2 & 1:
            shift = _gf2_times(_X_TO_2N[k & 31], shift)
        size2 >>= 1
        k += 1
    return _gf2_times(shift, crc1) ^ crc2


def _crc_threads():
    try:
        return min(len(os.sched_getaffinity(0)), 16)
    except AttributeError:
        return min(os.cpu_count() or 1, 16)


def _native_crc32():
    """libdeflate's CRC-32 where the library is installed (zlib's function, computed with
    carry-less multiplication: 16 GB/s on a core here against zlib's 7; ctypes lets go of the GIL
    while it runs), else None: zlib's is used."""
    try:
        import ctypes
        fn = ctypes.CDLL("libdeflate.so.0").libdeflate_crc32
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_uint32, (ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t)
    return fn


_crc32_at = _native_crc32()


# A load's copy into the tensors it makes is mostly the first touch of their new memory: 240 MiB
# copied into new tensors took 0.18 s on 4 KiB pages and 0.06-0.08 s where the memory had been
# advised to take 2 MiB ones (torch 1.13, one thread, this project's 2-core machine). Only each
# tensor's 2 MiB-aligned interior is advised, so that no page holds anything but the tensor's
# bytes; the tensors stay torch's own (freed, resized and shared as any). Where the kernel's
# transparent huge pages are off ("never"), the advice changes nothing.
_HUGE_PAGE = 2 << 20


def _huge_page_advice():
    """madvise(start, size, MADV_HUGEPAGE) through libc, or None where there is none."""
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).madvise
        advice = mmap.MADV_HUGEPAGE
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return lambda start, size: fn(start, size, advice)


_advise_huge_pages = _huge_page_advice()


def _on_huge_pages(t):
    """Advises the 2 MiB-aligned interior of the memory of `t`, a CPU tensor not touched yet, to
    take huge pages (a refusal leaves it on small ones)."""
    if _advise_huge_pages is None or t.device.type != "cpu":
        return
    start = t.data_ptr()
    first = (start + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1)
    end = (start + t.numel() * t.element_size()) & ~(_HUGE_PAGE - 1)
    if end > first:
        _advise_huge_pages(first, end - first)


def _crc(m, start, size, crc=0):
    """zlib's CRC-32 of `size` bytes at `start` of `m`, continued from `crc` (the CRC of the bytes
    before them): a slot's checksum is its payload's. Large ones in pieces on threads."""
    global _crc_pool
    if size <= 0:
        return crc
    pieces = min(_crc_threads(), size // _CRC_PIECE)
    with memoryview(m) as whole:
        native = _crc32_at is not None and not whole.readonly
    if native:
        import ctypes
        view = (ctypes.c_char * size).from_buffer(m, start)
        try:
            at = ctypes.addressof(view)
            if pieces < 2:
                return _crc32_at(crc, at, size)
            if _crc_pool is None:
                import concurrent.futures
                _crc_pool = concurrent.futures.ThreadPoolExecutor(_crc_threads(), "ddprun-crc")
            bounds = [size * i // pieces for i in range(pieces + 1)]
            crcs = list(_crc_pool.map(lambda ab: _crc32_at(0, at + ab[0], ab[1] - ab[0]),
                                      zip(bounds, bounds[1:])))
        finally:
            del view  # the buffer is let go: `m` may be closed
        for part_crc, a, b in zip(crcs, bounds, bounds[1:]):
            crc = _crc_combine(crc, part_crc, b - a)
        return crc
    with memoryview(m) as whole:
        if pieces < 2:
            with whole[start:start + size] as part:
                return zlib.crc32(part, crc)
        if _crc_pool is None:
            import concurrent.futures
            _crc_pool = concurrent.futures.ThreadPoolExecutor(_crc_threads(), "ddprun-crc")
        bounds = [start + size * i // pieces for i in range(pieces + 1)]
        parts = [whole[a:b] for a, b in zip(bounds, bounds[1:])]
        try:
            crcs = list(_crc_pool.map(zlib.crc32, parts))
        finally:
            for part in parts:
                part.release()
    for part_crc, a, b in zip(crcs, bounds, bounds[1:]):
        crc = _crc_combine(crc, part_crc, b - a)
    return crc


# The saves of this process begun and not committed: at most one (a second would pick the same
# slot, or overwrite the buffers dcp.async_save staged the first into).
_saving = threading.Lock()
_in_flight = weakref.WeakSet()


# How long an in-process restart waits for this rank's saves under way to end (seconds).
_SAVES_END_WITHIN = 30.0


def _restarted():
    """An in-process restart (ddprun.inprocess): the saves under way end first (a dcp.async_save
    writing in the background; at most 30 s, else CheckpointError: the process is replaced), then
    this rank's region is mapped afresh at its next use (the agents may have put another one there
    for the rank it is now)."""
    global _region
    deadline = time.monotonic() + _SAVES_END_WITHIN
    while _in_flight and time.monotonic() < deadline:
        gc.collect()  # (a save that failed with its attempt is let go)
        time.sleep(0.01)
    if _in_flight:
        # It would commit a step of the aborted attempt into the region after the agents decided
        # what to restore: this process cannot be kept, and is replaced instead.
        raise CheckpointError(
            f"checkpoint: a save of this rank was still being written {_SAVES_END_WITHIN:g} s "
            "after its attempt ended: "
            "this process cannot take part in the next attempt (its save could land a step of the "
            "aborted one beside the restored one)")
    _region = None


def _claim(saver, step, allowed=None):
    """Counts `saver` (of step `step`) as this process's save under way; raises where another one
    is, other than `allowed` (the stager of this very save)."""
    with _saving:
        if _in_flight:
            gc.collect()  # what a failed dcp.save left unfinished is let go
        for other in _in_flight:
            if other is not allowed:
                raise CheckpointError(
                    f"checkpoint: step {step}: this rank's save of step {other.step} is still being "
                    f"written (dcp.async_save: wait for the previous save's future before the next)")
        _in_flight.add(saver)


def _release(*savers):
    with _saving:
        for saver in savers:
            if saver is not None:
                _in_flight.discard(saver)


class _Save:
    """One save of this rank: the slot not holding the newest complete checkpoint, marked as being
    written when made, committed (step, size, checksum) by commit() once every byte is in.
    `staged_by`: the dcp.async_save stager whose buffers this save copies (under way with it)."""

    def __init__(self, step, payload, started, staged_by=None):
        self.step, self.started, self.staged_by = step, started, staged_by
        _claim(self, step, allowed=staged_by)
        try:
            self.region = _open_region(_region_dir(), payload)
        except BaseException:
            _release(self)
            raise
        records = self.region.records()
        newest = max((0, 1), key=lambda s: records[s][4] if records[s][0] == _COMMITTED else -1)
        self.slot = 1 - newest if records[newest][0] == _COMMITTED else 0
        self.sequence = max(r[4] for r in records) + 1
        self.base = HEADER + self.slot * self.region.slot_size
        self.map = self.region.map
        _RECORD.pack_into(self.map, _record_offset(self.slot), _WRITING, step, 0, 0, 0, 0, 0, 0)
        struct.pack_into("<q", self.map, _RANK_AT + 8 * self.slot, _my_rank())
        struct.pack_into("<Q", self.map, _RUN_AT + 8 * self.slot,
                         run_tag(os.environ.get("TORCHELASTIC_RUN_ID", "")))

    def commit(self, size, structure_size, checksum, metadata_size=0, neutral=None):
        """Commits the slot's first `size` bytes, whose CRC is `checksum` (the caller's, computed as
        it wrote them, while they were in the cache). `neutral`: the structure pickled without the
        save's own bookkeeping, where it has any (None: the structure is that already)."""
        m, at = self.map, _record_offset(self.slot)
        if neutral is None:
            neutral = m[self.base:self.base + structure_size]
        struct.pack_into("<Q", m, _DIGEST_AT + 8 * self.slot,
                         state_digest(m, self.base, size, structure_size, checksum, neutral))
        _RECORD.pack_into(m, at, _WRITING, self.step, size, checksum, self.sequence, structure_size,
                          metadata_size, _my_world())
        struct.pack_into("<Q", m, _SAVE_TIME + 8 * self.slot,
                         int((time.perf_counter() - self.started) * 1e6))
        struct.pack_into("<Q", m, at, _COMMITTED)  # last: now it counts
        region = self.region
        old = getattr(region, "replaces", None)
        if old is not None:  # the larger region holds a complete checkpoint: it takes the old one's place
            os.replace(region.path, old.path)
            region.path = old.path
            region.replaces = None
            old.close()
        _release(self, self.staged_by)


def state_digest(m, base, size, structure_size, checksum, neutral):
    """The digest of the state a payload holds (at `base` of `m`, `size` bytes, CRC `checksum`, its
    structure `structure_size` bytes): the CRC-32 of `neutral` (the structure without the save's own
    bookkeeping: a replicated= holder's ordinal, a DCP save's count) then of the payload's bytes
    after the structure's padding, with bit 32 set (0 is "none"). Two saves of one state have one
    digest, whichever their bookkeeping: the agents tell a step saved with two states by it. From
    the checksum, without a pass over the data: a CRC-32 is linear."""
    start = min(_up(structure_size, _ALIGN), size)
    head = _crc(m, base, start)
    rest = checksum ^ _crc_combine(head, 0, size - start)  # the CRC of the bytes after `start`
    return (1 << 32) | _crc_combine(zlib.crc32(neutral), rest, size - start)


def _copy_tensor(data, offset, t, non_blocking=False):
    """Copies tensor `t`'s bytes into the uint8 tensor `data` at `offset` (`non_blocking`: a CUDA
    tensor's copy only queued, into page-locked memory)."""
    import torch
    src = t.detach()
    if not src.is_contiguous():
        src = src.contiguous()
    flat = src.view(-1) if src.dim() else src.view(1)
    data[offset:offset + flat.numel() * flat.element_size()].copy_(flat.view(torch.uint8),
                                                                   non_blocking=non_blocking)


class _TileSums:
    """The CRC of a slot's tiles, given in their order in the slot as they are written, each right
    after the one before; summed once every tile is in (for a CUDA tensor's tile whose copy was
    only queued, by DMA, once its device has finished the copies): a CRC is bound by the CPU, not by
    memory, so a pass of its own (in pieces on threads) costs no more than tile by tile."""

    def __init__(self, m):
        self.m, self.start, self.end, self.devices = m, None, None, set()

    def add(self, start, size, queued_on=None):
        if self.end is not None and start != self.end:
            raise AssertionError(f"checkpoint: a tile at {start}, not right after {self.end}")
        if queued_on is not None:
            self.devices.add(queued_on)
        if self.start is None:
            self.start = start
        self.end = start + size

    def wait(self):
        """Returns once every queued copy is in."""
        if self.devices:
            import torch
            for device in self.devices:
                torch.cuda.synchronize(device)
            self.devices = set()

    def total(self):
        self.wait()
        return _crc(self.m, self.start, self.end - self.start) if self.start is not None else 0


def _cuda_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t.is_cuda)


def _not_under_ddprun(what):
    global _warned
    if not _warned:
        warnings.warn(f"ddprun.checkpoint.{what}: not started by ddprun: nothing is saved",
                      stacklevel=3)
        _warned = True


def _refuse_in_standby(what):
    """A standby (--standby_workers) has no rank until it takes a failed rank's place: what its
    warm-up saved or loaded would be local rank 0's region's."""
    if os.environ.get("DDPRUN_STANDBY") == "1":
        raise CheckpointError(
            f"checkpoint.{what}: this process is a standby (--standby_workers), which has no rank "
            f"yet: {what} in the training inprocess.run() calls, not in its warm-up")


def save(step, state, replicated=False):
    """Saves `state` as step `step` of this rank; returns once every byte is in shared memory.
    A step number names one state: after load() returned step S, the next state saved is S+1's
    (a step saved with two states is restored by no rank while both saves are held; beyond that
    the agents cannot tell; docs/operations.md).

    `replicated`: True where the whole state is the same on every rank (DDP's model and optimizer),
    or the top-level keys of a dict state whose values are: the node then holds, persists and sends
    them once, in local rank 0's slot, and each other local rank checks its own against them (a
    CheckpointError names a tensor that differs) and saves a reference (ddprun._replica)."""
    if not _region_dir():
        _not_under_ddprun("save")
        return
    _refuse_in_standby("save")
    started = time.perf_counter()
    import torch
    from ddprun import _replica
    tensors = []
    structure = _flatten(state, tensors)
    shared = _replica.indices(state, replicated, tensors)
    role = _replica.role(shared)
    in_shared = set(shared)
    others = [i for i in range(len(tensors)) if i not in in_shared] if role else \
        list(range(len(tensors)))
    places, section = _replica.layout(tensors, shared) if role else ({}, 0)
    ref = _replica.reference(step, tensors, places, shared, section) \
        if role == "referrer" else None
    if role == "referrer" and ref is None:  # the holder has none: this rank holds them itself
        role, others, places, section = None, list(range(len(tensors))), {}, 0
    own, end = _replica.layout(tensors, others, 0 if ref else section)
    places.update(own)
    places = [places[i] for i in range(len(tensors))]
    kept = ref
    if role == "holder":
        kept = ("holds", tuple(shared), section, _replica.next_ordinal())
    meta = pickle.dumps(("plain", structure, places, kept), protocol=4)
    neutral = pickle.dumps(("plain", structure, places, kept[:3] + (None,)), protocol=4) \
        if role == "holder" else None
    data_start = _up(len(meta), _ALIGN)
    payload = _up(data_start + end, 8)
    if role == "holder":
        payload += _replica.trailer_size(shared)
    save = _Save(step, payload, started)
    m, base = save.map, save.base
    m[base:base + len(meta)] = meta
    if data_start > len(meta):
        m[base + len(meta):base + data_start] = bytes(data_start - len(meta))
    data = torch.frombuffer(m, dtype=torch.uint8, offset=base + data_start,
                            count=max(payload - data_start, 1))
    # Each tensor's tile (its bytes and the padding to the next) summed just after it is copied,
    # while it is in the cache: no second pass over the slot. With the region page-locked, CUDA
    # tensors are copied by DMA while the CPU ones are, and their tiles summed once they are in.
    order = (shared if role == "holder" else []) + others  # the holder's replicated ones first
    dma = _cuda_bytes([tensors[i] for i in order]) >= _PIN_FROM and save.region.pin()
    sums = _TileSums(m)
    sums.add(base, data_start)
    body_end = payload - (_replica.trailer_size(shared) if role == "holder" else 0)
    ends = [places[i].offset for i in order[1:]] + [body_end - data_start]
    for i, end in zip(order, ends):
        t, p = tensors[i], places[i]
        by_dma = dma and t.is_cuda
        if p.nbytes:
            _copy_tensor(data, p.offset, t, non_blocking=by_dma)
        if end > p.offset + p.nbytes:
            data[p.offset + p.nbytes:end].zero_()  # tiles are summed with their padding
        sums.add(base + data_start + p.offset, end - p.offset, t.device if by_dma else None)
    if role == "holder":
        sums.wait()
        checksum = _replica.holder_sums(m, base, data_start, places, shared, section, payload)
    else:
        checksum = sums.total()
    save.commit(payload, len(meta), checksum, neutral=neutral)


def agreed_step():
    """The step every rank of the job holds, which this worker is to restore (the agents agreed on it
    before starting it), or None: a fresh start, or not started by ddprun."""
    folder, agreed = _region_dir(), os.environ.get("DDPRUN_CHECKPOINT_STEP")
    return int(agreed) if folder and agreed is not None else None


def saved_world_size():
    """The world size the agreed step was saved with (the agents' agreement), or None where there
    is no step to restore. Where it differs from WORLD_SIZE, the job's membership changed since:
    torch.distributed.checkpoint state is resharded (MemoryStorageReader), checkpoint.save's is
    not (load())."""
    if agreed_step() is None:
        return None
    return int(os.environ.get("DDPRUN_CHECKPOINT_WORLD", str(_my_world())))


class _Committed:
    """The committed slot holding this rank's state at `step` in this rank's region, its checksum
    verified before anything is read from it. A slot of that step saved by another global rank, or
    at another world size than the agents agreed the step was saved at, is refused: the agents put
    this rank's own state here, and anything else would be a silent wrong answer."""

    def __init__(self, step):
        global _region
        path = _region_path(_region_dir())
        if _region is None:
            _region = _existing_region(path)
        if _region is None:
            raise CheckpointError(f"checkpoint: step {step} (agreed by the agents) is not in {path}")
        self.map = m = _region.map
        records = _region.records()
        found = [s for s, r in enumerate(records) if r[0] == _COMMITTED and r[1] == step]
        if not found:
            raise CheckpointError(f"checkpoint: step {step} (agreed by the agents) is not in {path}")
        rank, world = _my_rank(), saved_world_size()
        # (the newest first: a step saved twice is the second save's)
        mine = sorted((s for s in found if _rank_of(m, s) == rank), key=lambda s: -records[s][4])
        if not mine:
            raise CheckpointError(
                f"checkpoint: step {step} in {path} holds global rank {_rank_of(m, found[0])}'s "
                f"state, not this rank's ({rank}): refused")
        _, _, self.size, self.checksum, _, meta_size, self.metadata_size, saved_world = \
            _read_record(m, mine[0])
        if saved_world != world:
            raise CheckpointError(
                f"checkpoint: step {step} in {path} was saved by rank {rank} of {saved_world} "
                f"ranks, not of the {world} the agents agreed on: refused")
        self.step, self.path, self.world = step, path, saved_world
        self.run = struct.unpack_from("<Q", m, _RUN_AT + 8 * mine[0])[0]
        self.base = HEADER + mine[0] * _region.slot_size
        if _crc(m, self.base, self.size) != self.checksum:
            raise CheckpointError(f"checkpoint: step {step} in {path} fails its checksum")
        self.structure = _safe_loads(m[self.base:self.base + meta_size])
        self.data_start = self.base + _up(meta_size, _ALIGN)


def _nothing_to_restore(why):
    """(None, None): start afresh, in a process that holds nothing but what a new one starts from.
    One that ran an earlier attempt in process, or warmed up as a standby (ddprun.inprocess), would
    train on from that state while the ranks started anew train from their first: refused."""
    inprocess = sys.modules.get("ddprun.inprocess")
    carried = getattr(inprocess, "_carried", "")
    if carried:
        raise CheckpointError(
            f"checkpoint: nothing to restore ({why}), and this process holds {carried} "
            f"(ddprun.inprocess): a rank that starts afresh must start from what a new process "
            f"holds, as every other rank does")
    return None, None


def load(into=None, new_rank="raise"):
    """(step, state) of the newest step every rank of the job holds, as this very global rank saved
    it, or (None, None). With `into`, a state of the same structure (the model's and optimizer's
    state dicts as they are after building them, say), each tensor is restored into the tensor at
    its place in `into`, and the state returned holds those very tensors (and the saved values of
    everything else): no memory is allocated for the tensors, as with
    torch.distributed.checkpoint.load. Without it, new tensors on the devices they were saved from
    (on the CPU, advised to take huge pages where they are 4 MiB or more: their first touch is most
    of a load's time).

    A plain checkpoint is one rank's opaque state. Where the job's world size changed since the
    step was saved (an elastic job that lost a node with no spare, or gained one; see
    saved_world_size()), each rank the saved world had still gets what that rank saved (a
    warning says so once), and a rank it did not have gets, by `new_rank`: "raise" (the default)
    a CheckpointError naming both sizes; "fresh", (None, None), to start afresh. Never another
    rank's state. Nothing to restore in a process that ran an earlier attempt in process or warmed
    up as a standby (ddprun.inprocess; where no step is agreed the agent starts every rank in a new
    process) is a CheckpointError: that process's state is not what a new one starts from. Save through torch.distributed.checkpoint (MemoryStorageWriter) for state that is
    resharded."""
    if new_rank not in ("raise", "fresh"):
        raise ValueError(f"new_rank: 'raise' or 'fresh', not {new_rank!r}")
    step = agreed_step()
    if step is None:
        return _nothing_to_restore("no step is agreed")
    saved, rank = saved_world_size(), _my_rank()
    if saved != _my_world():
        if rank >= saved:
            if new_rank == "fresh":
                return _nothing_to_restore(f"rank {rank} has no counterpart in the {saved} ranks "
                                           f"that saved step {step}")
            raise CheckpointError(
                f"checkpoint: step {step} was saved by a job of {saved} ranks and this one has "
                f"{_my_world()}: rank {rank} has no counterpart in it, and checkpoint.save's state "
                f"is one rank's, which cannot be resharded (save through "
                f"torch.distributed.checkpoint, or load(new_rank='fresh') to start this rank "
                f"afresh)")
        warnings.warn(f"ddprun.checkpoint.load: step {step} was saved by a job of {saved} ranks "
                      f"and this one has {_my_world()}: rank {rank} restores what rank {rank} "
                      f"saved", stacklevel=2)
    import torch
    slot = _Committed(step)  # verified: nothing reaches `into` from a slot that fails its checksum
    m = slot.map
    if slot.structure[0] != "plain":
        raise CheckpointError(f"checkpoint: step {step} was saved through torch.distributed.checkpoint:"
                              f" load it with dcp.load(..., storage_reader=MemoryStorageReader())")
    _, structure, places = slot.structure[:3]
    ref = slot.structure[3] if len(slot.structure) > 3 else None
    targets = None
    if into is not None:
        targets = []
        _flatten(into, targets)
        if len(targets) != len(places) or any(
                t.dtype != p.dtype or tuple(t.shape) != p.shape for t, p in zip(targets, places)):
            raise CheckpointError(f"checkpoint: step {step}'s tensors do not match those of `into` "
                                  f"({len(places)} saved, {len(targets)} given, or a shape or "
                                  f"dtype differs)")
    holder, shared = None, ()
    if ref and ref[0] == "replica_of":  # the replicated tensors are in the node's holder's slot
        from ddprun import _replica
        holder, holder_start, still_there = _replica.holder_slot(slot, ref, places)
        shared = set(ref[2])
    tensors, devices = [], set()
    dma = bool(_region.pinned)  # page-locked by a save of this worker's: CUDA copies go by DMA
    try:
        for i, p in enumerate(places):
            out = targets[i] if targets is not None else torch.empty(p.shape, dtype=p.dtype,
                                                                     device=p.device)
            if targets is None and p.nbytes >= 2 * _HUGE_PAGE:
                _on_huge_pages(out)
            if p.nbytes:
                theirs = i in shared
                src = torch.frombuffer(holder.map if theirs else m, dtype=torch.uint8,
                                       offset=(holder_start if theirs else slot.data_start) +
                                       p.offset, count=p.nbytes)
                flat = out.view(-1) if out.dim() else out.view(1)
                if not out.is_contiguous():
                    raise CheckpointError("checkpoint: load(into=...) needs contiguous tensors")
                by_dma = dma and out.is_cuda and not theirs
                flat.view(torch.uint8).copy_(src, non_blocking=by_dma)
                if by_dma:
                    devices.add(out.device)
            tensors.append(out)
        for device in devices:
            torch.cuda.synchronize(device)
        if holder is not None and not still_there():
            raise CheckpointError(
                f"checkpoint: step {step}: global rank {ref[1]}'s slot holding this rank's "
                f"replicated state was overwritten while it was read (a save of local rank 0's "
                f"two steps ahead): the state read is not step {step}'s")
    finally:
        if holder is not None:
            holder.close()
    return step, _unflatten(structure, tensors)


def __getattr__(name):
    """MemoryStorageWriter and MemoryStorageReader, torch.distributed.checkpoint's storage backed by
    the same regions (imported on first use: they need torch 2)."""
    if name in ("MemoryStorageWriter", "MemoryStorageReader"):
        from ddprun import _dcp_storage
        return getattr(_dcp_storage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
