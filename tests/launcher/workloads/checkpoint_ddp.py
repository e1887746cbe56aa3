"""A deterministic DDP job (gloo, a small MLP and Adam) that saves an in-memory checkpoint every step
through ddprun.checkpoint and resumes from the one load() returns. Arguments: STEPS OUT_DIR; with
$KILL_AT="RANK:STEP", that rank SIGKILLs itself just after saving that step in the first attempt.
Rank 0 writes the final parameters to OUT_DIR/final.pt, with $SAVE_PARAMS each step's parameters to
OUT_DIR/params.<step>.pt, and each rank the step it resumed from to OUT_DIR/resumed.<attempt>.<rank>;
with $HOLD_AT=STEP, each rank writes OUT_DIR/held.<rank> after saving that step in the first attempt
and waits there (for the test to kill its node); STEP@W holds only at world size W and writes
OUT_DIR/held@W.<rank>; STEP~TAG holds in any attempt, but only where OUT_DIR/held~TAG.<rank> is not
there yet, and writes it; several are comma-separated. $WIDTH sets the hidden layer's width (64);
with $CKPT_REPLICATED=1 the saves say that the state is the same on every rank (replicated=True):
the node holds it once. With $CKPT_TWICE=1 each step's state is saved twice under its number (a
periodic save and a final one on the same step). With $PAUSE_AT=STEP:SECONDS each rank pauses
that long after saving that step in the first attempt (the agents copy a paused job's newest step).
With $WAIT_AT=STEP each rank, after saving that step where OUT_DIR/waited.<rank> is not there yet,
writes it and waits (bounded) for OUT_DIR/go.
With $CKPT_API=dcp (torch 2) the checkpoints go through torch.distributed.checkpoint and
checkpoint.MemoryStorageWriter/MemoryStorageReader instead; with $CKPT_API=dcp_async through
dcp.async_save (on a gloo group of its own, each save's future awaited before the next save, as
torch's documentation has it)."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import checkpoint


def held_at(step, world_size, attempt, out, rank):
    """The file's prefix where $HOLD_AT says to hold after saving `step`, else None: "held." for
    STEP and "held@W." for STEP@W (in the first attempt; only at world size W), "held~TAG." for
    STEP~TAG (once per rank and tag); several, comma-separated."""
    for spec in filter(None, os.environ.get("HOLD_AT", "").split(",")):
        at, tilde, tag = spec.partition("~")
        if tilde:
            if at == str(step) and not os.path.exists(os.path.join(out, f"held~{tag}.{rank}")):
                return f"held~{tag}."
            continue
        at, _, world = spec.partition("@")
        if attempt == "0" and at == str(step) and (not world or world == str(world_size)):
            return f"held@{world}." if world else "held."
    return None


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    torch.manual_seed(0)
    width = int(os.environ.get("WIDTH", "64"))
    replicated = os.environ.get("CKPT_REPLICATED") == "1"
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.Tanh(),
                                    torch.nn.Linear(width, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    dcp_api = os.environ.get("CKPT_API", "").startswith("dcp")
    saving, async_group = None, None
    if os.environ.get("CKPT_API") == "dcp_async":
        async_group = dist.new_group(backend="gloo")
    if dcp_api:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        step = checkpoint.agreed_step()
        if step is not None:
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, storage_reader=checkpoint.MemoryStorageReader())
            set_state_dict(model, opt, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
    else:
        step, state = checkpoint.load()
        if state is not None:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
    with open(os.path.join(out, f"resumed.{attempt}.{rank}"), "w") as f:
        f.write("none" if step is None else str(step))
    # DDP lays out its gradient buckets anew after its first backward pass, and with more than two
    # ranks the sums' order follows the layout: a pass that changes nothing makes the layout of
    # every training step the same whichever step an attempt starts from.
    model(torch.zeros(1, 32)).sum().mul(0).backward()
    opt.zero_grad()
    kill = os.environ.get("KILL_AT", "")
    pause_step, _, pause_seconds = os.environ.get("PAUSE_AT", "").partition(":")
    twice = os.environ.get("CKPT_TWICE") == "1"
    for s in range(0 if step is None else step + 1, steps):
        gen = torch.Generator().manual_seed(1000 * s + rank)  # the step's data, whatever the attempt
        x = torch.randn(16, 32, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if dcp_api:
            model_sd, optim_sd = get_state_dict(model, opt)
            state = {"model": model_sd, "optim": optim_sd}
            if async_group is None:
                for _ in range(2 if twice else 1):
                    dcp.save(state, storage_writer=checkpoint.MemoryStorageWriter(s))
            else:
                if saving is not None:
                    saving.result()
                saving = dcp.async_save(state, storage_writer=checkpoint.MemoryStorageWriter(s),
                                        process_group=async_group)
        else:
            for _ in range(2 if twice else 1):
                checkpoint.save(s, {"model": model.state_dict(), "optim": opt.state_dict()},
                                replicated=replicated)
        if rank == 0 and os.environ.get("SAVE_PARAMS"):
            torch.save(model.module.state_dict(), os.path.join(out, f"params.{s}.pt"))
        waited = os.path.join(out, f"waited.{rank}")
        if os.environ.get("WAIT_AT") == str(s) and not os.path.exists(waited):
            open(waited, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
                time.sleep(0.05)
        if attempt == "0" and pause_step == str(s):
            time.sleep(float(pause_seconds))
        if attempt == "0" and kill == f"{rank}:{s}":
            os.kill(os.getpid(), signal.SIGKILL)
        hold = held_at(s, dist.get_world_size(), attempt, out, rank)
        if hold:
            # This node is about to be lost: it says so and waits (bounded) for the test to kill it.
            open(os.path.join(out, hold + str(rank)), "w").close()
            time.sleep(120)
    if saving is not None:
        saving.result()
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], os.path.join(out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
