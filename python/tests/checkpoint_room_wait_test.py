"""ddprun.checkpoint without a job: a save that asked its agent for room waits for the answer
while other processes hold the budget's lock (ranks making large regions, one after another, for
longer than the wait itself), counting only the time the lock was free; and gives up, the request
withdrawn, where no answer comes while the lock is free, or where the lock is never free.

The agent here is a thread that answers as the agent's replicator does (room_request.hpp), only
once the budget's lock is free: the replicator's own side is tested in tests/unit/replicator_test.cpp.
The waits are shortened (_ROOM_ANSWER_WITHIN 0.5 s, _ROOM_WAIT_AT_MOST 4 s) so that the test takes
seconds.

    checkpoint_room_wait_test.py PACKAGE_DIR
"""
import fcntl
import os
import shutil
import sys
import tempfile
import threading
import time

from fresh_package import fresh, run


def hold_lock(folder, seconds, held):
    """Another process's hold of the budget's lock (its own open file: flock conflicts)."""
    fd = os.open(os.path.join(folder, ".budget"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held.set()
    time.sleep(seconds)
    os.close(fd)


def agent(folder, stop):
    """Answers the request once it can take the budget's lock without waiting."""
    request = os.path.join(folder, ".room-0")
    while not stop.is_set():
        if os.path.exists(request):
            fd = os.open(os.path.join(folder, ".budget"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                open(request + ".granted", "w").close()
                os.unlink(request)
            except BlockingIOError:
                pass
            finally:
                os.close(fd)
        time.sleep(0.02)


def main():
    folders = []
    try:
        waits(folders)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def new_folder(folders):
    folders.append(tempfile.mkdtemp(dir="/dev/shm"))
    return folders[-1]


def waits(folders):
    checkpoint = fresh(sys.argv[1])
    checkpoint._ROOM_ANSWER_WITHIN, checkpoint._ROOM_WAIT_AT_MOST = 0.5, 4.0
    os.environ["LOCAL_RANK"] = "0"

    # The lock held for 1.5 s (three times the wait) from before the request: answered after it.
    folder = new_folder(folders)
    held, stop = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_lock, args=(folder, 1.5, held))
    holder.start()
    held.wait()
    answering = threading.Thread(target=agent, args=(folder, stop))
    answering.start()
    began = time.monotonic()
    answered = checkpoint._ask_for_room(folder, 4096)
    took = time.monotonic() - began
    stop.set()
    holder.join()
    answering.join()
    assert answered, f"gave up after {took:.2f} s while the lock was held"
    assert took >= 1.4 and os.path.exists(os.path.join(folder, ".room-0.granted")), took

    # No agent, the lock free: the request is withdrawn after the wait.
    folder = new_folder(folders)
    began = time.monotonic()
    assert not checkpoint._ask_for_room(folder, 4096)
    took = time.monotonic() - began
    assert 0.5 <= took < 2.0, took
    assert not os.path.exists(os.path.join(folder, ".room-0"))

    # No agent, the lock never free (held until after the bound): given up at the bound.
    folder = new_folder(folders)
    held = threading.Event()
    holder = threading.Thread(target=hold_lock, args=(folder, 5.0, held))
    holder.start()
    held.wait()
    began = time.monotonic()
    assert not checkpoint._ask_for_room(folder, 4096)
    took = time.monotonic() - began
    holder.join()
    assert 4.0 <= took < 7.0, took  # (the withdrawal waits for the lock: its holder lets go at 5 s)
    assert not os.path.exists(os.path.join(folder, ".room-0"))
    print("a request for room waits out other ranks' holds of the budget's lock, counting only the "
          "lock's free time, and is withdrawn after its wait or its bound: passed")


if __name__ == "__main__":
    run(main)
