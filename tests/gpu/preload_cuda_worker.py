"""A worker for scripts/gpu-test.sh's --preload check: forked from a warm interpreter (torch already
imported before the script ran), it initialises CUDA on GPU LOCAL_RANK and all-reduces over NCCL.
The first attempt's rank 0 fails after CUDA is initialised, so that the restart shows the interpreter
still forks warm workers once a worker of its own has used CUDA. Prints one line per attempt."""
import os
import sys
import time

warm = "torch" in sys.modules  # before this script imports anything
started = time.time()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

local_rank = int(os.environ["LOCAL_RANK"])
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", init_method="env://")
t = torch.ones(1 << 20, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
torch.cuda.synchronize()
want = sum(range(1, dist.get_world_size() + 1))
ok = bool((t == want).all())
print(f"attempt {attempt} rank {dist.get_rank()}: warm={warm} cuda_initialised="
      f"{torch.cuda.is_initialized()} all_reduce_ok={ok} "
      f"first_all_reduce_after={time.time() - started:.3f}s", flush=True)
dist.destroy_process_group()
if not ok or not warm:
    sys.exit(2)
if attempt == "0" and dist.get_rank() == 0:
    sys.exit(1)
