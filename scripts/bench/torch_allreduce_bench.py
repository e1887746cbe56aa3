"""torch side of scripts/bench/allreduce.sh (gloo, the torch of the python that runs it); run under ddprun.
    busbw MIB...     -> "allreduce BYTES MEDIAN_SECONDS" per size
    ddp COUNTS_FILE  -> "ddp S": DDP backward step over 1-D parameters of those element counts
"""
import sys
import time

import torch
import torch.distributed as dist


def median_seconds(op):
    op()
    op()
    times, start = [], time.monotonic()
    for i in range(20):
        dist.barrier()
        t0 = time.monotonic()
        op()
        times.append(time.monotonic() - t0)
        more = torch.tensor([int(i + 1 < 3 or time.monotonic() - start < 2)])
        dist.broadcast(more, 0)
        if not more.item():
            break
    times.sort()
    return times[len(times) // 2]


def main():
    dist.init_process_group("gloo", init_method="env://")
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "busbw":
        for mib in args:
            nbytes = int(float(mib) * (1 << 20))
            t = torch.ones(nbytes // 4, dtype=torch.float32)
            s = median_seconds(lambda: dist.all_reduce(t))
            if dist.get_rank() == 0:
                print(f"allreduce {nbytes} {s:.6f}", flush=True)
        return
    counts = [int(x) for x in open(args[0]).read().split()]

    class Params(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(c)) for c in counts])

        def forward(self):
            return sum(p.sum() for p in self.ps)

    model = torch.nn.parallel.DistributedDataParallel(Params())

    def step():
        model.zero_grad(set_to_none=False)
        model().backward()

    s = median_seconds(step)
    if dist.get_rank() == 0:
        print(f"ddp {s:.6f}", flush=True)


if __name__ == "__main__":
    main()
