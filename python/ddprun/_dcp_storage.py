"""torch.distributed.checkpoint's storage backed by ddprun's in-memory checkpoint regions (torch 2):

    from ddprun import checkpoint
    import torch.distributed.checkpoint as dcp
    step = checkpoint.agreed_step()            # None on a fresh start
    if step is not None:
        dcp.load(state, storage_reader=checkpoint.MemoryStorageReader())
    ...
    dcp.save(state, storage_writer=checkpoint.MemoryStorageWriter(step))

A save returns once every byte is in this rank's region (two slots, committed only when complete,
as with checkpoint.save). A node keeps one copy of each item its ranks hold, replicated ones too
(DCP writes a replicated tensor on one rank of the job only; ddprun._dcp_node_items): a restarted
rank restores from its own node's memory.
Items are stored as DCP's FileSystemWriter stores them (a tensor as the zip torch.save writes, with
its data copied in place and the zip's CRC fields left zero: torch.load does not check them, and
torch itself writes them so when asked not to compute them), and the coordinator's region holds the
job's DCP metadata, whose entries point into files named rank_<RANK>.ddpckpt: a slot that the agent
persists to --checkpoint_dir/step_<N>/ with the metadata as .metadata loads with stock
dcp.load(..., storage_reader=FileSystemReader(DIR/step_N)). The reader reads this rank's items back
from its region for the same world size; where the world size changed, it reshards from every
rank's slot, gathered on this node by the agents (MemoryStorageReader). A tensor of 4 GiB or more in
one item is refused (the zip would need zip64).
"""
import copy
import io
import os
import pickle
import struct
import time

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.default_planner import create_default_global_save_plan
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from ddprun import _dcp_node_items
from ddprun import checkpoint as _ckpt

try:
    from torch.distributed.checkpoint.staging import AsyncStager, DefaultStager, StagingOptions
except ImportError:  # torch before 2.3: no dcp.async_save to stage for
    AsyncStager = object

_LOCAL = struct.Struct("<IHHHHHIIIHH")     # a zip entry's local header
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # its central directory entry
_END = struct.Struct("<IHHHHIIH")          # the end of the central directory
_ZIP_LIMIT = 0xFFFFFFFF


def _tensor_pickle(dtype, shape):
    """The data.pkl torch.save writes for a contiguous CPU tensor of this dtype and shape whose
    storage is record "0"."""
    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, torch.storage.TypedStorage):
                return ("storage", getattr(torch, obj._pickle_storage_type()), "0", "cpu",
                        obj._size())
            return None
    out = io.BytesIO()
    Pickler(out, protocol=2).dump(torch.empty(shape, dtype=dtype))
    return out.getvalue()


def _zip_entry(name, size, at, pad_to=1):
    """A stored zip entry's local header at offset `at`, its name padded with an extra field so that
    its content starts at a multiple of `pad_to`."""
    name = name.encode()
    pad = (-(at + _LOCAL.size + len(name) + 4)) % pad_to if pad_to > 1 else -1
    extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad if pad >= 0 else b""
    return _LOCAL.pack(0x04034B50, 20, 0, 0, 0, 0, 0, size, size, len(name), len(extra)) + name + \
        extra


class _Blob:
    """An item as FileSystemWriter stores it: a tensor as a torch.save zip (data.pkl, byteorder, the
    data at a 64-byte boundary, version), bytes as they are: `head`, then the tensor's `nbytes` of
    data (at `data_at`), then `tail`."""

    def __init__(self, data):
        if isinstance(data, io.BytesIO):
            self.head, self.tail, self.data_at, self.nbytes = bytes(data.getbuffer()), b"", 0, 0
            self.length = len(self.head)
            return
        self.nbytes = nbytes = data.numel() * data.element_size()
        if nbytes >= _ZIP_LIMIT:
            raise _ckpt.CheckpointError(
                f"checkpoint: a DCP item of {nbytes} bytes (4 GiB or more) cannot be held: shard it "
                f"further or use checkpoint.save")
        pkl = _tensor_pickle(data.dtype, tuple(data.shape))
        names = ("archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/version")
        sizes = (len(pkl), 6, nbytes, 2)
        at = []
        head = bytearray()
        for name, size, content in zip(names[:2], sizes, (pkl, b"little")):
            at.append(len(head))
            head += _zip_entry(name, size, len(head)) + content
        at.append(len(head))
        head += _zip_entry(names[2], nbytes, len(head), pad_to=64)
        self.data_at = len(head)
        end = self.data_at + nbytes
        at.append(end)
        tail = bytearray(_zip_entry(names[3], 2, end) + b"3\n")
        central = b"".join(
            _CENTRAL.pack(0x02014B50, 20, 20, 0, 0, 0, 0, 0, size, size, len(name), 0, 0, 0, 0, 0,
                          offset) + name.encode() for name, size, offset in zip(names, sizes, at))
        tail += central + _END.pack(0x06054B50, 0, 0, 4, 4, len(central), end + len(tail), 0)
        self.head, self.tail = bytes(head), bytes(tail)
        self.length = len(head) + nbytes + len(tail)


