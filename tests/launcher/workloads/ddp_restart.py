"""A DDP job over gloo that fails once: a two-layer MLP, STEPS steps; in the first attempt rank
FAIL_RANK (default 1) exits 1 after its FAIL_AFTER-th step (default 5; 0: no failure). Into OUT_DIR
it writes, per attempt A and rank R, the times (time.time()) at which the process began
(begin.A.R), `import torch` was done (imported.A.R), the process group and DDP were ready
(ready.A.R) and the first step finished (first_step.A.R); the failing rank writes `failed` as it
exits; at the end every rank writes identical.R: whether all replicas' parameters are
bit-identical."""
import time

BEGIN = time.time()
import os  # noqa: E402

import torch  # noqa: E402

IMPORTED = time.time()
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

OUT = os.environ["OUT_DIR"]
RANK = int(os.environ["RANK"])
ATTEMPT = int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def note(name, value):
    with open(os.path.join(OUT, f"{name}.{ATTEMPT}.{RANK}"), "w") as f:
        f.write(repr(value))


def main():
    steps = int(os.environ.get("STEPS", "20"))
    fail_after = int(os.environ.get("FAIL_AFTER", "5"))
    fail_rank = int(os.environ.get("FAIL_RANK", "1"))
    note("begin", BEGIN)
    note("imported", IMPORTED)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1234 + RANK)
    x = torch.randn(128, 32, generator=gen)
    y = x.sum(dim=1, keepdim=True) / 32
    note("ready", time.time())
    for step in range(1, steps + 1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if step == 1:
            note("first_step", time.time())
        if ATTEMPT == 0 and RANK == fail_rank and step == fail_after:
            with open(os.path.join(OUT, "failed"), "w") as f:
                f.write(repr(time.time()))
            os._exit(1)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    note("identical", all(torch.equal(g, gathered[0]) for g in gathered))
    dist.destroy_process_group()


main()
