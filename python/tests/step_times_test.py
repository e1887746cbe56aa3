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
    print(f"{steps} steps timed ({step_ns / steps / 1e6:.2f} ms each, "
          f"{wait_ns / steps / 1e6:.2f} ms of it in the all-reduce); DDP's arithmetic as it was "
          f"with the default, a hook first, a hook late, a built-in one: passed")


if __name__ == "__main__":
    main()