def _rank():
    return int(os.environ.get("RANK", "0"))


def _file_name():
    return f"rank_{_rank()}.ddpckpt"


# The host buffers dcp.async_save stages this process's tensors into, by place in the state: kept
# from one save to the next, so that staging copies into memory already touched (and, for CUDA
# tensors, page-locked).
_staged = []


def _stage_tensor(index, t, dma):
    """A copy of tensor `t` in the staging buffer kept for place `index` of the state."""
    t = t.detach()
    if index == len(_staged):
        _staged.append(None)
    held = _staged[index]
    pin = dma and t.is_cuda
    if held is None or held.dtype != t.dtype or held.shape != t.shape or held.is_pinned() != pin:
        held = _staged[index] = torch.empty(t.shape, dtype=t.dtype, pin_memory=pin)
    held.copy_(t, non_blocking=pin)
    return held


class MemoryStorageWriter(StorageWriter, AsyncStager):
    """Writes a dcp.save into this rank's in-memory region as step `step` (or the checkpoint_id
    given to dcp.save, an int). For dcp.async_save it is also the stager: the state's tensors are
    copied into host buffers this process keeps from one save to the next (page-locked for CUDA
    tensors), and the write into the region follows in torch's thread."""

    _synchronize_after_execute = False  # stage() returns with every copy made

    def __init__(self, step=None):
        super().__init__()
        self.step = step
        self.is_coordinator = False
        self._local_items = []
        self._save = None
        self._staged = False  # whether this writer staged its save's state (dcp.async_save)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.step = int(checkpoint_id)
        self._save = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan):
        self._local_items = list(plan.items)  # before DCP keeps one copy of each replicated item
        return _dcp_node_items.held(plan)

    def prepare_global_plan(self, plans):
        return _dcp_node_items.keepers(plans)

    def write_data(self, plan, planner):
        started = time.perf_counter()
        save_id = _dcp_node_items.next_save()  # first: every rank of the save counts it
        if self.step is None:
            raise _ckpt.CheckpointError("checkpoint: MemoryStorageWriter needs a step "
                                        "(MemoryStorageWriter(step) or dcp.save(checkpoint_id=step))")
        results = []
        if not _ckpt._region_dir():
            _ckpt._release(self)
            _ckpt._not_under_ddprun("MemoryStorageWriter")
            fut = Future()
            fut.set_result(results)
            return fut
        items, places = [], {}
        elsewhere = _dcp_node_items.kept_elsewhere(plan)
        for item in self._local_items:
            if item.index in elsewhere:  # another rank of this node keeps it
                places[item.index] = ("at", elsewhere[item.index])
                continue
            data = planner.resolve_data(item)
            if item.type != WriteItemType.BYTE_IO:
                data = data.detach()
            items.append((item, data, _Blob(data)))
        offset = 0
        for item, data, blob in items:
            places[item.index] = (offset, blob.data_at, blob.length, blob.nbytes,
                                  None if isinstance(data, io.BytesIO) else data.dtype,
                                  None if isinstance(data, io.BytesIO) else tuple(data.shape))
            offset = _ckpt._up(offset + blob.length, _ckpt._ALIGN)
        _, local_md = create_default_global_save_plan([type(plan)(self._local_items)])
        meta = pickle.dumps(("dcp", local_md.state_dict_metadata, places, save_id), protocol=4)
        neutral = pickle.dumps(("dcp", local_md.state_dict_metadata, places, None), protocol=4)
        data_start = _ckpt._up(len(meta), _ckpt._ALIGN)
        data_end = _ckpt._up(data_start + offset, 8)
        # The coordinator's job metadata follows; room for it is estimated from this rank's.
        room = len(meta) * int(os.environ.get("WORLD_SIZE", "1")) * 2 + (1 << 16) \
            if self.is_coordinator else 0
        save = _ckpt._Save(self.step, data_end + room, started, staged_by=self if self._staged else None)
        m, base = save.map, save.base
        m[base:base + len(meta)] = meta
        data = torch.frombuffer(m, dtype=torch.uint8, offset=base + data_start,
                                count=max(data_end - data_start, 1))
        in_final_plan = {item.index for item in plan.items}
        # Each item's tile summed just after it is written, while it is in the cache; with the
        # region page-locked, CUDA tensors' tiles once their DMA copies are in (see checkpoint.save).
        tensors = [value for _, value, _ in items if not isinstance(value, io.BytesIO)]
        dma = _ckpt._cuda_bytes(tensors) >= _ckpt._PIN_FROM and save.region.pin()
        sums = _ckpt._TileSums(m)
        sums.add(base, data_start)
        ends = [places[item.index][0] for item, _, _ in items[1:]] + [data_end - data_start]
        for (item, value, blob), end in zip(items, ends):
            at = places[item.index][0]
            head_at = base + data_start + at
            m[head_at:head_at + len(blob.head)] = blob.head
            later = bool(dma and blob.nbytes and value.is_cuda)
            if blob.nbytes:
                _ckpt._copy_tensor(data, at + blob.data_at, value, non_blocking=later)
            tail_at = head_at + blob.data_at + blob.nbytes
            m[tail_at:tail_at + len(blob.tail)] = blob.tail
            sums.add(head_at, end - at, value.device if later else None)
            if item.index in in_final_plan:
                results.append(WriteResult(
                    index=item.index, size_in_bytes=blob.length,
                    storage_data=_StorageInfo(_file_name(), _ckpt.HEADER + data_start + at,
                                              blob.length)))
        checksum = sums.total()
        self._save, self._sizes = save, (data_end, len(meta), checksum, neutral)
        if not self.is_coordinator:
            save.commit(data_end, len(meta), checksum, neutral=neutral)
        fut = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata, results):
        if self._save is None:
            return
        storage = {}
        for per_rank in results:
            storage.update({r.index: r.storage_data for r in per_rank})
        metadata.storage_data = storage
        blob = pickle.dumps(metadata, protocol=4)
        data_end, meta_size, checksum, neutral = self._sizes
        size = data_end + _ckpt._up(len(blob), 8)
        if size > self._save.region.slot_size:
            raise _ckpt.CheckpointError(
                f"checkpoint: the job's DCP metadata ({len(blob)} bytes) does not fit the room "
                f"kept for it in the coordinator's slot")
        m, base = self._save.map, self._save.base
        m[base + data_end:base + size] = blob + bytes(size - data_end - len(blob))
        checksum = _ckpt._crc(m, base + data_end, size - data_end, checksum)
        self._save.commit(size, meta_size, checksum, len(blob), neutral=neutral)

    def storage_meta(self):
        return None

    def stage(self, state_dict):
        """The state, its tensors copied (AsyncStager: what dcp.async_save blocks for)."""
        _ckpt._claim(self, self.step)  # the buffers are this save's until it is committed
        self._staged = True
        try:
            return self._stage(state_dict)
        except BaseException:
            _ckpt._release(self)
            raise

    def _stage(self, state_dict):
        tensors = []
        structure = _ckpt._flatten(state_dict, tensors)
        if any(type(t) not in (torch.Tensor, torch.nn.Parameter) for t in tensors):
            # A DTensor or ShardedTensor (FSDP, tensor parallel): torch's own stager copies those.
            stager = DefaultStager(StagingOptions(False, False, False, False))
            try:
                return stager.stage(state_dict)
            finally:
                stager.close()
        dma = _ckpt._cuda_bytes(tensors) >= _ckpt._PIN_FROM
        staged = [_stage_tensor(i, t, dma) for i, t in enumerate(tensors)]
        for device in {t.device for t in tensors if t.is_cuda} if dma else ():
            torch.cuda.synchronize(device)
        return _ckpt._unflatten(copy.deepcopy(structure), staged)  # the rest copied too


