"""A worker for scripts/gpu-test.sh: torch.distributed.checkpoint saves of CUDA tensors through
ddprun's MemoryStorageWriter, the worker killed, and the restarted one's dcp.load through
MemoryStorageReader giving them back into CUDA tensors, bit for bit. Times the last of three saves
of 1 GiB against copying the tensors to page-locked host memory. Prints one line per attempt."""
import os
import signal
import sys
import time

import torch
import torch.distributed.checkpoint as dcp
from ddprun import checkpoint

attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))


def state_of(step):
    g = torch.Generator(device="cuda").manual_seed(step)
    return {f"p{i}": torch.rand(4 << 20, device="cuda", generator=g) for i in range(64)}


if attempt == "0":
    for step in range(3):
        state = state_of(step)
        torch.cuda.synchronize()
        started = time.perf_counter()
        dcp.save(state, storage_writer=checkpoint.MemoryStorageWriter(step), no_dist=True)
        saved = time.perf_counter() - started
    locked = {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for k, t in state.items()}
    torch.cuda.synchronize()
    started = time.perf_counter()
    for k, t in state.items():
        locked[k].copy_(t, non_blocking=True)
    torch.cuda.synchronize()
    copied = time.perf_counter() - started
    print(f"attempt 0: dcp.save of 1 GiB of CUDA tensors {saved:.3f} s, copy to page-locked host "
          f"memory {copied:.3f} s ({saved / copied:.2f}x)", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

step = checkpoint.agreed_step()
state = {k: torch.zeros_like(t) for k, t in state_of(0).items()}
started = time.perf_counter()
dcp.load(state, storage_reader=checkpoint.MemoryStorageReader(), no_dist=True)
torch.cuda.synchronize()
loaded = time.perf_counter() - started
want = state_of(2)
same = step == 2 and all(torch.equal(state[k], want[k]) for k in want)
print(f"attempt 1: dcp.load -> step {step} in {loaded:.3f} s, bit-identical={same}", flush=True)
sys.exit(0 if same else 1)
