"""In-process restart on a GPU (scripts/gpu-test.sh): DDP over NCCL under ddprun
--restart_mode=in_process, one rank per GPU (every GPU the machine has, at most 2). In the first
attempt a rank raises after saving step 5 (one GPU), or rank 1 SIGKILLs itself (two GPUs): the
NCCL process groups are aborted in every kept rank (torch's abort), created again in the same
process, and the job ends bit-identical to an uninterrupted run. Each kept rank's CUDA context was
not created again: its second attempt runs in the same process, where torch.cuda.is_initialized()
is already true. The same fault under ddprun's process restart (the default mode) ends
bit-identical too. For each mode, the time from the failure to the first step after it is printed
with its parts: the new process's import of torch, its CUDA context and model on the GPU, and NCCL's
and DDP's set-up.

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

    began = time.time()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddprun import checkpoint, inprocess

    local = int(os.environ["LOCAL_RANK"])
    imported = time.time()
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Tanh(),
                              torch.nn.Linear(256, 1)).cuda()
    torch.cuda.synchronize()
    on_gpu = time.time()
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
            f.write(f"{os.getpid()} {int(kept_context)} {time.time() - t0:.3f} "
                    f"{imported - began:.3f} {on_gpu - imported:.3f}")
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


def job(ddprun, gpus, fault, mode="in_process"):
    out = tempfile.mkdtemp()
    r = subprocess.run([ddprun, "--standalone", f"--nproc_per_node={gpus}", "--max_restarts=2",
                        f"--restart_mode={mode}", sys.argv[0], ddprun, out, str(STEPS)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "FAULT": "1" if fault else "0",
                            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"})
    if r.returncode != 0:
        sys.exit(f"inprocess_nccl: {mode} exit {r.returncode}\n{r.stderr[-5000:]}")
    return out


def attempt_of(out, attempt, rank):
    with open(os.path.join(out, f"attempt.{attempt}.{rank}")) as f:
        pid, context, nccl, imports, cuda = f.read().split()
    return pid, context == "1", float(nccl), float(imports), float(cuda)


def back_after_failure(out):
    with open(os.path.join(out, "fault")) as f:
        failed = float(f.read())
    with open(os.path.join(out, "steps.0")) as f:
        return [float(t) for t, attempt, step in (l.split() for l in f) if attempt == "1"][0] - failed


def main():
    import torch

    ddprun = sys.argv[1]
    gpus = min(2, torch.cuda.device_count())
    reference = job(ddprun, gpus, False)
    kept, restarted = job(ddprun, gpus, True), job(ddprun, gpus, True, "process")
    want = torch.load(os.path.join(reference, "final.pt"))
    for mode, out in (("in-process", kept), ("process", restarted)):
        got = torch.load(os.path.join(out, "final.pt"))
        assert all(torch.equal(x, y) for x, y in zip(want, got)), f"{mode}: the parameters differ"
    # Rank 0: on one GPU the rank that raised, on two the one that did not fail.
    pid0, _, nccl0, imports0, cuda0 = attempt_of(kept, 0, 0)
    pid1, context1, nccl1, _, _ = attempt_of(kept, 1, 0)
    assert pid0 == pid1 and context1, (pid0, pid1, context1)
    back = back_after_failure(kept)
    print(f"in-process: rank 0 kept pid {pid0} and its CUDA context; back at the next step "
          f"{back:.3f} s after the failure, of which NCCL's and DDP's set-up {nccl1:.3f} s (at the "
          f"job's start: torch imported in {imports0:.3f} s, CUDA and the model on the GPU "
          f"{cuda0:.3f} s, NCCL and DDP {nccl0:.3f} s)")
    pid0, _, _, _, _ = attempt_of(restarted, 0, 0)
    pid1, _, nccl1, imports1, cuda1 = attempt_of(restarted, 1, 0)
    assert pid0 != pid1, "process restart kept the process"
    back_restarted = back_after_failure(restarted)
    print(f"process restart: back at the next step {back_restarted:.3f} s after the failure, of "
          f"which torch imported {imports1:.3f} s, CUDA and the model on the GPU {cuda1:.3f} s, "
          f"NCCL and DDP {nccl1:.3f} s")
    print(f"inprocess_nccl: {gpus} GPU(s), rank {'0 raised' if gpus == 1 else '1 SIGKILLed'} at "
          f"step 5: back {back:.3f} s after the failure in-process, {back_restarted:.3f} s by a "
          f"process restart ({back_restarted / back:.1f}x); both bit-identical: passed")


if __name__ == "__main__":
    if len(sys.argv) == 4:
        worker(sys.argv[2], int(sys.argv[3]))
    else:
        main()
