"""ddprun._step_times without a job, in one process (a world of one, gloo): installed before torch
is imported, as ddprun's sitecustomize installs it, it leaves DDP's arithmetic as it was (the
default all-reduce, a hook the script registers before or after its first step, a built-in one),
refuses a second hook as DDP does, and (torch 2) writes each step's time and wait into the file
DDPRUN_STEP_TIMES_FILE names, whole, behind an even sequence count; the variable is taken out of
the environment of what the worker starts. Under torch 1 (no global optimizer hook) nothing is
written and DDP is left alone.

    step_times_test.py PACKAGE_DIR
"""
import os
import struct
import sys
import tempfile
import time


def main():
    sys.path.insert(0, sys.argv[1])
    path = tempfile.mktemp(dir="/dev/shm")
    with open(path, "wb") as f:
        f.write(bytes(32))
    os.environ.update({"DDPRUN_STEP_TIMES_FILE": path, "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": "0", "RANK": "0", "WORLD_SIZE": "1"})
    from ddprun import _step_times

    _step_times.install()
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    calls = []

    def hook(state, bucket):
        calls.append(state)
        return default_hooks.allreduce_hook(dist.group.WORLD, bucket)

    def train(register=None, at=0):
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                        torch.nn.Linear(64, 1)))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for step in range(6):
            if register and step == at:
                register(model)
            x = torch.randn(8, 64, generator=torch.Generator().manual_seed(step))
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.detach().clone() for p in model.parameters()]

    def identical(a, b):
        return all(torch.equal(x, y) for x, y in zip(a, b))

    plain = train()
    assert identical(plain, train(lambda m: m.register_comm_hook("mine", hook))), "a hook first"
    assert identical(plain, train(lambda m: m.register_comm_hook("late", hook), at=3)), "a hook late"
    assert calls.count("mine") == 6 and calls.count("late") == 3, calls
    builtin = dist.BuiltinCommHookType.ALLREDUCE
    assert identical(plain, train(lambda m: m._register_builtin_comm_hook(builtin))), "built-in"
    twice = DDP(torch.nn.Linear(4, 4))
    twice.register_comm_hook(None, hook)
    try:
        twice.register_comm_hook(None, hook)
        raise AssertionError("a second hook was taken")
    except RuntimeError as e:
        assert "can only be called once" in str(e), e

    assert "DDPRUN_STEP_TIMES_FILE" not in os.environ or torch.__version__ < "2"
    with open(path, "rb") as f:
        seq, steps, step_ns, wait_ns = struct.unpack("<QQQQ", f.read())
    os.unlink(path)
    if int(torch.__version__.split(".")[0]) < 2:
        assert (seq, steps, step_ns, wait_ns) == (0, 0, 0, 0), (seq, steps)
        print("torch 1: DDP's arithmetic as it was, nothing measured: passed")
        return
    # Every optimizer step but the process's first ends a step: 4 runs of 6.
    assert steps == 23 and seq == 2 * steps, (seq, steps)
    assert 0 < wait_ns < step_ns, (wait_ns, step_ns)
    gpu_events_are_read_once_they_happened(_step_times)
    print(f"{steps} steps timed ({step_ns / steps / 1e6:.2f} ms each, "
          f"{wait_ns / steps / 1e6:.2f} ms of it in the all-reduce); DDP's arithmetic as it was "
          f"with the default, a hook first, a hook late, a built-in one; GPU events read once "
          f"they happened: passed")


class Event:
    """What _step_times uses of a CUDA event (there is no GPU here): whether it happened, and the
    milliseconds from it to another."""

    def __init__(self, at_ms):
        self.at_ms, self.happened = at_ms, False

    def query(self):
        return self.happened

    def elapsed_time(self, other):
        assert self.happened and other.happened, "read before it happened"
        return other.at_ms - self.at_ms


def gpu_events_are_read_once_they_happened(module):
    path = tempfile.mktemp(dir="/dev/shm")
    with open(path, "wb") as f:
        f.write(bytes(32))
    os.environ["DDPRUN_STEP_TIMES_FILE"] = path
    steps = module._Steps()
    steps.step_ended()  # the first step's start

    def step(ready_ms, done_ms):
        ready, done = Event(ready_ms), Event(done_ms)
        steps.bucket_ready(ready)
        steps.bucket_done(done)
        time.sleep(0.01)  # the step's host time (a wait is at most its step's)
        steps.step_ended()
        return ready, done

    def wait_ns():
        with open(path, "rb") as f:
            return struct.unpack("<QQQQ", f.read())[3]

    first = step(10.0, 14.0)  # the GPU has not run it yet: nothing read
    assert wait_ns() == 0, wait_ns()
    first[1].happened = True  # its end, but not its start: still nothing
    second = step(20.0, 21.5)
    assert wait_ns() == 0, wait_ns()
    first[0].happened = second[0].happened = second[1].happened = True
    step(30.0, 30.5)  # both earlier steps read now, in order; this one not yet
    assert wait_ns() == 5_500_000, wait_ns()
    os.unlink(path)


if __name__ == "__main__":
    main()
