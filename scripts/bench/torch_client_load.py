"""torch's Python TCPStore client as load: N processes loop set/get/add of 64-byte values on their own
keys for S seconds. Prints aggregate operations per second."""
import argparse
import datetime
import multiprocessing as mp
import time

import torch.distributed as dist


def worker(port, seconds, index, ready, out):
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
    value = b"v" * 64
    key, counter = f"bench/{index}", f"bench/{index}/n"
    ready.wait()  # every process connected: the measured window starts now
    ops, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(50):
            store.set(key, value)
            store.get(key)
            store.add(counter, 1)
        ops += 150
    out.put(ops)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    ready, out = mp.Barrier(a.procs + 1), mp.Queue()
    procs = [mp.Process(target=worker, args=(a.port, a.seconds, i, ready, out)) for i in range(a.procs)]
    for p in procs:
        p.start()
    ready.wait()
    t0 = time.monotonic()
    total = sum(out.get() for _ in procs)
    elapsed = time.monotonic() - t0
    for p in procs:
        p.join()
    print(f"{total / elapsed:.0f}")


if __name__ == "__main__":
    main()
