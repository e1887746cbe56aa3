"""A real DDP training job: a two-layer MLP on synthetic data sharded by rank, over gloo on the CPU
or, with --backend nccl, over NCCL on GPU LOCAL_RANK. Every rank prints its first and last loss and
exits non-zero if the replicas' parameters are not bit-identical; with $RESULT_FILE set, rank 0 also
writes the loss curve there as JSON."""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["gloo", "nccl"], default="gloo")
    backend = parser.parse_args().backend
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = DDP(net.to(device), device_ids=[device.index] if backend == "nccl" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1234 + rank)
    w_true = torch.arange(8, dtype=torch.float32) / 8
    x = torch.randn(256, 8, generator=gen)
    y = (x @ w_true).unsqueeze(1)
    x, y = x.to(device), y.to(device)
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
    print(f"rank {rank} ({backend}): first loss {losses[0]:.4f} last loss {losses[-1]:.4f}, "
          f"replicas {'bit-identical' if identical else 'DIVERGED'}")
    # Every rank is done with gloo before any tears it down (torch 2.6 once aborted a rank,
    # "terminate called without an active exception", when its peer left first).
    dist.barrier()
    dist.destroy_process_group()
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
