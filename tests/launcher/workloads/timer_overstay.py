"""A worker under torch's expiration timers (FileTimerClient against TORCHELASTIC_TIMER_FILE): three
steps of `expires(after=1, scope="step")`; in the first attempt rank 1 stays in its second step for a
minute. Each rank writes $OUT_DIR/<attempt>.<rank> when it finishes."""
import os
import time

import torch.distributed.elastic.timer as timer

timer.configure(timer.FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
for step in range(3):
    with timer.expires(after=1, scope="step"):
        if attempt == "0" and rank == "1" and step == 1:
            time.sleep(60)
        time.sleep(0.05)
open(os.path.join(os.environ["OUT_DIR"], f"{attempt}.{rank}"), "w").close()
