"""Each step's time and how much of it this rank waited for its peers, for ddprun's straggler
check (--straggler_threshold), measured in a Python worker without a change to its script: ddprun's
sitecustomize calls install() in every Python worker of a job the check watches.

A step ends at each optimizer step (torch's global optimizer hook, torch 2.0 and later). Within a
step, the wait is measured at the collectives:
- DDP's gradient all-reduces, from the moment this rank's backward pass computed its last
  gradient to the moment DDP's wait for its all-reduces ended: two callbacks of the backward pass,
  queued by a hook on the model's output (DDP's own all-reduce and the script's communication hook
  run untouched). The rank the others wait for barely waits. On a GPU both moments are CUDA events
  on the stream the pass ends on (the host learns of an NCCL all-reduce before it ran), read once
  they have happened, a step or more later.
- a collective called through torch.distributed with async_op=False: its whole time (FSDP2's
  reduce-scatter, for one);
- the wait() of a collective's Work (async_op=True, as FSDP2's all-gathers on the CPU): the time
  this rank blocked in it.
Compute is the rest of the step. The totals go, through a shared mapping of the file the agent
named in DDPRUN_STEP_TIMES_FILE, into four little-endian u64: a sequence count (odd while being
written), the steps, their time and their waits (ns); the agent reads them on its own schedule.
Nothing here raises into the training script: what cannot be measured is not.
"""
import importlib.abc
import mmap
import os
import struct
import sys
import threading
import time

_RECORD = struct.Struct("<QQQQ")
_GPU_PENDING = 16  # steps whose GPU events are kept until they happen
_ENV = "DDPRUN_STEP_TIMES_FILE"
_now = time.monotonic_ns


class _Steps:
    """This process's step record and the step under way."""

    def __init__(self):
        self.lock = threading.Lock()
        self.map = None
        self.opened = False
        self.seq = self.steps = self.step_ns = self.wait_ns = 0
        self.step_began = None  # when the step under way began (the last one's end)
        self.waited = 0  # waits of the step under way measured on the host (ns)
        self.pass_marked = False  # a DDP backward pass's end is to be marked
        self.gpu_pending = []  # (gradients computed, all-reduced) events not yet read

    def _open(self):
        self.opened = True
        path = os.environ.pop(_ENV, None)  # a process this one starts is not this rank
        if not path:
            return
        try:
            fd = os.open(path, os.O_RDWR)
            try:
                self.map = mmap.mmap(fd, _RECORD.size)
            finally:
                os.close(fd)
        except (OSError, ValueError):
            self.map = None

    def gradients_reduced(self, ready, ready_event, done_event):
        """A DDP backward pass: its gradients computed at `ready` (host ns) and all-reduced now;
        on a GPU, where the host runs ahead, the same two moments as CUDA events."""
        now = _now()
        with self.lock:
            if ready_event is not None and done_event is not None:
                self.gpu_pending.append((ready_event, done_event))
                del self.gpu_pending[:-_GPU_PENDING]
            else:
                self.waited += max(0, now - ready)

    def _gpu_waits(self):
        """The waits of the passes whose events have happened by now (ns); the lock is held."""
        waited = 0
        while self.gpu_pending and all(e.query() for e in self.gpu_pending[0]):
            ready, done = self.gpu_pending.pop(0)
            waited += max(0, int(ready.elapsed_time(done) * 1e6))
        return waited

    def waited_for(self, ns):
        with self.lock:
            self.waited += ns

    def step_ended(self):
        now = _now()
        with self.lock:
            wait = self.waited
            if self.gpu_pending:
                try:
                    wait += self._gpu_waits()
                except Exception:  # noqa: BLE001 - a CUDA error is the script's to see
                    self.gpu_pending = []
            began, self.step_began = self.step_began, now
            self.waited, self.pass_marked = 0, False  # (a pass that raised marks nothing)
            if began is None:
                return  # the first step's start is unknown
            if not self.opened:
                self._open()
            if self.map is None:
                return
            step = now - began
            self.steps += 1
            self.step_ns += step
            self.wait_ns += min(wait, step)
            self.seq += 1
            _RECORD.pack_into(self.map, 0, self.seq, self.steps, self.step_ns, self.wait_ns)
            self.seq += 1
            _RECORD.pack_into(self.map, 0, self.seq, self.steps, self.step_ns, self.wait_ns)


