"""Differential test of the store: the same random sequence of operations, through PyTorch's own
TCPStore client, against torch's TCPStore server and against ddprund; every result must be equal.

    torch_store_differential.py DDPRUND [PYTHON] [SEEDS] [OPS]

starts ddprund here and runs the client part under PYTHON (default this python; scripts/torch2/python
for torch 2.14), which also starts torch's server. Two clients per server take turns at random. An
operation that depends on an earlier result (a get only of a key that check() says exists) keeps the
two runs in step exactly as long as the servers agree, so no model of the store is needed.

set, append and multi_set have no reply in torch's protocol, so a write on one connection and a read
on the other may be served in either order, by either server: each operation is settled by a round
trip on its own connection before the next one starts.
"""
import datetime
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))

KEYS = [f"k{i}" for i in range(6)]
COUNTERS = [f"c{i}" for i in range(3)]
QUEUES = [f"q{i}" for i in range(2)]


def run_sequence(port, seed, ops, torch_modern):
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=20)
    clients = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
               for _ in range(2)]
    rng = random.Random(seed)
    log = []

    def value():
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 3, 17, 300])))

    def record(name, fn):
        try:
            log.append((name, fn()))
        except Exception as e:  # the same failure on both servers is a match
            log.append((name, "raised " + type(e).__name__))
        s.num_keys()  # settled: served after everything this connection sent

    kinds = ["set", "get", "add", "compare_set", "delete_key", "num_keys", "wait"]
    if torch_modern:
        kinds += ["check", "append", "multi_get", "multi_set"]
        if hasattr(clients[0], "queue_push"):  # torch 2.5+: every other operation of its client
            kinds += ["list_keys", "queue_push", "queue_pop", "queue_len", "barrier", "clone",
                      "has_extended_api"]
    barriers = 0
    for _ in range(ops):
        s = rng.choice(clients)
        kind = rng.choice(kinds)
        k = rng.choice(KEYS)
        if kind == "set":
            v = value()
            record(f"set {k}", lambda: s.set(k, v))
        elif kind == "get":
            # Only what exists: a get of a missing key waits for it.
            record(f"get {k}", lambda: s.get(k) if s.check([k]) else "absent")
        elif kind == "add":
            c, d = rng.choice(COUNTERS), rng.randrange(-5, 6)
            record(f"add {c} {d}", lambda: s.add(c, d))
        elif kind == "compare_set":
            current = s.get(k) if s.check([k]) else b""
            expected = rng.choice([current, b"", value()])
            desired = value()
            record(f"compare_set {k}", lambda: s.compare_set(k, expected, desired))
        elif kind == "delete_key":
            key = rng.choice(KEYS + COUNTERS)
            record(f"delete_key {key}", lambda: s.delete_key(key))
        elif kind == "num_keys":
            record("num_keys", lambda: s.num_keys())
        elif kind == "wait":
            present = [key for key in KEYS if s.check([key])]
            ks = rng.sample(present, min(len(present), 2)) if present else [k]
            wait_timeout = datetime.timedelta(milliseconds=200 if not present else 5000)
            record(f"wait {ks}", lambda: s.wait(ks, wait_timeout))
        elif kind == "check":
            ks = rng.sample(KEYS + COUNTERS, 3)
            record(f"check {ks}", lambda: s.check(ks))
        elif kind == "append":
            v = value()
            record(f"append {k}", lambda: s.append(k, v))
        elif kind == "multi_get":
            present = [key for key in KEYS if s.check([key])]
            ks = rng.sample(present, min(len(present), 3))
            record(f"multi_get {ks}", lambda: s.multi_get(ks) if ks else [])
        elif kind == "multi_set":
            ks = rng.sample(KEYS, 2)
            vs = [value(), value()]
            record(f"multi_set {ks}", lambda: s.multi_set(ks, vs))
        elif kind == "list_keys":
            record("list_keys", lambda: sorted(s.list_keys()))
        elif kind == "queue_push":
            q, v = rng.choice(QUEUES), value().hex()
            record(f"queue_push {q}", lambda: s.queue_push(q, v))
        elif kind == "queue_pop":
            q = rng.choice(QUEUES)
            # Only what is there: a blocking pop of an empty queue waits for a push.
            record(f"queue_pop {q}", lambda: s.queue_pop(q, block=False) if s.queue_len(q) else "empty")
        elif kind == "queue_len":
            q = rng.choice(QUEUES)
            record(f"queue_len {q}", lambda: s.queue_len(q))
        elif kind == "barrier":
            barriers += 1
            name = f"b{barriers}"
            record(f"barrier {name}", lambda: s.barrier(name, 1, timeout))
        elif kind == "clone":
            record("clone num_keys", lambda: s.clone().num_keys())
        elif kind == "has_extended_api":
            record("has_extended_api", lambda: s.has_extended_api())
    final = [(key, clients[0].get(key) if clients[0].check([key]) else None)
             for key in KEYS + COUNTERS]
    if hasattr(clients[0], "list_keys"):
        final.append(("list_keys", sorted(clients[0].list_keys())))
    return log, final


def client(ddprund_port, seeds, ops):
    import torch
    import torch.distributed as dist

    modern = torch.__version__ >= "2"
    assert modern, f"torch {torch.__version__}'s TCPStore has no check(); this test needs torch 2.x"
    reference = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=20))
    total = 0
    for seed in range(1, seeds + 1):
        # Each seed on fresh keys: a prefix store keeps the two servers' key spaces alike.
        theirs = run_sequence(reference.port, seed, ops, modern)
        ours = run_sequence(ddprund_port, seed, ops, modern)
        for i, (a, b) in enumerate(zip(theirs[0], ours[0])):
            assert a == b, f"seed {seed}, operation {i}: torch's server {a!r}, ddprund {b!r}"
        assert theirs[1] == ours[1], (seed, theirs[1], ours[1])
        total += len(ours[0])
        for port in (reference.port, ddprund_port):  # the next seed starts from empty stores
            store = dist.TCPStore("127.0.0.1", port, is_master=False)
            keys = store.list_keys() if hasattr(store, "list_keys") else KEYS + COUNTERS
            for key in keys:
                store.delete_key(key)
    print(f"torch {torch.__version__}: {total} operations over {seeds} seeds, "
          "torch's server and ddprund gave equal results")


def main(binary, python, seeds, ops):
    from ddprund_process import Ddprund

    with Ddprund(binary) as server:
        r = subprocess.run([python, os.path.abspath(__file__), "--client", str(server.port),
                            str(seeds), str(ops)], timeout=600)
        status, err = server.stop()
        assert r.returncode == 0, "the differential run failed"
        assert status == 0, (status, err)


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        client(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        args = sys.argv[1:] + [None] * 3
        main(args[0], args[1] or sys.executable, int(args[2] or 5), int(args[3] or 400))
