"""What ddprun's step timing costs a Python worker per step, too little to see in a job's step time
on this noisy machine (scripts/bench/straggler.py runs it): DDP (gloo, a world of one) on a tiny
model, STEPS steps in a process of its own with the timing installed as ddprun's sitecustomize
installs it and in one without, RUNS times each, alternating which goes first; prints the median
microseconds per step of each and their difference.

    step_times_cost.py PACKAGE_DIR RUNS STEPS      (a run: ... --run PACKAGE_DIR STEPS TIMED)
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(package, steps, timed):
    sys.path.insert(0, package)
    if timed == "1":
        from ddprun import _step_times

        _step_times.install()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    for _ in range(50):  # warm up
        model(x).sum().backward()
        opt.step()
    began = time.perf_counter()
    for _ in range(int(steps)):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
    print((time.perf_counter() - began) / int(steps) * 1e6)


def main(package, runs, steps):
    path = tempfile.mktemp(dir="/dev/shm")
    with open(path, "wb") as f:
        f.write(bytes(32))
    per_step = {"0": [], "1": []}
    try:
        for r in range(int(runs)):
            for timed in ("0", "1") if r % 2 == 0 else ("1", "0"):
                env = dict(os.environ)
                if timed == "1":
                    env["DDPRUN_STEP_TIMES_FILE"] = path
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", package,
                                      steps, timed], env=env, capture_output=True, text=True,
                                     check=True)
                per_step[timed].append(float(out.stdout.split()[-1]))
    finally:
        os.unlink(path)
    plain, timed = statistics.median(per_step["0"]), statistics.median(per_step["1"])
    print(f"{timed - plain:.1f} {plain:.1f} {timed:.1f}")


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        run(*sys.argv[2:5])
    else:
        main(*sys.argv[1:4])
