"""A worker of the fault campaign: records what it is (rank, world size, round, restart count) and
beats every 50 ms into a file of its own, for a fixed number of beats, then exits 0.

    chaos_worker.py OUT_DIR BEATS

Lines of OUT_DIR/w.<node>.<pid>: "start T RANK WORLD_SIZE ROUND RESTARTS", then "beat T" ..., and
"end T" (finished) or "term T" (stopped by SIGTERM); T is CLOCK_MONOTONIC, shared by every process
of the machine. ROUND is MASTER_ADDR:MASTER_PORT: every round gets a fresh worker store.
"""
import os
import signal
import sys
import time

out, beats = sys.argv[1], int(sys.argv[2])
env = os.environ
f = open(os.path.join(out, f"w.{env['CHAOS_NODE']}.{os.getpid()}"), "a", buffering=1)
f.write(f"start {time.monotonic():.3f} {env['RANK']} {env['WORLD_SIZE']} "
        f"{env['MASTER_ADDR']}:{env['MASTER_PORT']} {env['TORCHELASTIC_RESTART_COUNT']}\n")


def stopped(*_):
    f.write(f"term {time.monotonic():.3f}\n")
    sys.exit(0)


signal.signal(signal.SIGTERM, stopped)
for _ in range(beats):
    f.write(f"beat {time.monotonic():.3f}\n")
    time.sleep(0.05)
f.write(f"end {time.monotonic():.3f}\n")
