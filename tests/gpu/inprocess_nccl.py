"""In-process restart on a GPU (scripts/gpu-test.sh): DDP over NCCL under ddprun
--restart_mode=in_process, one rank per GPU (every GPU the machine has, at most 2). In the first
attempt a rank raises after saving step 5 (one GPU), or rank 1 SIGKILLs itself (two GPUs): the
NCCL process groups are aborted in every kept rank (torch's abort), created again in the same
process, and the job ends bit-identical to an uninterrupted run. Each kept rank's CUDA context was
not created again: at the start of its second attempt torch.cuda.is_initialized() is already true,
and the time from the failure to the first step after it is printed with the time CUDA's and NCCL's
set-up took in the first attempt, against which it compares.

    python3 tests/gpu/inprocess_nccl.py DDPRUN            (a worker: ... DDPRUN OUT STEPS)
"""
import os
import subprocess
import sys
import tempfile
import time

STEPS = 12


def worker(out, steps):
    import signal

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddprun import checkpoint, inprocess

    local = int(os.environ["LOCAL_RANK"])
    began = time.time()
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(),
                              torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.Adam(net.parameters(), lr=0.01)

    def train():
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        rank = int(os.environ["RANK"])
        kept_context = torch.cuda.is_initialized()
        t0 = time.time()
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        model = DDP(net, device_ids=[local])
        dist.barrier()
        torch.cuda.synchronize()
        with open(os.path.join(out, f"attempt.{attempt}.{rank}"), "w") as f:
            f.write(f"{os.getpid()} {int(kept_context)} {time.time() - t0:.3f} {began:.6f}")
        step, state = checkpoint.load()
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
        world = dist.get_world_size()
        for s in range(0 if step is None else step + 1, steps):
            gen = torch.Generator().manual_seed(1000 * s + rank)
            x = torch.randn(32, 256, generator=gen).cuda()
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            checkpoint.save(s, {"model": net.state_dict(), "optim": opt.state_dict()})
            with open(os.path.join(out, f"steps.{rank}"), "a") as f:
                f.write(f"{time.time():.6f} {attempt} {s}\n")
            if attempt == "0" and s == 5 and os.environ.get("FAULT") == "1":
                with open(os.path.join(out, "fault"), "w") as f:
                    f.write(f"{time.time():.6f}")
                if world == 1:
                    raise ValueError("rank 0 fails at step 5")
                if rank == 1:
                    os.kill(os.getpid(), signal.SIGKILL)
        if rank == 0:
            torch.save([p.detach().cpu() for p in net.parameters()], os.path.join(out, "final.pt"))
        dist.barrier()
        dist.destroy_process_group()

    inprocess.run(train)


def job(ddprun, gpus, fault):
    out = tempfile.mkdtemp()
    r = subprocess.run([ddprun, "--standalone", f"--nproc_per_node={gpus}", "--max_restarts=2",
                        "--restart_mode=in_process", sys.argv[0], ddprun, out, str(STEPS)],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "FAULT": "1" if fault else "0",
                            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    if r.returncode != 0:
        sys.exit(f"inprocess_nccl: exit {r.returncode}\n{r.stderr[-5000:]}")
    return out


def main():
    import torch

    ddprun = sys.argv[1]
    gpus = min(2, torch.cuda.device_count())
    reference, out = job(ddprun, gpus, False), job(ddprun, gpus, True)
    a, b = (torch.load(os.path.join(d, "final.pt")) for d in (reference, out))
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "the parameters differ"
    for rank in (0,):  # (one GPU: the rank that raised; two: the one that did not fail)
        with open(os.path.join(out, f"attempt.0.{rank}")) as f:
            pid0, _, setup0, _ = f.read().split()
        with open(os.path.join(out, f"attempt.1.{rank}")) as f:
            pid1, context1, setup1, _ = f.read().split()
        assert pid0 == pid1 and context1 == "1", (rank, pid0, pid1, context1)
        print(f"rank {rank} kept pid {pid0} and its CUDA context; NCCL process group and DDP set up "
              f"in {setup0} s at the start, {setup1} s after the restart")
    with open(os.path.join(out, "fault")) as f:
        failed = float(f.read())
    with open(os.path.join(out, "steps.0")) as f:
        back = [float(t) for t, attempt, step in (l.split() for l in f) if attempt == "1"][0]
    print(f"inprocess_nccl: {gpus} GPU(s), rank {'0 raised' if gpus == 1 else '1 SIGKILLed'} at "
          f"step 5: back at the next step {back - failed:.3f} s after the failure; bit-identical: "
          f"passed")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
