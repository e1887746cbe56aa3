"""A trainer that leaves processes behind: a child in a session of its own (double-forked, setsid)
that outlives the fork's middle process. Writes <dir>/trainer.<rank> and <dir>/grand.<rank> with their
pids, then <dir>/ready.<rank>; then, by mode: end (exit 0), wait (for a signal), or fail (rank 0 exits 3
once rank 1 is ready, rank 1 waits to be stopped)."""
import os
import signal
import sys
import time

out, mode = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]


def write(name, pid):
    with open(os.path.join(out, f"{name}.{rank}.tmp"), "w") as f:
        f.write(str(pid))
    os.rename(os.path.join(out, f"{name}.{rank}.tmp"), os.path.join(out, f"{name}.{rank}"))


write("trainer", os.getpid())
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: a new session, its parent gone: nobody's child
        os.close(r)
        write("grand", os.getpid())
        os.close(w)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL (or a cgroup kill) ends it
        while True:
            time.sleep(60)
    os._exit(0)
os.close(w)
os.read(r, 1)  # EOF once the grandchild has written its pid
os.wait()
write("ready", os.getpid())
if mode == "fail" and rank == "0":
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(out, "ready.1")) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(3)
if mode in ("wait", "fail"):
    signal.pause()