_steps = _Steps()


def _optimizer_stepped(*_):
    _steps.step_ended()


def _event_now(cuda):
    """A CUDA event recorded now on the current stream where `cuda`, else None."""
    if not cuda:
        return None
    try:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    except Exception:  # noqa: BLE001 - untimed, as on the host
        return None


def _queue_callback(callback):
    """`callback` run once the backward pass under way has run every callback queued before it;
    what it raises stays here (a pass unmeasured)."""
    from torch.autograd import Variable

    def run():
        try:
            callback()
        except Exception:  # noqa: BLE001 - nothing raises into the training
            pass

    Variable._execution_engine.queue_callback(run)


def _gradients_computed(cuda):
    ready, ready_event = _now(), _event_now(cuda)

    def reduced():
        _steps.pass_marked = False
        _steps.gradients_reduced(ready, ready_event, _event_now(cuda))

    _queue_callback(reduced)


def _compiling():
    """Whether Dynamo is tracing the caller (torch 2.3 and later; before, taken as not)."""
    import torch

    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return is_compiling is not None and is_compiling()


def _backward_began(cuda):
    """The hook on a DDP output's gradient: the backward pass through the model has begun."""

    def began(_grad):
        # Traced by Dynamo (compiled autograd), it does nothing: the pass is not measured.
        if _compiling() or _steps.pass_marked:
            return
        _steps.pass_marked = True  # one mark a pass: outputs of several forwards, nested DDP
        try:
            _queue_callback(lambda: _gradients_computed(cuda))
        except Exception:  # noqa: BLE001 - nothing raises into the training
            _steps.pass_marked = False

    return began


def _watch_backward(output):
    """Marks the backward pass through `output`, a DDP model's output: a hook on its first tensors
    made by the forward that need a gradient (one is enough; more cover a loss that uses only
    some; a tensor the forward did not make, a parameter returned as it is, would keep the hook)
    queues, once a pass, a callback that runs when the pass has computed every gradient, before
    DDP's own callback that waits for the all-reduces (queued later, once the last bucket is
    ready). That callback queues the mark of the end of DDP's wait."""
    import torch

    if isinstance(output, torch.Tensor):
        tensors = [output]
    else:
        from torch.utils._pytree import tree_leaves

        tensors = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)][:8]
    tensors = [t for t in tensors if t.requires_grad and t.grad_fn is not None]
    if tensors:
        began = _backward_began(tensors[0].is_cuda)
        for tensor in tensors:
            tensor.register_hook(began)


def _traced_whole(torch):
    """Whether Dynamo, tracing now, traces DDP's forward and backward into its graphs (its
    python_reducer modes), where a frame of ddprun's would split them."""
    return str(torch._dynamo.config.optimize_ddp).startswith("python_reducer")


