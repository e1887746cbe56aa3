"""The worker of scripts/bench/checkpoint_e2e.sh: a DDP job (gloo, 2 ranks) whose model and Adam state
take about 1 GiB per rank (five 4096x4096 layers and their moments; $WIDTH other than 4096 scales
them). Arguments: MODE STEPS OUT
[K KILL_AT]:
  none       no checkpoints (the job's own speed)
  ddprun     ddprun.checkpoint.save every step (replicated=True: DDP's state, held once per
             node), load() at the start of each attempt (run under ddprun; the training runs
             under ddprun.inprocess.run: under --restart_mode=in_process a rank that did not
             fail runs it again in its own process, keeping the model and optimizer)
  torchsave  rank 0 torch.save()s model and optimizer to OUT/ckpt.pt every K steps, every rank
             torch.load()s it at the start (run under torchrun)
  calibrate  times a step and a torch.save of the state, to OUT/calibration (JSON)
With KILL_AT, rank 1 SIGKILLs itself once step KILL_AT is done in the first attempt, writing the
time to OUT/killed first. Rank 0 appends "<wall time> <step> <attempt>" to OUT/steps once each step
is done, and writes "<step it resumes from> <wall time>" to OUT/resumed.<attempt> once its state
is loaded and it is about to train."""
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
every = int(sys.argv[4]) if len(sys.argv) > 4 else 0
kill_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
if mode == "ddprun":
    from ddprun import checkpoint, inprocess
torch.manual_seed(0)
width = int(os.environ.get("WIDTH", "4096"))  # scripts/bench/checkpoint_node_loss.sh: smaller
# Built once per process: under --restart_mode=in_process a rank that did not fail keeps them.
net = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(5)])
opt = torch.optim.Adam(net.parameters(), lr=1e-4)


def train_step(model, rank, step):
    g = torch.Generator().manual_seed(step * 10 + rank)
    x = torch.randn(8, width, generator=g)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def train():
    """One attempt: under ddprun's in-process restart, called again in the same process."""
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    model = DDP(net)
    start = 0
    ckpt = os.path.join(out, "ckpt.pt")
    if mode == "ddprun":
        step, state = checkpoint.load()
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            start = step + 1
    elif mode == "torchsave" and os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"] + 1
    if rank == 0:
        with open(os.path.join(out, f"resumed.{attempt}"), "w") as f:
            f.write(f"{start} {time.time()}")

    if mode == "calibrate":
        train_step(model, rank, -1)  # Adam's moments exist from here on: the state is whole
        times = []
        for step in range(3):
            began = time.perf_counter()
            train_step(model, rank, step)
            times.append(time.perf_counter() - began)
        began = time.perf_counter()
        if rank == 0:
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 0}, ckpt)
        saved = time.perf_counter() - began
        if rank == 0:
            with open(os.path.join(out, "calibration"), "w") as f:
                json.dump({"step": sorted(times)[1], "torch_save": saved}, f)
        dist.barrier()
        dist.destroy_process_group()
        sys.exit(0)

    for step in range(start, steps):
        train_step(model, rank, step)
        if mode == "ddprun":
            checkpoint.save(step, {"model": model.state_dict(), "optim": opt.state_dict()},
                            replicated=True)
        elif mode == "torchsave" and rank == 0 and (step + 1) % every == 0:
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if rank == 0:
            with open(os.path.join(out, "steps"), "a") as f:
                f.write(f"{time.time()} {step} {attempt}\n")
        if attempt == "0" and rank == 1 and step == kill_at:
            with open(os.path.join(out, "killed"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()


def warm():
    """A standby's warm-up (--standby_workers): a pass that changes no parameter."""
    net(torch.zeros(8, width)).sum().mul(0).backward()
    opt.zero_grad()


if mode == "ddprun":
    inprocess.warm_up(warm)  # (nothing outside a standby)
    inprocess.run(train)  # (a plain call under --restart_mode=process, the default)
else:
    train()
