"""The workload of tests/launcher/timeline_test.py, a 2-node job of 2 ranks each: in the first
attempt rank 1 fails (exit 3); in the second, rank 0 prints once and then falls silent (a hang under
--hang_timeout) while the others print on; the third ends well."""
import os
import sys
import time

attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
if attempt == "0" and rank == "1":
    sys.exit(3)
print("step", flush=True)
if attempt == "1":
    if rank == "0":
        time.sleep(120)  # silent: hung
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the hang stops everyone
        print("step", flush=True)
        time.sleep(0.2)
time.sleep(0.5)
