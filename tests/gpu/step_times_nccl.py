"""The straggler check's step times on a GPU (scripts/gpu-test.sh): DDP over NCCL on GPU 0, a world
of one, trained in processes of their own, RUNS times with ddprun's step timing installed as its
sitecustomize installs it and RUNS times without, alternating which goes first: the same parameters
bit for bit, every step but the first timed, waits measured, and the time of a step (the steps
after a warm-up, run as a job runs them: the host ahead of the GPU) with the timing against without
(its overhead; the medians of the runs), printed. Two sizes of step: a host-bound one (a small
batch: the step is the host's Python, where the timing's own cost shows whole) and a GPU-bound one
(a batch 32 times larger: the GPU's work, as in a real job, which the host's cost hides behind);
then the GPU-bound one under FSDP2 (fully_shard: in a world of one, torch issues none of its
collectives, so that case checks the training unchanged and the steps timed, and their cost).

    python3 tests/gpu/step_times_nccl.py PACKAGE_DIR  (a run: ... PACKAGE_DIR OUT TIMED WRAP BATCH)
"""
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

STEPS = 200
WARM_UP = 20
RUNS = 3
INPUTS = 20
CASES = {"DDP, host-bound": ("ddp", 256), "DDP, GPU-bound": ("ddp", 8192),
         "FSDP2, GPU-bound": ("fsdp2", 8192)}


def train(package, out, timed, wrap, batch):
    sys.path.insert(0, package)
    if timed == "1":
        from ddprun import _step_times

        _step_times.install()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.Tanh(),
                                torch.nn.Linear(4096, 2048)).cuda()
    if wrap == "ddp":
        model = DDP(model, device_ids=[0])
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    # Made before, on the GPU: the steps are the GPU's, not the host's (a ring of INPUTS, 1.3 GiB
    # at the larger batch, so that a card of 16 GB holds them).
    inputs = [torch.randn(int(batch), 2048, device="cuda",
                          generator=torch.Generator("cuda").manual_seed(i))
              for i in range(INPUTS)]
    for step in range(STEPS):
        if step == WARM_UP:
            torch.cuda.synchronize()
            began = time.perf_counter()
        model(inputs[step % INPUTS]).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - began) / (STEPS - WARM_UP)
    whole = [getattr(p, "full_tensor", p.detach)() for p in model.parameters()]  # (FSDP2: DTensor)
    torch.save([p.detach().cpu() for p in whole], os.path.join(out, f"p.{timed}"))
    with open(os.path.join(out, f"per_step.{timed}"), "a") as f:
        f.write(f"{per_step}\n")
    dist.destroy_process_group()


def measure(package, kind, wrap, batch):
    """RUNS runs each way of one size of step; prints its line."""
    import torch

    out = tempfile.mkdtemp()
    path = os.path.join(out, "steps")
    for run in range(RUNS):
        for timed in ("0", "1") if run % 2 == 0 else ("1", "0"):
            env = dict(os.environ)
            if timed == "1":
                with open(path, "wb") as f:
                    f.write(bytes(32))
                env["DDPRUN_STEP_TIMES_FILE"] = path
            subprocess.run([sys.executable, os.path.abspath(__file__), package, out, timed, wrap,
                            str(batch)], env=env, check=True, timeout=300)
        plain, timed = (torch.load(os.path.join(out, f"p.{t}")) for t in ("0", "1"))
        same = all(torch.equal(a, b) for a, b in zip(plain, timed))
        assert same, f"{kind} over NCCL trained differently with its steps timed"
        with open(path, "rb") as f:
            seq, steps, step_ns, wait_ns = struct.unpack("<QQQQ", f.read())
        assert steps == STEPS - 1 and seq == 2 * steps, (seq, steps)
        assert (0 if wrap == "fsdp2" else 1) <= wait_ns <= step_ns, (wait_ns, step_ns)
    without, with_ = ([float(v) for v in open(os.path.join(out, f"per_step.{t}")).read().split()]
                      for t in ("0", "1"))
    a, b = statistics.median(without), statistics.median(with_)
    print(f"step times over NCCL, {kind} (batch {batch}): {steps} steps timed, "
          f"{step_ns / steps / 1e6:.2f} ms a step ({wait_ns / steps / 1e6:.3f} ms waiting); a step "
          f"{b * 1000:.3f} ms timed ({', '.join(f'{v * 1000:.3f}' for v in with_)}), "
          f"{a * 1000:.3f} ms not ({', '.join(f'{v * 1000:.3f}' for v in without)}): "
          f"{(b / a - 1) * 100:+.1f}%, {(b - a) * 1e6:.0f} us a step; bit-identical in {RUNS} "
          f"runs: passed", flush=True)


def main():
    for kind, (wrap, batch) in CASES.items():
        measure(sys.argv[1], kind, wrap, batch)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        train(*sys.argv[1:6])
    else:
        main()
