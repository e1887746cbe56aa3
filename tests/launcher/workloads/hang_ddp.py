"""DDP over gloo: $HANG_DDP_STEPS (20) steps of about $HANG_DDP_STEP_S (0.1) seconds, each printing one line, no heartbeat
code; with HANG_DDP_SLOW_EVERY=N every Nth step takes $HANG_DDP_SLOW_S seconds more (an evaluation
step). In the first attempt rank 1 blocks in stuck_in_data_loading() at step $HANG_DDP_BLOCK_AT (10;
-1: never), writing the time it did to $OUT_DIR/blocked, so rank 0 waits in the backward pass's
all-reduce. In a later attempt each rank
writes the time its first step finished to $OUT_DIR/first_step.<rank>, and every rank writes
$OUT_DIR/done.<attempt>.<rank> when it has run every step. HANG_DDP_CHATTY_RANK0=1: rank 0 also prints
from a second thread twice a second (a logger). HANG_DDP_ALL=1: every rank blocks at step 10."""
import os
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def stuck_in_data_loading(out):
    with open(os.path.join(out, "blocked"), "w") as f:
        f.write(str(time.time()))
    time.sleep(3600)


def chatter():
    while True:
        print("rank 0 still here", flush=True)
        time.sleep(0.5)


def main():
    out, attempt = os.environ["OUT_DIR"], os.environ["TORCHELASTIC_RESTART_COUNT"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if rank == 0 and os.environ.get("HANG_DDP_CHATTY_RANK0") == "1":
        threading.Thread(target=chatter, daemon=True).start()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = int(os.environ.get("HANG_DDP_STEPS", "20"))
    block_at = int(os.environ.get("HANG_DDP_BLOCK_AT", "10"))
    step_s = float(os.environ.get("HANG_DDP_STEP_S", "0.1"))
    slow_every = int(os.environ.get("HANG_DDP_SLOW_EVERY", "0"))
    for step in range(steps):
        if attempt == "0" and step == block_at and (rank == 1 or
                                                   os.environ.get("HANG_DDP_ALL") == "1"):
            stuck_in_data_loading(out)
        loss = model(torch.randn(4, 8)).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
        if attempt != "0" and step == 0:
            with open(os.path.join(out, f"first_step.{rank}"), "w") as f:
                f.write(str(time.time()))
        time.sleep(step_s)
        if slow_every and step % slow_every == slow_every - 1:
            time.sleep(float(os.environ["HANG_DDP_SLOW_S"]))
    open(os.path.join(out, f"done.{attempt}.{rank}"), "w").close()


main()
