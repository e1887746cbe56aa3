"""A worker for the wheel test: one DDP (gloo) step, then a line of JSON to $REPORT_DIR/<rank>.json
naming the interpreter that ran it and the torch it imported."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# What ddprun gives every worker of its own (docs/cli.md): the rest of DDPRUN_* must not reach one.
WORKER_VARIABLES = {"DDPRUN_CHECKPOINT_DIR", "DDPRUN_CHECKPOINT_STEP",
                    "DDPRUN_CHECKPOINT_MEMORY_LIMIT", "DDPRUN_CHECKPOINT_SLOT",
                    "DDPRUN_CHECKPOINT_SLOTS", "DDPRUN_HEARTBEAT_FILE"}
dist.init_process_group("gloo", init_method="env://")
model = DDP(torch.nn.Linear(4, 1))
model(torch.ones(2, 4)).sum().backward()
dist.destroy_process_group()
with open(os.path.join(os.environ["REPORT_DIR"], os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"executable": sys.executable, "prefix": sys.prefix, "torch": torch.__version__,
               "private": sorted(k for k in os.environ
                                 if k.startswith("DDPRUN_") and k not in WORKER_VARIABLES and
                                 not k.startswith("DDPRUN_CONTAINED_"))}, f)
