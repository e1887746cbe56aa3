"""A worker for scripts/gpu-test.sh's in-memory checkpoint check: CUDA tensors saved through
ddprun.checkpoint, the worker killed, and the restarted one's load() giving them back on the GPU,
bit for bit. Also times a save and a load of 1 GiB of CUDA tensors against copying them to host
memory that is already allocated and touched (the floor), pageable and page-locked (a save of that
much registers the region with CUDA once: its first save pays for it). Prints one line per attempt."""
import os
import signal
import sys
import time

import torch
from ddprun import checkpoint

attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def state_of(step):
    g = torch.Generator(device="cuda").manual_seed(step)
    # 1 GiB in 64 tensors of 16 MiB, as a model's parameters and optimizer state would be.
    return {"params": [torch.rand(4 << 20, device="cuda", generator=g) for _ in range(64)],
            "step": torch.tensor(step, device="cuda"), "host": torch.full((3,), float(step))}


def copy_time(floor, state, non_blocking):
    torch.cuda.synchronize()
    started = time.perf_counter()
    for dst, src in zip(floor, state["params"]):
        dst.copy_(src, non_blocking=non_blocking)
    torch.cuda.synchronize()
    return time.perf_counter() - started


if attempt == "0":
    saves = []
    for step in range(3):
        state = state_of(step)
        torch.cuda.synchronize()
        started = time.perf_counter()
        checkpoint.save(step, state)
        saves.append(time.perf_counter() - started)
    saved = saves[-1]
    pageable = [torch.empty(t.shape, dtype=t.dtype).fill_(0) for t in state["params"]]
    locked = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True).fill_(0) for t in state["params"]]
    copied, copied_locked = copy_time(pageable, state, False), copy_time(locked, state, True)
    print(f"attempt 0: save of 1 GiB of CUDA tensors {saved:.3f} s (the first, registering the "
          f"region: {saves[0]:.3f} s; region page-locked: {checkpoint._region.pinned}), copy to "
          f"touched host memory {copied:.3f} s ({saved / copied:.2f}x), to page-locked host memory "
          f"{copied_locked:.3f} s ({saved / copied_locked:.2f}x)", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

started = time.perf_counter()
step, state = checkpoint.load()
torch.cuda.synchronize()
loaded = time.perf_counter() - started
want = state_of(2)
same = step == 2 and all(torch.equal(a, b) for a, b in zip(state["params"], want["params"])) \
    and torch.equal(state["step"], want["step"]) and torch.equal(state["host"], want["host"])
on_gpu = all(t.is_cuda for t in state["params"]) and state["step"].is_cuda and not state["host"].is_cuda
print(f"attempt 1: load -> step {step} in {loaded:.3f} s, bit-identical={same}, devices kept={on_gpu}",
      flush=True)
sys.exit(0 if same and on_gpu else 1)
