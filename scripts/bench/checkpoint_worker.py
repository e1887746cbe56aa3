"""The worker of scripts/bench/checkpoint.sh, one per rank under ddprun: a state of about 1 GiB per
rank in 681 tensors (a model's parameters and Adam's two moments, 227 tensors each, plus the step),
saved RUNS times each way after a warm-up, medians in seconds to OUT/<way>.<rank>:
  floor       copying every tensor into host memory already allocated and touched
  ddprun      ddprun.checkpoint.save (the call to return)
  ddprun_dcp  torch.distributed.checkpoint.save through checkpoint.MemoryStorageWriter (torch 2.x)
  ddprun_dcp_async  dcp.async_save through it: the call to return (torch stages the state in
              memory of its own; the write into the region follows in a thread, awaited untimed)
  torch_file  torch.save to a file in TMPDIR
  torch_shm   torch.save to a file in /dev/shm
  dcp         torch.distributed.checkpoint.save with FileSystemWriter (torch 2.x)
Then the worker SIGKILLs itself; the restarted one times checkpoint.load() (new tensors,
restore_new) and checkpoint.load(into=...) (into tensors it has, restore) and the floor again, and
checks the restored tensors bit for bit."""
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import torch
from ddprun import checkpoint

out, runs = sys.argv[1], int(sys.argv[2])
rank = os.environ["RANK"]
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]


def state_of(seed):
    g = torch.Generator().manual_seed(seed)
    # 227 tensors of 384 Ki floats (1.5 MiB) per part: 3 x 340.5 MiB.
    part = [torch.rand(384 << 10, generator=g) for _ in range(227)]
    return {"model": part, "exp_avg": [t * 0.5 for t in part], "exp_avg_sq": [t * t for t in part],
            "step": torch.tensor(seed)}


def tensors(state):
    return [*state["model"], *state["exp_avg"], *state["exp_avg_sq"], state["step"]]


def median_time(action, n):
    action()  # warm-up
    times = []
    for _ in range(n):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def floor_time(state):
    targets = [torch.empty_like(t).fill_(0) for t in tensors(state)]  # allocated and touched

    def copy():
        for dst, src in zip(targets, tensors(state)):
            dst.copy_(src)
    return median_time(copy, runs)


def record(way, seconds):
    with open(os.path.join(out, f"{way}.{rank}"), "w") as f:
        f.write(repr(seconds))


state = state_of(int(rank) + 1)
if attempt == "0":
    record("floor", floor_time(state))
    step = [0]
    try:
        import torch.distributed.checkpoint as dcp
        flat = {f"t{i}": t for i, t in enumerate(tensors(state))}

        def save_dcp():
            step[0] += 1
            dcp.save(flat, storage_writer=checkpoint.MemoryStorageWriter(step[0]), no_dist=True)
        record("ddprun_dcp", median_time(save_dcp, runs))
        times = []
        for _ in range(runs + 1):  # the first a warm-up
            step[0] += 1
            started = time.perf_counter()
            written = dcp.async_save(flat, storage_writer=checkpoint.MemoryStorageWriter(step[0]),
                                     no_dist=True)
            times.append(time.perf_counter() - started)
            written.result()
        record("ddprun_dcp_async", statistics.median(times[1:]))
    except (ImportError, AttributeError, TypeError):
        pass  # torch 1.13: no dcp.save

    def save():  # last, so that the step restored is a plain one
        step[0] += 1
        checkpoint.save(step[0], state)
    record("ddprun", median_time(save, runs))
    scratch = tempfile.mkdtemp()
    shm = tempfile.mkdtemp(dir="/dev/shm")
    try:
        record("torch_file",
               median_time(lambda: torch.save(state, os.path.join(scratch, "s.pt")), runs))
        record("torch_shm", median_time(lambda: torch.save(state, os.path.join(shm, "s.pt")), runs))
    finally:
        shutil.rmtree(shm)
    try:
        import torch.distributed.checkpoint as dcp
        flat = {f"t{i}": t for i, t in enumerate(tensors(state))}
        n = [0]

        def dcp_save():
            n[0] += 1
            dcp.save(flat, storage_writer=dcp.FileSystemWriter(os.path.join(scratch, str(n[0]))),
                     no_dist=True)
        record("dcp", median_time(dcp_save, runs))
    except (ImportError, AttributeError, TypeError):
        pass  # torch 1.13: no dcp.save
    shutil.rmtree(scratch)
    # Every rank's measurements written before one dies (a death stops the others' at once).
    record("measured", 0)
    deadline = time.monotonic() + 300
    while not all(os.path.exists(os.path.join(out, f"measured.{r}"))
                  for r in range(int(os.environ["WORLD_SIZE"]))) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)

started = time.perf_counter()
step, restored = checkpoint.load()
record("restore_new", time.perf_counter() - started)
same = all(torch.equal(a, b) for a, b in zip(tensors(restored), tensors(state)))
del restored
# Into tensors the worker already has (a model and optimizer built, before their state is loaded).
target = {"model": [torch.zeros_like(t) for t in state["model"]],
          "exp_avg": [torch.zeros_like(t) for t in state["model"]],
          "exp_avg_sq": [torch.zeros_like(t) for t in state["model"]],
          "step": torch.tensor(0)}
started = time.perf_counter()
checkpoint.load(into=target)
record("restore", time.perf_counter() - started)
same = same and all(torch.equal(a, b) for a, b in zip(tensors(target), tensors(state)))
record("floor_restore", floor_time(state))
with open(os.path.join(out, f"same.{rank}"), "w") as f:
    f.write(str(same))
