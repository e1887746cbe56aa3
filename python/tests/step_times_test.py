"""ddprun._step_times without a job (gloo, on this machine's CPUs): installed before torch is
imported, as ddprun's sitecustomize installs it, it leaves DDP's arithmetic bit for bit as without
it, in a world of 3 (not a power of two, where dividing and multiplying by the inverse differ):
the default all-reduce, gradients as bucket views kept between steps (DDP divides those in place),
a communication hook the script registers after its first steps, Join over uneven inputs dividing
by the ranks not yet joined, a static graph, parameters unused on some steps, and a model compiled
by torch.compile. (torch 2) It writes each step's time and wait into the file
DDPRUN_STEP_TIMES_FILE names, whole, behind an even sequence count; in each of those ways, the wait
of a rank for a peer that begins its backward pass late is measured; and it takes the variable out
of the environment of what the worker starts. Under torch 1 (no
global optimizer hook) nothing is written. Scripts shaped otherwise (shapes_main) are measured once a
pass, without error. GPU events are read only once they happened.

    step_times_test.py PACKAGE_DIR      (a rank: ... PACKAGE_DIR --rank RANK FOLDER TIMED)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

WORLD = 3
# The last rank begins each backward pass this late (s): the others wait for it. On a loaded 2-core
# machine rank 0's own compute ran late too, by about 60 ms in 5 steps: 0.05 s a step left too little.
LATE = 0.1
CASES = ("default", "bucket_views", "late_hook", "join_uneven", "static_graph", "find_unused",
         "compiled")


def waited_ns(record):
    with open(record, "rb") as f:
        return struct.unpack("<QQQQ", f.read())[3]


def rank_main(package, rank, folder, timed):
    record = os.environ.get("DDPRUN_STEP_TIMES_FILE")
    sys.path.insert(0, package)
    if timed == "1":
        from ddprun import _step_times

        _step_times.install()
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store.{timed}", rank=rank,
                            world_size=WORLD)
    torch2 = int(torch.__version__.split(".")[0]) >= 2

    class Skipping(torch.nn.Module):
        """Two layers; where `skip`, a third in the graph on every other step only."""

        def __init__(self, skip):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                            torch.nn.Linear(64, 1))
            self.tail = torch.nn.Linear(1, 1) if skip else None
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            y = self.body(x)
            return self.tail(y) if self.tail is not None and self.calls % 2 else y

    def train(case):
        torch.manual_seed(0)
        model = DDP(Skipping(case == "find_unused"), gradient_as_bucket_view=case == "bucket_views",
                    static_graph=case == "static_graph", find_unused_parameters=case == "find_unused")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        run = model
        if case == "compiled":
            if not torch2:
                return None
            run = torch.compile(model, backend="eager")
        steps = 6 + rank if case == "join_uneven" else 6

        def step(i):
            if case == "late_hook" and i == 3:
                model.register_comm_hook(None, default_hooks.allreduce_hook)
            x = torch.randn(8, 64, generator=torch.Generator().manual_seed(100 * rank + i))
            loss = run(x).pow(2).mean()
            if rank == WORLD - 1:
                time.sleep(LATE)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=case != "bucket_views")

        if case == "join_uneven":
            with Join([model], divide_by_initial_world_size=False):
                for i in range(steps):
                    step(i)
        else:
            for i in range(steps):
                step(i)
        return [p.detach().clone() for p in model.parameters()]

    trained, waits = {}, {}
    for case in CASES:
        before = waited_ns(record) if record else 0
        trained[case] = train(case)
        waits[case] = (waited_ns(record) if record else 0) - before
    if rank == 0:
        with open(os.path.join(folder, f"waits.{timed}"), "w") as f:
            json.dump(waits, f)
        torch.save(trained, os.path.join(folder, f"params.{timed}"))
        with open(os.path.join(folder, f"env.{timed}"), "w") as f:
            f.write(os.environ.get("DDPRUN_STEP_TIMES_FILE", ""))
    dist.destroy_process_group()


def shapes_main(package):
    """Timed, world of one: the passes of scripts shaped otherwise are each marked once, a
    parameter returned as it is gathers no hooks, and compiled autograd traces the backward pass
    (with fullgraph, DDP traced whole by Dynamo) without an error."""
    sys.path.insert(0, package)
    from ddprun import _step_times

    _step_times.install()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    marks = []
    reduced = _step_times._steps.gradients_reduced
    _step_times._steps.gradients_reduced = lambda *a: (marks.append(1), reduced(*a))
    model = DDP(torch.nn.Linear(8, 1))
    x = torch.randn(4, 8)
    for _ in range(3):  # two forwards, one backward pass (a siamese network)
        (model(x) - model(-x)).pow(2).mean().backward()
    assert len(marks) == 3, f"two forwards of one pass marked {len(marks)} times in 3 passes"
    marks.clear()
    for _ in range(3):  # a gradient penalty: autograd.grad through the output, then the pass
        out = model(x.requires_grad_())
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        (out.pow(2).mean() + g.pow(2).sum()).backward()
    assert len(marks) == 6, f"a grad and a backward pass marked {len(marks)} times in 3 steps"

    class Returns(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(3))

        def forward(self, _x):
            return self.weight

    leaf = DDP(Returns())
    for _ in range(20):
        leaf(x).sum().backward()
    hooks = len(leaf.module.weight._backward_hooks or {})
    assert hooks == 0, f"a parameter returned by the forward gathered {hooks} hooks"

    from torch._dynamo import compiled_autograd

    torch._dynamo.config.optimize_ddp = "python_reducer"
    compiled = torch.compile(DDP(torch.nn.Linear(8, 1)), backend="eager", fullgraph=True)
    for _ in range(2):
        loss = compiled(x).pow(2).mean()
        with compiled_autograd._enable(torch.compile(backend="eager", fullgraph=True)):
            loss.backward()
    dist.destroy_process_group()


def run_world(package, folder, timed, record):
    env = dict(os.environ)
    env.pop("DDPRUN_STEP_TIMES_FILE", None)
    ranks = []
    for rank in range(WORLD):
        rank_env = dict(env)
        if timed == "1":
            rank_env["DDPRUN_STEP_TIMES_FILE"] = record if rank == 0 else record + f".{rank}"
            with open(rank_env["DDPRUN_STEP_TIMES_FILE"], "wb") as f:
                f.write(bytes(32))
        ranks.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), package,
                                       "--rank", str(rank), folder, timed], env=rank_env))
    try:
        codes = [p.wait(timeout=200) for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0] * WORLD, f"ranks exited {codes}"


def main(package):
    import torch

    folder = tempfile.mkdtemp()
    record = tempfile.mktemp(dir="/dev/shm")
    try:
        for timed in ("0", "1"):
            run_world(package, folder, timed, record)
        plain, timed = (torch.load(os.path.join(folder, f"params.{t}")) for t in ("0", "1"))
        differ = [case for case in CASES if plain[case] is not None and not all(
            torch.equal(a, b) for a, b in zip(plain[case], timed[case]))]
        assert not differ, f"DDP trained differently with its steps timed: {', '.join(differ)}"
        with open(record, "rb") as f:
            seq, steps, step_ns, wait_ns = struct.unpack("<QQQQ", f.read())
        with open(os.path.join(folder, "env.1")) as f:
            left = f.read()
    finally:
        for path in [record] + [record + f".{r}" for r in range(1, WORLD)]:
            if os.path.exists(path):
                os.unlink(path)
    torch2 = int(torch.__version__.split(".")[0]) >= 2
    checked = [c for c in CASES if plain[c] is not None]
    if not torch2:
        assert (seq, steps, step_ns, wait_ns) == (0, 0, 0, 0), (seq, steps)
        print(f"torch 1: DDP's arithmetic as it was ({', '.join(checked)}), nothing measured: "
              "passed")
        return
    assert not left, f"the worker's environment kept DDPRUN_STEP_TIMES_FILE={left}"
    # Rank 0 steps 6 times a case; every optimizer step but the process's first ends a step.
    assert steps == 6 * len(CASES) - 1 and seq == 2 * steps, (seq, steps)
    assert 0 < wait_ns < step_ns, (wait_ns, step_ns)
    with open(os.path.join(folder, "waits.1")) as f:
        waits = json.load(f)
    # Rank 0 waits for the late rank in each of its 6 steps a case; at least half of that counted
    # (a case's first step has the others start their model, or compile it, as it does; a loaded
    # machine delays rank 0's own compute too). A wait not measured would count none of it.
    short = {case: waits[case] / 1e9 for case in CASES if waits[case] < 3 * LATE * 1e9}
    assert not short, f"DDP's wait for a rank {LATE} s late not measured (s): {short}"
    subprocess.run([sys.executable, os.path.abspath(__file__), package, "--shapes"], check=True,
                   timeout=200)
    sys.path.insert(0, package)
    from ddprun import _step_times

    gpu_events_are_read_once_they_happened(_step_times)
    print(f"{steps} steps timed ({step_ns / steps / 1e6:.2f} ms each, "
          f"{wait_ns / steps / 1e6:.2f} ms of it waiting); DDP's arithmetic bit for bit as without "
          f"the timing in a world of {WORLD} ({', '.join(checked)}), the late rank's wait measured in "
          f"each; two forwards, a gradient penalty, a parameter returned, compiled autograd; GPU "
          f"events read once they happened: passed")


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
        steps.gradients_reduced(0, ready, done)
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
    if len(sys.argv) > 2 and sys.argv[2] == "--rank":
        rank_main(sys.argv[1], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    elif len(sys.argv) > 2 and sys.argv[2] == "--shapes":
        shapes_main(sys.argv[1])
    else:
        main(sys.argv[1])
