"""A real DDP training job (gloo, CPU): a two-layer MLP on synthetic data sharded by rank. Every rank
prints its first and last loss and exits non-zero if the replicas' parameters are not bit-identical;
with $RESULT_FILE set, rank 0 also writes the loss curve there as JSON."""
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1234 + rank)
    w_true = torch.arange(8, dtype=torch.float32) / 8
    x = torch.randn(256, 8, generator=gen)
    y = (x @ w_true).unsqueeze(1)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    identical = all(torch.equal(g, gathered[0]) for g in gathered)
    if rank == 0 and "RESULT_FILE" in os.environ:
        with open(os.environ["RESULT_FILE"], "w") as f:
            json.dump({"losses": losses, "identical": identical, "world": world}, f)
    print(f"rank {rank}: first loss {losses[0]:.4f} last loss {losses[-1]:.4f}, "
          f"replicas {'bit-identical' if identical else 'DIVERGED'}")
    dist.destroy_process_group()
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
