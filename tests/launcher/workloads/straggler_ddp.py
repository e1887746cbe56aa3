"""A deterministic DDP job (gloo, an MLP of a few tens of ms a step on one core, Adam) for the
straggler check: it saves an in-memory checkpoint every step through ddprun.checkpoint and resumes
from the one load() returns. Arguments: STEPS OUT_DIR. Rank 0 writes the final parameters to
OUT_DIR/final.pt and, per attempt, each step's end (wall clock) to OUT_DIR/steps.<attempt>; with
$MARK_AT=STEP, each rank writes its pid to OUT_DIR/at.<rank> once it reaches that step in the first
attempt (for the test to slow its node from then on); with $UNTIL_FILE=PATH, the job ends at the
first step after which rank 0 finds that file (the ranks agree through an all-reduce of a flag each
step), or at STEPS."""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddprun import checkpoint


def main():
    steps, out = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 768), torch.nn.Tanh(),
                                    torch.nn.Linear(768, 256), torch.nn.Tanh(),
                                    torch.nn.Linear(256, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    step, state = checkpoint.load()
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
    # DDP lays out its buckets anew after its first backward pass: a pass that changes nothing
    # makes every training step's layout the same whichever step an attempt starts from.
    model(torch.zeros(1, 256)).sum().mul(0).backward()
    opt.zero_grad()
    mark = os.environ.get("MARK_AT", "")
    until = os.environ.get("UNTIL_FILE")
    times = open(os.path.join(out, f"steps.{attempt}"), "a") if rank == 0 else None
    for s in range(0 if step is None else step + 1, steps):
        if attempt == "0" and mark == str(s):
            with open(os.path.join(out, f"at.{rank}"), "w") as f:
                f.write(str(os.getpid()))
        gen = torch.Generator().manual_seed(1000 * s + rank)  # the step's data, whatever the attempt
        x = torch.randn(384, 256, generator=gen)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        checkpoint.save(s, {"model": model.state_dict(), "optim": opt.state_dict()},
                        replicated=True)
        if times:
            times.write(f"{s} {time.time():.6f}\n")
            times.flush()
        if until:
            found = torch.tensor([1.0 if rank == 0 and os.path.exists(until) else 0.0])
            dist.all_reduce(found)
            if found.item() > 0:
                break
    if rank == 0:
        torch.save([p.detach().clone() for p in model.parameters()], os.path.join(out, "final.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
