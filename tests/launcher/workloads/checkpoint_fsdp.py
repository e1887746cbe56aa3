"""A deterministic FSDP2 job (torch 2: fully_shard on CPU over gloo, a small MLP and Adam) whose state
is sharded across the ranks: each rank holds its own shard of every parameter and of Adam's state.
It saves through torch.distributed.checkpoint into ddprun's memory every step
(checkpoint.MemoryStorageWriter) and resumes from checkpoint.MemoryStorageReader, which reshards
where the world size changed. Arguments: STEPS OUT_DIR. Rank 0 writes the full parameters and
optimizer state at the end to OUT_DIR/final.pt; each rank the step it resumed from to
OUT_DIR/resumed.<rank>@<world>.
$HOLD_AT=STEP[@W],...: after saving STEP (at world size W, or any), the first time, each rank writes
OUT_DIR/held.<STEP>.<rank> and waits (bounded) for the test to take a node away.
The reference runs: $REF_SAVE=DIR saves the last step with stock dcp.save into DIR (FileSystemWriter);
$REF_LOAD=DIR starts from DIR with stock FileSystemReader (the step in DIR/step).
For scripts/bench/checkpoint_reshard.sh: $FSDP_WIDTH=W makes the model $FSDP_LAYERS (8) layers of
W x W, and each rank writes how long its load took (seconds) to OUT_DIR/load_seconds.<rank>@<world>.
For in-process restarts: with $INPROCESS=1 the training runs under ddprun.inprocess.run (everything
built anew each time, in the same process); each rank writes its PID to
OUT_DIR/pid.<restart count>.<rank>, and $KILL_AT=RANK:STEP makes that rank SIGKILL itself just
after saving STEP in the first attempt."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                     get_optimizer_state_dict, get_state_dict,
                                                     set_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ddprun import checkpoint


def hold_here(out, step, world):
    for spec in filter(None, os.environ.get("HOLD_AT", "").split(",")):
        at, _, only = spec.partition("@")
        if at == str(step) and (not only or only == str(world)):
            marker = os.path.join(out, f"held.{step}.{dist.get_rank()}")
            if os.path.exists(marker):
                return  # held here once already: this attempt goes on
            open(marker, "w").close()
            time.sleep(120)


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    with open(os.path.join(out, f"pid.{attempt}.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    width = int(os.environ.get("FSDP_WIDTH", "0"))
    if width:
        layers = [torch.nn.Linear(32, width)]
        for _ in range(int(os.environ.get("FSDP_LAYERS", "8"))):
            layers += [torch.nn.Tanh(), torch.nn.Linear(width, width)]
        model = torch.nn.Sequential(*layers, torch.nn.Tanh(), torch.nn.Linear(width, 1))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(32, 96), torch.nn.Tanh(),
                                    torch.nn.Linear(96, 40), torch.nn.Tanh(),
                                    torch.nn.Linear(40, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    # Adam's state exists from the first step on: a zero step makes it, so that a load has
    # somewhere to put it (and changes nothing: the gradients are zero, Adam's step is undone).
    model(torch.zeros(1, 32)).sum().mul(0).backward()
    opt.step()
    opt.zero_grad()
    for group in opt.param_groups:
        for p in group["params"]:
            opt.state[p]["step"].zero_()
            opt.state[p]["exp_avg"].zero_()
            opt.state[p]["exp_avg_sq"].zero_()
    first = 0
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    started = time.perf_counter()
    if os.environ.get("REF_LOAD"):
        src = os.environ["REF_LOAD"]
        dcp.load(state, storage_reader=dcp.FileSystemReader(src))
        first = int(open(os.path.join(src, "step")).read()) + 1
    elif checkpoint.agreed_step() is not None:
        dcp.load(state, storage_reader=checkpoint.MemoryStorageReader())
        first = checkpoint.agreed_step() + 1
    if first:
        with open(os.path.join(out, f"load_seconds.{rank}@{world}"), "w") as f:
            f.write(str(time.perf_counter() - started))
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    with open(os.path.join(out, f"resumed.{rank}@{world}"), "w") as f:
        f.write(str(first - 1) if first else "none")
    for s in range(first, steps):
        gen = torch.Generator().manual_seed(1000 * s + rank)
        x = torch.randn(8, 32, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        model_sd, optim_sd = get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.save(state, storage_writer=checkpoint.MemoryStorageWriter(s))
        hold_here(out, s, world)
        if attempt == "0" and os.environ.get("KILL_AT") == f"{rank}:{s}":
            os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("REF_SAVE"):
        dcp.save(state, storage_writer=dcp.FileSystemWriter(os.environ["REF_SAVE"]))
        if rank == 0:
            with open(os.path.join(os.environ["REF_SAVE"], "step"), "w") as f:
                f.write(str(steps - 1))
    full = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_full = get_model_state_dict(model, options=full)
    optim_full = get_optimizer_state_dict(model, opt, options=full)
    if rank == 0:
        torch.save({"model": model_full, "optim": optim_full}, os.path.join(out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if os.environ.get("INPROCESS") == "1":
        from ddprun import inprocess
        inprocess.run(main)
    else:
        main()
