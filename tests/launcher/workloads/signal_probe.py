"""Writes <dir>/ready.<rank> once running, then waits. On a forwarded signal it writes
<dir>/got.<rank> with the signal's name and exits 0; with --ignore-term it ignores SIGTERM instead."""
import os
import signal
import sys

out = sys.argv[1]
rank = os.environ["RANK"]


def handler(signo, _frame):
    with open(os.path.join(out, f"got.{rank}"), "w") as f:
        f.write(signal.Signals(signo).name)
    sys.exit(0)


if "--ignore-term" in sys.argv and rank == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, handler)
with open(os.path.join(out, f"pid.{rank}"), "w") as f:
    f.write(str(os.getpid()))
os.rename(os.path.join(out, f"pid.{rank}"), os.path.join(out, f"ready.{rank}"))
if "--fail-rank0" in sys.argv and rank == "0":
    # Fail only once rank 1 is set up to ignore SIGTERM, so that the grace period is what ends it.
    import time
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, "ready.1")) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(5)
signal.alarm(60)  # a bound for the test: SIGALRM's default action ends the process
while True:
    signal.pause()
