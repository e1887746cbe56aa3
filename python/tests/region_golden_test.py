"""ddprun.checkpoint against the region format's golden file (tests/data/region_v3.golden), which
the agent's reader and writer and libddp's reader are held to as well: the golden region read field
by field, its payloads' CRC-32 and run tag computed alike (through libdeflate where the package
finds it, and without), and a region this package writes puts each field where the golden does.

    region_golden_test.py PACKAGE_DIR GOLDEN_FILE
"""
import os
import struct
import sys
import tempfile

from fresh_package import fresh, run


def read_golden(path):
    """The golden region's bytes, and each line's (offset, value) by name."""
    data, fields = None, {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "size":
                data = bytearray(int(parts[1]))
                continue
            at, kind, value, name = int(parts[0]), parts[1], parts[2], parts[3]
            if kind == "text":
                data[at:at + len(value)] = value.encode()
                fields[name] = (at, value.encode())
            else:
                number = int(value)
                struct.pack_into("<q" if kind == "i64" else "<Q", data, at, number)
                fields[name] = (at, number)
    return bytes(data), fields


def main():
    package, golden = sys.argv[1], sys.argv[2]
    data, fields = read_golden(golden)
    value = {name: v for name, (_, v) in fields.items()}
    folder = tempfile.mkdtemp(dir="/dev/shm")
    os.environ.update({"DDPRUN_CHECKPOINT_DIR": folder, "LOCAL_RANK": "0", "RANK": "2",
                       "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "golden-run"})
    ckpt = fresh(package)

    assert data[:8] == ckpt.MAGIC == value["magic"], data[:8]
    assert struct.unpack_from("<Q", data, 8)[0] == value["slot_size"]
    for i in (0, 1):
        s = f"slot{i}."
        names = ("state", "step", "size", "checksum", "sequence", "structure_size",
                 "metadata_size", "world_size")
        assert ckpt._read_record(data, i) == tuple(value[s + n] for n in names), \
            (i, ckpt._read_record(data, i))
        assert ckpt._rank_of(data, i) == value[s + "rank"]
        assert struct.unpack_from("<Q", data, ckpt._RUN_AT + 8 * i)[0] == value[s + "run_tag"]
        assert struct.unpack_from("<Q", data, ckpt._SAVE_TIME + 8 * i)[0] == \
            value[s + "save_micros"]
        payload_at = ckpt.HEADER + i * value["slot_size"]
        assert data[payload_at:payload_at + value[s + "size"]] == value[s + "payload"]
        for m in (data, bytearray(data)):  # read-only: zlib's CRC; writable: the native one
            assert ckpt._crc(m, payload_at, value[s + "size"]) == value[s + "checksum"], (i, m)
        structure = data[payload_at:payload_at + value[s + "structure_size"]]
        assert struct.unpack_from("<Q", data, ckpt._DIGEST_AT + 8 * i)[0] == \
            value[s + "state_digest"] == ckpt.state_digest(
                data, payload_at, value[s + "size"], value[s + "structure_size"],
                value[s + "checksum"], structure), i
    assert ckpt.run_tag("golden-run") == value["slot0.run_tag"]
    assert ckpt._COMMITTED == value["slot0.state"]

    # A save of this package's: rank 2 of 4, run "golden-run", step 7, in slot 0 of a new region.
    ckpt.save(7, {"position": 40})
    with open(os.path.join(folder, "rank0"), "rb") as f:
        written = f.read()
    assert written[:8] == value["magic"]
    for name in ("slot0.state", "slot0.step", "slot0.world_size", "slot0.rank", "slot0.run_tag"):
        at, expected = fields[name]
        kind = "<q" if name in ("slot0.step", "slot0.rank") else "<Q"
        assert struct.unpack_from(kind, written, at)[0] == expected, (name, written[at:at + 8])
    def word(name):
        return struct.unpack_from("<Q", written, fields[name][0])[0]
    slot_size, size = word("slot_size"), word("slot0.size")
    assert len(written) == ckpt.HEADER + 2 * slot_size and 0 < size <= slot_size, (slot_size, size)
    assert word("slot0.checksum") == ckpt._crc(written, ckpt.HEADER, size)
    assert word("slot0.sequence") >= 1 and 0 < word("slot0.structure_size") <= size
    assert word("slot0.metadata_size") == 0 and word("slot0.save_micros") > 0
    assert word("slot0.state_digest") == ckpt.state_digest(
        written, ckpt.HEADER, size, word("slot0.structure_size"), word("slot0.checksum"),
        written[ckpt.HEADER:ckpt.HEADER + word("slot0.structure_size")])
    assert all(word(f"slot1.{n}") == 0
               for n in ("state", "size", "sequence", "run_tag", "state_digest"))
    print("the golden region read field by field, its CRCs and run tag alike; a save writes each "
          "field where the golden puts it: passed")


if __name__ == "__main__":
    run(main)