def _patch_ddp(module):
    """DDP's forward marks the backward pass that follows it. The all-reduces are DDP's own,
    untouched: no communication hook, so its arithmetic (the division by the world, or by the
    ranks not yet joined under Join) and a hook the script registers are as without ddprun."""
    from torch.version import __version__

    if int(__version__.split(".")[0]) < 2:  # no global optimizer hook: no step would end
        return
    import torch

    forward = module.DistributedDataParallel.forward

    def watched_forward(self, *inputs, **kwargs):
        output = forward(self, *inputs, **kwargs)
        if torch.is_grad_enabled() and self.require_backward_grad_sync:
            try:
                _watch_backward(output)
            except Exception:  # noqa: BLE001 - this step untimed, the model's output unchanged
                pass
        return output

    # Under torch.compile with DDPOptimizer (the default), Dynamo compiles DDP's own forward as
    # without this frame, which runs as Python; where Dynamo traces DDP whole, it is left to it.
    disable = getattr(torch, "_disable_dynamo", None)
    if disable is not None:
        watched_forward = disable(watched_forward, recursive=False)

    def timed_forward(self, *inputs, **kwargs):
        if _compiling() and _traced_whole(torch):
            return forward(self, *inputs, **kwargs)
        return watched_forward(self, *inputs, **kwargs)

    timed_forward.__name__, timed_forward.__qualname__ = forward.__name__, forward.__qualname__
    timed_forward.__doc__, timed_forward.__wrapped__ = forward.__doc__, forward
    module.DistributedDataParallel.forward = timed_forward


_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
                "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "broadcast",
                "reduce", "all_to_all", "all_to_all_single", "barrier", "gather", "scatter")

_inside = threading.local()  # .depth: timed calls under way in this thread (one wait counts once)


def _timed(call):
    """`call`, its time added to the step's waits unless a timed call encloses it."""

    def timed(*args, **kwargs):
        depth = getattr(_inside, "depth", 0)
        _inside.depth = depth + 1
        began = _now()
        try:
            return call(*args, **kwargs)
        finally:
            _inside.depth = depth
            if depth == 0:
                _steps.waited_for(_now() - began)

    timed.__name__, timed.__qualname__, timed.__doc__ = call.__name__, call.__qualname__, call.__doc__
    timed.__wrapped__ = call
    return timed


def _timed_collective(call):
    timed_call = _timed(call)

    def timed(*args, **kwargs):
        if kwargs.get("async_op"):  # its Work's wait() is timed
            return call(*args, **kwargs)
        return timed_call(*args, **kwargs)

    timed.__name__, timed.__qualname__, timed.__doc__ = call.__name__, call.__qualname__, call.__doc__
    timed.__wrapped__ = call
    return timed


def _patch_c10d(module):
    from torch.version import __version__

    if int(__version__.split(".")[0]) < 2:  # no global optimizer hook: no step would end
        return
    for name in _COLLECTIVES:
        call = getattr(module, name, None)
        if callable(call):
            setattr(module, name, _timed_collective(call))
    work = getattr(module, "Work", None)
    if work is not None and callable(getattr(work, "wait", None)):
        work.wait = _timed(work.wait)


def _hook_optimizers(module):
    register = getattr(module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(_optimizer_stepped)


class _Loader(importlib.abc.Loader):
    """A module's own loader, then `after(module)`."""

    def __init__(self, loader, after):
        self.loader, self.after = loader, after

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        try:
            self.after(module)
        except Exception:  # noqa: BLE001 - the module works as before, unmeasured
            pass


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs an action once each module it names has been imported."""

    def __init__(self, actions):
        self.actions = actions

    def find_spec(self, name, path, target=None):
        after = self.actions.pop(name, None)
        if after is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, after)
                return spec
        return None


def install():
    """Measures this process's steps once torch's modules are imported (idempotent)."""
    if any(isinstance(f, _AfterImport) for f in sys.meta_path):
        return
    actions = {"torch.optim.optimizer": _hook_optimizers,
               "torch.nn.parallel.distributed": _patch_ddp,
               "torch.distributed.distributed_c10d": _patch_c10d}
    for name in list(actions):
        if name in sys.modules:  # imported already (a warm interpreter's preload)
            actions.pop(name)(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport(actions))


def _reopen():
    """An in-process restart (ddprun.inprocess): the attempt's record is a new file, from zero."""
    with _steps.lock:
        _steps.opened, _steps.map, _steps.step_began = False, None, None
        _steps.seq = _steps.steps = _steps.step_ns = _steps.wait_ns = 0
