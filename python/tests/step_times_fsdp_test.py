"""ddprun._step_times on an FSDP2 job (torch 2: fully_shard on CPU over gloo), two ranks in two
processes: installed as ddprun's sitecustomize installs it, it times the waits of FSDP2's
collectives (its all-gathers, asynchronous and waited on, and its reduce-scatters), so the rank
that computes longer (rank 1 sleeps in each step's forward pass) waits less than the other; and
FSDP2 trains as it did without it, bit for bit. Skipped (77) under torch 1.

    step_times_fsdp_test.py PACKAGE_DIR            (a rank: ... PACKAGE_DIR RANK STORE OUT TIMED)
"""
import os
import struct
import subprocess
import sys
import tempfile

STEPS = 8
# Rank 1's extra compute per step: large against what a loaded machine adds to both ranks' waits
# (at 0.04 s, a full suite on 2 cores once left rank 0 waiting 0.102 s a step and rank 1 0.089 s).
SLOW_S = 0.2


def rank_main(package, rank, store_path, out, timed):
    sys.path.insert(0, package)
    if timed == "1":
        from ddprun import _step_times

        _step_times.install()
    import time

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    rank = int(rank)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(),
                                torch.nn.Linear(128, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    if rank == 1:  # the slow rank: its forward pass takes SLOW_S longer
        model[0].register_forward_pre_hook(lambda *_: time.sleep(SLOW_S))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(STEPS):
        x = torch.randn(16, 64, generator=torch.Generator().manual_seed(100 * step + rank))
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    params = [p.full_tensor() for p in model.parameters()]
    if rank == 0:
        torch.save(params, os.path.join(out, f"params.{timed}.pt"))
    dist.destroy_process_group()


def run_ranks(here, package, out, timed):
    store = tempfile.mktemp()
    ranks = []
    for rank in ("0", "1"):
        env = dict(os.environ)
        if timed == "1":
            path = os.path.join(out, f"steps.{rank}")
            with open(path, "wb") as f:
                f.write(bytes(32))
            env["DDPRUN_STEP_TIMES_FILE"] = path
        ranks.append(subprocess.Popen([sys.executable, here, package, rank, store, out, timed],
                                      env=env))
    for p in ranks:
        assert p.wait(timeout=240) == 0, p.returncode


def totals(out, rank):
    with open(os.path.join(out, f"steps.{rank}"), "rb") as f:
        return struct.unpack("<QQQQ", f.read())


def main():
    package = sys.argv[1]
    import torch

    if int(torch.__version__.split(".")[0]) < 2:
        print("torch 1: no FSDP2")
        sys.exit(77)
    out = tempfile.mkdtemp()
    here = os.path.abspath(__file__)
    run_ranks(here, package, out, "0")
    run_ranks(here, package, out, "1")
    plain = torch.load(os.path.join(out, "params.0.pt"))
    timed = torch.load(os.path.join(out, "params.1.pt"))
    assert all(torch.equal(a, b) for a, b in zip(plain, timed)), "FSDP2 trained differently"
    waits = {}
    for rank in ("0", "1"):
        seq, steps, step_ns, wait_ns = totals(out, rank)
        # Every optimizer step but the first ends a step.
        assert steps == STEPS - 1 and seq == 2 * steps, (rank, seq, steps)
        assert 0 < wait_ns < step_ns, (rank, wait_ns, step_ns)
        waits[rank] = wait_ns / steps / 1e9
    # Rank 0 waits for rank 1's longer forward pass, in FSDP2's collectives.
    assert waits["0"] - waits["1"] > SLOW_S / 2, waits
    print(f"FSDP2, {STEPS - 1} steps timed: rank 0 waits {waits['0'] * 1000:.1f} ms a step, the "
          f"slow rank 1 {waits['1'] * 1000:.1f} ms; trained bit-identically: passed")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        rank_main(*sys.argv[1:6])
    else:
        main()
