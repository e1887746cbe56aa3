"""The in-process restart bench's job (scripts/bench/inprocess_restart.py): DDP over gloo on a model
under torch.compile (inductor's CPU backend: seconds to compile, as a GPU job's start-up is), a
checkpoint saved in memory every step (ddprun.checkpoint under ddprun; torch.save into /dev/shm
under torchrun, which has nothing else), the training run under ddprun.inprocess.run (a plain call
but with --restart_mode=in_process). Arguments: STEPS OUT. Each rank appends "<time> <restart>
<step>" to OUT/steps.<rank> after each step; in the first attempt, rank 1 writes the time to
OUT/fault and then, just after saving step $FAULT_STEP, SIGKILLs itself ($FAULT=kill) or raises
($FAULT=raise: a RuntimeError, as torch raises for most errors). A standby of ddprun's
(--standby_workers) warms up with a compiled step on zeros; with $WAIT_STANDBY=1 rank 1 waits for a
standby to be ready (up to 120 s) before it fails, and before it writes the time."""
import glob
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import inprocess

torch.manual_seed(0)
WIDTH = 512
NET = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(WIDTH, WIDTH),
                                                          torch.nn.GELU())], torch.nn.Linear(WIDTH, 1))
COMPILED = torch.compile(NET)
OPT = torch.optim.SGD(NET.parameters(), lr=0.001)
UNDER_DDPRUN = "DDPRUN_CHECKPOINT_DIR" in os.environ


def load(out):
    if UNDER_DDPRUN:
        from ddprun import checkpoint
        return checkpoint.load()
    path = os.path.join(out, f"ckpt.{os.environ['RANK']}.pt")
    if not os.path.exists(path):
        return None, None
    saved = torch.load(path)
    return saved["step"], saved["state"]


def save(out, step, state):
    if UNDER_DDPRUN:
        from ddprun import checkpoint
        checkpoint.save(step, state)
        return
    path = os.path.join(out, f"ckpt.{os.environ['RANK']}.pt")
    torch.save({"step": step, "state": state}, path + ".tmp")
    os.replace(path + ".tmp", path)


def wait_for_standby():
    if os.environ.get("WAIT_STANDBY") != "1":
        return
    channels = os.path.dirname(os.environ["DDPRUN_INPROCESS_FILE"])
    deadline = time.monotonic() + 120
    while not glob.glob(os.path.join(channels, "standby.*.ready")):
        assert time.monotonic() < deadline, "no standby was ready within 120 s"
        time.sleep(0.05)


def warm():
    """What a standby does before it waits: the compiling a replacement's first step would do."""
    COMPILED(torch.zeros(64, WIDTH)).pow(2).mean().backward()
    OPT.zero_grad()


def train(steps, out):
    dist.init_process_group("gloo")
    rank, attempt = dist.get_rank(), os.environ["TORCHELASTIC_RESTART_COUNT"]
    model = DDP(COMPILED)
    step, state = load(out)
    if state is not None:
        NET.load_state_dict(state["model"])
        OPT.load_state_dict(state["optim"])
    fault_step = int(os.environ.get("FAULT_STEP", "-1"))
    with open(os.path.join(out, f"steps.{rank}"), "a") as log:
        for s in range(0 if step is None else step + 1, steps):
            gen = torch.Generator().manual_seed(1000 * s + rank)
            x = torch.randn(64, WIDTH, generator=gen)
            loss = model(x).pow(2).mean()
            OPT.zero_grad()
            loss.backward()
            OPT.step()
            save(out, s, {"model": NET.state_dict(), "optim": OPT.state_dict()})
            log.write(f"{time.time():.6f} {attempt} {s}\n")
            log.flush()
            if attempt == "0" and rank == 1 and s == fault_step:
                wait_for_standby()
                with open(os.path.join(out, "fault"), "w") as f:
                    f.write(f"{time.time():.6f}")
                if os.environ.get("FAULT") == "raise":
                    raise RuntimeError(f"rank 1 fails after step {s}")  # (as torch raises)
                os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    inprocess.warm_up(warm)
    inprocess.run(train, int(sys.argv[1]), sys.argv[2])
