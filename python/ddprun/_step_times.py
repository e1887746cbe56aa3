"""Each step's time and how much of it this rank waited for its peers, for ddprun's straggler
check (--straggler_threshold), measured in a Python worker without a change to its script: ddprun's
sitecustomize calls install() in every Python worker of a job the check watches.

A step ends at each optimizer step (torch's global optimizer hook, torch 2.0 and later). Within a
step, the wait is measured at the collectives:
- DDP's gradient all-reduce, through a communication hook (DDP's default all-reduce, registered
  when the model is made, or the hook the script registers, in its place; timed): from the moment
  this rank's last bucket was ready (its own backward pass done) to the completion of the last
  all-reduce. The rank the others wait for barely waits. On a GPU both moments are CUDA events (the
  host learns of an NCCL all-reduce before it ran), read once they have happened, a step or more
  later.
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
        self.waited = 0  # waits of the step under way, outside DDP's buckets
        self.last_ready = None  # DDP: when this rank's last bucket of the step was ready
        self.last_done = None  # DDP: when the step's last all-reduce completed
        self.gpu_ready = self.gpu_done = None  # the same as CUDA events, for buckets on a GPU
        self.gpu_pending = []  # (ready, done) events of steps not yet read

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

    def bucket_ready(self, event=None):
        now = _now()
        with self.lock:
            self.last_ready = now
            if event is not None:
                self.gpu_ready = event

    def bucket_done(self, event=None):
        now = _now()
        with self.lock:
            if self.last_done is None or now > self.last_done:
                self.last_done = now
            if event is not None:
                self.gpu_done = event

    def _gpu_waits(self):
        """The waits of the steps whose events have happened by now (ns); the lock is held."""
        if self.gpu_ready is not None and self.gpu_done is not None:
            self.gpu_pending.append((self.gpu_ready, self.gpu_done))
            del self.gpu_pending[:-_GPU_PENDING]
        self.gpu_ready = self.gpu_done = None
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
            if self.gpu_ready is not None or self.gpu_pending:
                try:
                    wait += self._gpu_waits()
                except Exception:  # noqa: BLE001 - a CUDA error is the script's to see
                    self.gpu_pending = []
            elif self.last_ready is not None and self.last_done is not None:
                wait += max(0, self.last_done - self.last_ready)
            began, self.step_began = self.step_began, now
            self.waited, self.last_ready, self.last_done = 0, None, None
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


def _event(tensor):
    """A CUDA event recorded now on the current stream where `tensor` is on a GPU, else None."""
    if not tensor.is_cuda:
        return None
    try:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    except Exception:  # noqa: BLE001 - untimed, as on the host
        return None


def _timed_comm_hook(hook):
    """`hook`, with its bucket's readiness and its all-reduce's completion recorded."""

    def timed(state, bucket):
        buffer = bucket.buffer()
        _steps.bucket_ready(_event(buffer))
        future = hook(state, bucket)

        def done(f):
            # On a GPU this runs on a stream that waits for the all-reduce: the event marks its end.
            _steps.bucket_done(_event(buffer))
            return f.value()

        return future.then(done)

    timed.__name__ = getattr(hook, "__name__", "comm_hook")
    timed.__qualname__ = getattr(hook, "__qualname__", timed.__name__)
    return timed


class _HookBox:
    """The communication hook of a DDP model whose reducer was given ddprun's timed one: DDP takes
    one hook per model, so a hook the script registers later goes in here."""

    def __init__(self, state, hook, default):
        self.state, self.hook, self.default = state, hook, default


def _boxed(box, bucket):
    return box.hook(box.state, bucket)


_timed_box = _timed_comm_hook(_boxed)


def _patch_ddp(module):
    """DDP's reducer gets, when the model is made, DDP's default all-reduce (divide by the world,
    then sum: the same arithmetic) as a timed hook; a hook the script registers replaces it."""
    from torch.version import __version__

    if int(__version__.split(".")[0]) < 2:  # no global optimizer hook: no step would end
        return
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    ddp = module.DistributedDataParallel
    init, register, builtin = ddp.__init__, ddp.register_comm_hook, ddp._register_builtin_comm_hook
    builtins = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
                dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        reducer = getattr(self, "reducer", None)
        if getattr(self, "_ddprun_hooked", False) or reducer is None:
            return
        try:
            box = _HookBox(self.process_group, default_hooks.allreduce_hook, True)
            # The reducer's own, not DDP's list of hooks (which its Python reducer calls with a
            # gradient instead of a bucket): that one stays DDP's default, untimed.
            dist._register_comm_hook(reducer, box, _timed_box)
            self._ddprun_box = box
        except Exception:  # noqa: BLE001 - an untimed DDP trains as before
            pass

    def swap(self, state, hook, name):
        box = self._ddprun_box
        if not box.default:
            raise RuntimeError(
                "register_comm_hook or register_builtin_comm_hook can only be called once.")
        self.logger._set_comm_hook_name(name)
        box.state, box.hook, box.default = state, hook, False

    def register_comm_hook(self, state, hook):
        if getattr(self, "_ddprun_box", None) is None:
            self._ddprun_hooked = True
            return register(self, state, _timed_comm_hook(hook))
        self._check_comm_hook(hook)
        swap(self, state, hook, hook.__qualname__)
        self._comm_hooks.append((hook, state))
        return None

    def register_builtin_comm_hook(self, comm_hook_type):
        if getattr(self, "_ddprun_box", None) is None or comm_hook_type not in builtins:
            self._ddprun_hooked = True
            return builtin(self, comm_hook_type)
        swap(self, self.process_group, builtins[comm_hook_type], str(comm_hook_type))
        return None

    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init
    register_comm_hook.__doc__, register_comm_hook.__wrapped__ = register.__doc__, register
    ddp.__init__ = __init__
    ddp.register_comm_hook = register_comm_hook
    ddp._register_builtin_comm_hook = register_builtin_comm_hook


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
