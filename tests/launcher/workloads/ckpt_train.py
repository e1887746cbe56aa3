"""DDP training (gloo) that survives membership changes: rank 0 checkpoints model and optimizer every
10 steps (atomically); every (re)start resumes from the checkpoint. Writes <ckpt>.done with the world
size it finished at and the step it resumed from.

    ckpt_train.py CKPT STEPS
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    ckpt, steps = sys.argv[1], int(sys.argv[2])
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    ddp = DDP(model)
    gen = torch.Generator().manual_seed(1000 + rank)
    w_true = torch.arange(8, dtype=torch.float32) / 8
    for step in range(start, steps):
        x = torch.randn(64, 8, generator=gen)
        loss = torch.nn.functional.mse_loss(ddp(x), (x @ w_true).unsqueeze(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and (step + 1) % 10 == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        time.sleep(0.02)  # a training step's worth of time, so that a node can be lost mid-run
    if rank == 0:
        with open(ckpt + ".done", "w") as f:
            json.dump({"world": world, "resumed_from": start, "loss": loss.item()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
