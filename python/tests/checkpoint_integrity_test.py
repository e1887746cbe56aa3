"""ddprun.checkpoint without a job: a slot's checksum is its payload's CRC-32 (large ones summed in
pieces on threads, combined), checked before a byte reaches the caller: two 8-byte words swapped in
a saved slot (which a sum of the words, the check before, let through) are refused at load, the
caller's tensors untouched; put back, the same slot loads into them exactly. With torch 2 the same
through MemoryStorageReader. A save still under way when an in-process restart's wait for it ends
makes the restart refuse to go on in that process.

    checkpoint_integrity_test.py PACKAGE_DIR    (the folder holding the ddprun package)
"""
import mmap
import os
import struct
import sys
import tempfile

from fresh_package import expect_error, fresh, run


def word_sum(region, start, size):
    return sum(struct.unpack_from(f"<{size // 8}Q", region, start)) & 0xFFFFFFFFFFFFFFFF


def record_of(region, step):
    """(slot, payload size, structure size) of `step`'s committed slot in the region's bytes."""
    slot = [s for s in (0, 1) if struct.unpack_from("<Qq", region, 64 + 64 * s) == (2, step)][0]
    return (slot, struct.unpack_from("<Q", region, 64 + 64 * slot + 16)[0],
            struct.unpack_from("<Q", region, 64 + 64 * slot + 40)[0])


def swap_words(path, step, first, second):
    """Swaps the 8-byte words at payload offsets `first` and `second` of `step`'s slot; returns the
    word sums of the payload before and after."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as region:
        slot, size, _ = record_of(region, step)
        base = 4096 + slot * struct.unpack_from("<Q", region, 8)[0]
        before = word_sum(region, base, size)
        a, b = base + first, base + second
        region[a:a + 8], region[b:b + 8] = region[b:b + 8], region[a:a + 8]
        return before, word_sum(region, base, size)


def region_path(folder):
    return os.path.join(folder, "rank0")


def check_plain(package, folder, torch):
    ckpt = fresh(package)
    saved = {"w": torch.arange(4096, dtype=torch.float64), "b": torch.arange(512.0) * -1.5}
    ckpt.save(3, saved)
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "3"
    ckpt = fresh(package)
    live = {"w": torch.full((4096,), 7.0, dtype=torch.float64), "b": torch.full((512,), 7.0)}
    untouched = {k: v.clone() for k, v in live.items()}
    # The payload: the pickled structure, then "w" from a 64-byte boundary; swap two of w's words
    # (different values) far apart.
    with open(region_path(folder), "rb") as f:
        data = (record_of(f.read(4096), 3)[2] + 63) // 64 * 64
    before, after = swap_words(region_path(folder), 3, data + 8 * 10, data + 8 * 3000)
    assert before == after, "the swap changed the sum of the words: the test would prove nothing"
    expect_error(lambda: ckpt.load(into=live), "fails its checksum")
    for k in live:
        assert torch.equal(live[k], untouched[k]), f"the caller's {k} was overwritten"
    swap_words(region_path(folder), 3, data + 8 * 10, data + 8 * 3000)
    step, state = ckpt.load(into=live)
    assert step == 3 and all(torch.equal(live[k], saved[k]) for k in saved), "not as saved"
    assert all(state[k] is live[k] for k in live)


def check_dcp(package, folder, torch):
    import torch.distributed.checkpoint as dcp
    os.environ.pop("DDPRUN_CHECKPOINT_STEP", None)
    os.unlink(region_path(folder))
    ckpt = fresh(package)
    saved = {"w": torch.arange(4096, dtype=torch.float64)}
    dcp.save(saved, storage_writer=ckpt.MemoryStorageWriter(5))
    os.environ["DDPRUN_CHECKPOINT_STEP"] = "5"
    ckpt = fresh(package)
    live = {"w": torch.full((4096,), 7.0, dtype=torch.float64)}
    with open(region_path(folder), "rb") as f:
        _, size, _ = record_of(f.read(4096), 5)
    # Two words of the tensor's bytes, which lie in the middle of the payload.
    middle = size // 2 // 8 * 8
    before, after = swap_words(region_path(folder), 5, middle, middle + 8 * 100)
    assert before == after
    expect_error(lambda: dcp.load(live, storage_reader=ckpt.MemoryStorageReader()),
                 "fails its checksum", kind=None)
    assert torch.equal(live["w"], torch.full((4096,), 7.0, dtype=torch.float64))
    swap_words(region_path(folder), 5, middle, middle + 8 * 100)
    ckpt = fresh(package)
    dcp.load(live, storage_reader=ckpt.MemoryStorageReader())
    assert torch.equal(live["w"], saved["w"])


def check_crc_in_pieces(ckpt):
    """A large CRC summed in pieces on threads and combined is zlib's CRC of the whole, through
    libdeflate (where it is installed) and through zlib."""
    import zlib
    for size in (0, 1, 7, 4096, 1 << 20):
        a, b = os.urandom(size % 5000), os.urandom(size)
        assert ckpt._crc_combine(zlib.crc32(a), zlib.crc32(b), size) == zlib.crc32(a + b), size
    big = bytearray(os.urandom(1 << 20)) * 48  # 48 MiB: three pieces where there are the threads
    want = zlib.crc32(memoryview(big)[5:-8], 1234)
    assert ckpt._crc(big, 5, len(big) - 13, 1234) == want  # libdeflate's, where installed
    assert ckpt._crc(bytes(big[:4096]), 5, 4000) == zlib.crc32(big[5:4005])  # read-only: zlib's
    native, ckpt._crc32_at = ckpt._crc32_at, None
    try:
        assert ckpt._crc(big, 5, len(big) - 13, 1234) == want  # zlib's, in pieces
    finally:
        ckpt._crc32_at = native


def check_a_save_under_way_is_never_carried_into_the_next_attempt(ckpt):
    """An in-process restart whose save of the aborted attempt is still being written when the
    wait ends refuses to go on in this process (it would commit an abandoned step later)."""
    class Saver:  # a save that never ends (held here: the set holds weak references)
        step = 7

    ckpt._SAVES_END_WITHIN = 0.05
    saver = Saver()
    ckpt._in_flight.add(saver)
    try:
        expect_error(ckpt._restarted, "cannot take part in the next attempt")
    finally:
        ckpt._in_flight.clear()
    ckpt._restarted()  # nothing under way: goes on


def main():
    package = sys.argv[1]
    folder = tempfile.mkdtemp(dir="/dev/shm")
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "0", "RANK": "0",
                       "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "job"})
    import torch
    check_crc_in_pieces(fresh(package))
    check_a_save_under_way_is_never_carried_into_the_next_attempt(fresh(package))
    check_plain(package, folder, torch)
    dcp = int(torch.__version__.split(".")[0]) >= 2  # MemoryStorageReader needs torch 2
    if dcp:
        check_dcp(package, folder, torch)
    print("a CRC in pieces on threads is zlib's of the whole; two words swapped in a saved slot (its word sum unchanged): load() refuses it before a "
          "byte reaches the caller's tensors, and loads it exactly once they are put back"
          + (" (checkpoint.load and dcp.load)" if dcp else "") + ": passed")


if __name__ == "__main__":
    run(main)
