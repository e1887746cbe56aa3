"""A deterministic DDP job (gloo, a small MLP and Adam) written for in-process restarts: the model and
optimizer are built once per process, and the training (process group, DDP, the checkpoint's load,
the steps) runs under ddprun.inprocess.run, saving an in-memory checkpoint every step. Arguments:
STEPS OUT_DIR. Each time the training begins, each rank writes its PID to
OUT_DIR/pid.<restart count>.<rank> and adds it as a line to OUT_DIR/begun.<rank>, and writes its
resident memory, threads and open descriptors to OUT_DIR/use.<restart count>.<rank>; rank 0 writes
the final parameters to OUT_DIR/final.pt. With $LOSE_AT=STEP, the ranks of node rank 1 write
OUT_DIR/held.<rank> after saving that step in the first attempt and wait there to be killed with
their node (the others go on into the next step, whose all-reduce waits for them). In the
first attempt, $FAULT="KIND:RANK:STEP" makes that rank, just after saving that step: kill (SIGKILL
itself), raise (a RuntimeError, its time in OUT_DIR/raised_at), or hang (sleep, alive and silent; with --hang_timeout); with
$FAULT_EVERY=N instead, rank 1 kills itself just after the first step it saves in each of the
first N attempts; with $RAISE_EVERY=1, rank 1 raises at step 1 in every attempt, before saving it
(every attempt after the first resumes step 0); with $FAULT="unsaved:RANK:STEP", that rank raises
at that step of the first attempt after the optimizer's step, before saving it. With $NO_API=1 the training is called directly, as a script that does not use
ddprun.inprocess. A standby (--standby_workers) warms up with a forward and backward pass that
changes nothing and writes OUT_DIR/warmed.<its pid> (the names of the rank variables it had); with
$WAIT_STANDBY=1, every rank waits (up to 60 s) at the fault's step for a standby to be ready."""
import glob
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import checkpoint, heartbeat, inprocess

torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
OPT = torch.optim.Adam(NET.parameters(), lr=0.01)


def resources():
    """(resident KiB, threads, open descriptors) of this process."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    return (int(status["VmRSS"].split()[0]), int(status["Threads"]),
            len(os.listdir("/proc/self/fd")))


def fault(rank, step, first, out):
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt == 0 and os.environ.get("GROUP_RANK") == "1" and \
            os.environ.get("LOSE_AT") == str(step):
        open(os.path.join(out, f"held.{rank}"), "w").close()
        time.sleep(300)
    if rank == 1 and step == first and attempt < int(os.environ.get("FAULT_EVERY", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
    kind, _, where = os.environ.get("FAULT", "").partition(":")
    if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0" or where.partition(":")[2] != str(step):
        return
    # Every rank waits for the standby (its .ready: ddprun.inprocess waits in run()), beating: none
    # waits in a collective meanwhile, none looks hung under --hang_timeout.
    if os.environ.get("WAIT_STANDBY") == "1":
        channels = os.path.dirname(os.environ["DDPRUN_INPROCESS_FILE"])
        deadline = time.monotonic() + 60
        while not glob.glob(os.path.join(channels, "standby.*.ready")):
            assert time.monotonic() < deadline, "no standby was ready within 60 s"
            heartbeat.beat()
            time.sleep(0.05)
    if where != f"{rank}:{step}":
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "raise":  # what torch raises for most errors of a training (a shape, a dtype)
        with open(os.path.join(out, "raised_at"), "w") as f:
            f.write(repr(time.time()))
        raise RuntimeError(f"rank {rank} fails at step {step}")
    if kind == "hang":
        time.sleep(300)


def train(steps, out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    with open(os.path.join(out, f"pid.{attempt}.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    with open(os.path.join(out, f"begun.{rank}"), "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(os.path.join(out, f"use.{attempt}.{rank}"), "w") as f:
        f.write(" ".join(map(str, resources())))
    model = DDP(NET)
    step, state = checkpoint.load()
    if state is not None:
        NET.load_state_dict(state["model"])
        OPT.load_state_dict(state["optim"])
    # DDP lays out its buckets after its first backward pass: one that changes nothing makes every
    # attempt's steps the same.
    model(torch.zeros(1, 32)).sum().mul(0).backward()
    OPT.zero_grad()
    first = 0 if step is None else step + 1
    for s in range(first, steps):
        gen = torch.Generator().manual_seed(1000 * s + rank)
        x = torch.randn(16, 32, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        OPT.zero_grad()
        loss.backward()
        OPT.step()
        if rank == 1 and s == 1 and os.environ.get("RAISE_EVERY") == "1":
            raise ValueError("rank 1 fails at step 1")
        if attempt == "0" and os.environ.get("FAULT") == f"unsaved:{rank}:{s}":
            raise RuntimeError(f"rank {rank} fails at step {s}, before saving it")
        checkpoint.save(s, {"model": NET.state_dict(), "optim": OPT.state_dict()})
        heartbeat.beat()
        fault(rank, s, first, out)
    if rank == 0:
        torch.save([p.detach().clone() for p in NET.parameters()], os.path.join(out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


def warm():
    NET(torch.zeros(1, 32)).sum().mul(0).backward()
    OPT.zero_grad()
    with open(os.path.join(sys.argv[2], f"warmed.{os.getpid()}"), "w") as f:
        f.write(" ".join(name for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")
                         if name in os.environ))


if __name__ == "__main__":
    inprocess.warm_up(warm)
    arguments = (int(sys.argv[1]), sys.argv[2])
    if os.environ.get("NO_API") == "1":
        train(*arguments)
    else:
        inprocess.run(train, *arguments)
