"""ddprun.inprocess's side of the agent's file, without a job: an abort is asked first and done
after (what the training waits for before it destroys its process groups); an abort of an attempt
the worker never began (the agent wrote it over the "run" before the worker read that) is answered
as parked at once, not waited through; the next attempt's "run" starts with no abort pending.

    inprocess_channel_test.py PACKAGE_DIR
"""
import json
import os
import sys
import tempfile
import threading
import time


def tell(path, **message):
    """What the agent writes: the whole file, replaced at once."""
    with open(path + ".tmp", "w") as f:
        json.dump(message, f)
    os.replace(path + ".tmp", path)


def wait_until(what, condition, limit=5.0):
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"not within {limit} s: {what}"
        time.sleep(0.005)


def parked(path):
    try:
        with open(path + ".parked") as f:
            return f.read()
    except FileNotFoundError:
        return None


def main():
    sys.path.insert(0, sys.argv[1])
    from ddprun import inprocess
    path = os.path.join(tempfile.mkdtemp(), "rank0")
    tell(path, generation=1, state="run")
    channel = inprocess._Channel(path)
    assert channel.generation == 1 and os.path.exists(path + ".ready")
    channel.begin()

    tell(path, generation=1, state="abort")
    wait_until("attempt 1's abort done", channel.aborted.is_set)
    assert channel.asked.is_set()
    channel.parked()

    # Attempt 2 ran and ended before this worker read that it runs in it: the file says "abort".
    tell(path, generation=2, state="abort")
    resumed = {}
    waiter = threading.Thread(target=lambda: resumed.update(env=channel.wait_for_resume()))
    waiter.start()
    wait_until("attempt 2 answered as parked", lambda: parked(path) == "2")
    assert waiter.is_alive() and not resumed, "an aborted attempt was begun"

    tell(path, generation=3, state="run", env={"RANK": "1"}, unset=["GONE"])
    waiter.join(5)
    assert resumed["env"] == ({"RANK": "1"}, ["GONE"]), resumed
    assert channel.generation == 3 and not channel.asked.is_set() and not channel.aborted.is_set()
    channel.begin()
    tell(path, generation=3, state="abort")
    wait_until("attempt 3's abort done", channel.aborted.is_set)
    print("an abort is asked, then done; one of an attempt never begun is answered as parked at "
          "once; the next attempt starts with no abort pending: passed")


if __name__ == "__main__":
    main()