class _SlotFiles:
    """The agreed step's slots of every rank that saved it, as the agents assembled them for a
    world that changed since (DDPRUN_CHECKPOINT_RESHARD: rank_<R>.ddpckpt files of the persisted
    layout, slot 0 each, and the job's .metadata): each file mapped once, its items' places read
    from its own structure."""

    def __init__(self, folder, step):
        self.folder, self.step, self._files = folder, step, {}

    def metadata(self):
        try:
            with open(os.path.join(self.folder, ".metadata"), "rb") as f:
                return _ckpt._safe_loads(f.read())
        except FileNotFoundError:
            raise _ckpt.CheckpointError(
                f"checkpoint: step {self.step}: {self.folder} has no .metadata (the step was not "
                f"saved through torch.distributed.checkpoint?)") from None

    def place(self, relative_path, index):
        """(mapping, start of the data, the item's place) of item `index` in `relative_path`."""
        held = self._files.get(relative_path)
        if held is None:
            import mmap
            path = os.path.join(self.folder, relative_path)
            with open(path, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            state, step, size, _, _, meta_size, _, _ = _ckpt._read_record(m, 0)
            if m[:8] != _ckpt.MAGIC or state != _ckpt._COMMITTED or step != self.step:
                raise _ckpt.CheckpointError(f"checkpoint: {path} is not step {self.step}'s slot")
            kind, _, places = _ckpt._safe_loads(m[_ckpt.HEADER:_ckpt.HEADER + meta_size])[:3]
            held = self._files[relative_path] = (m, _ckpt.HEADER + _ckpt._up(meta_size, _ckpt._ALIGN),
                                                 places)
        m, start, places = held
        place = places.get(index)
        if place is None or place[0] == "at":
            raise _ckpt.CheckpointError(f"checkpoint: {index.fqn} is not in {relative_path}")
        return m, start, place


class MemoryStorageReader(StorageReader):
    """Reads the step the agents agreed on (checkpoint.agreed_step()) into dcp.load's state: this
    rank's own items from its region where the world size is the one the step was saved with
    (the agents put this global rank's own slot there, wherever it was held); where it changed
    (a node lost with no spare, or one gained), resharded as FileSystemReader would from a shared
    folder, from the slots of every rank that saved the step, which the agents gathered into
    memory on this node before the workers started."""

    def __init__(self):
        super().__init__()
        self._slot = None
        self._places = None
        self._files = None
        self._keepers = {}  # global rank: the node's slot keeping items of this rank's save

    def reset(self, checkpoint_id=None):
        self._slot = None
        self._files = None
        self._close_keepers()

    def _close_keepers(self):
        for keeper in self._keepers.values():
            keeper.close()
        self._keepers = {}

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return False

    def read_metadata(self, *args, **kwargs):
        step = _ckpt.agreed_step()
        if step is None:
            raise _ckpt.CheckpointError("checkpoint: no checkpoint to restore (a fresh start, or not "
                                        "started by ddprun): check checkpoint.agreed_step() first")
        if _ckpt.saved_world_size() != _ckpt._my_world():
            folder = os.environ.get("DDPRUN_CHECKPOINT_RESHARD")
            if not folder:
                raise _ckpt.CheckpointError(
                    f"checkpoint: step {step} was saved by {_ckpt.saved_world_size()} ranks and "
                    f"this job has {_ckpt._my_world()}, and the agents did not gather its slots "
                    f"for resharding (it was saved with checkpoint.save?)")
            self._files = _SlotFiles(folder, step)
            return self._files.metadata()
        self._slot = _ckpt._Committed(step)
        kind, state_md, self._places = self._slot.structure[:3]
        self._save = self._slot.structure[3] if len(self._slot.structure) > 3 else None
        if kind != "dcp":
            raise _ckpt.CheckpointError(f"checkpoint: step {step} was saved with checkpoint.save: "
                                        f"load it with checkpoint.load()")
        return Metadata(state_dict_metadata=state_md,
                        storage_data={index: index for index in self._places})

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def _place(self, index):
        if self._files is not None:
            info = self._storage.get(index)
            if info is None:
                raise _ckpt.CheckpointError(f"checkpoint: {index.fqn} is not in the checkpoint")
            return self._files.place(info.relative_path, index)
        place = self._places.get(index)
        if place is not None and place[0] == "at":  # kept by another rank of this node
            rank = place[1]
            keeper = self._keepers.get(rank)
            if keeper is None:
                keeper = self._keepers[rank] = _dcp_node_items.Keeper(self._slot, rank, self._save)
            place = keeper.places.get(index)
            if place is None or place[0] == "at":
                raise _ckpt.CheckpointError(
                    f"checkpoint: {index.fqn} is not in global rank {rank}'s slot, which "
                    f"this rank's checkpoint says keeps it")
            return keeper.map, keeper.data_start, place
        if place is None:
            raise _ckpt.CheckpointError(
                f"checkpoint: {index.fqn} is not in this rank's checkpoint (saved with another "
                f"sharding?)")
        return self._slot.map, self._slot.data_start, place

    def read_data(self, plan, planner):
        for req in plan.items:
            m, start, (at, data_at, length, nbytes, dtype, shape) = self._place(req.storage_index)
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(m[start + at:start + at + length]))
                continue
            src = torch.frombuffer(m, dtype=torch.uint8, offset=start + at + data_at,
                                   count=max(nbytes, 1))[:nbytes].view(dtype).view(shape)
            src = narrow_tensor_by_index(src, req.storage_offsets, req.lengths)
            target = planner.resolve_tensor(req).detach()
            if target.size() != src.size():
                raise _ckpt.CheckpointError(
                    f"checkpoint: {req.storage_index.fqn}: saved {tuple(src.size())}, asked for "
                    f"{tuple(target.size())}")
            target.copy_(src)
            planner.commit_tensor(req, target)
        try:
            for rank, keeper in self._keepers.items():
                if not keeper.still_there():
                    raise _ckpt.CheckpointError(
                        f"checkpoint: step {self._slot.step}: global rank {rank}'s slot keeping "
                        f"items of this rank's state was overwritten while it was read: the state "
                        f"read is not step {self._slot.step}'s")
        finally:
            self._close_keepers()
        fut = Future()
        fut.set_result(None)
        return fut
