"""In-process restart (ddprun --restart_mode=in_process): a failure costs the healthy ranks nothing.

    import torch.distributed as dist
    from ddprun import checkpoint, inprocess

    model = build_model()  # once per process: kept across restarts (device memory, compiled code)
    optimizer = torch.optim.Adam(model.parameters())

    def train():
        dist.init_process_group("gloo")  # each time: the round's RANK, WORLD_SIZE, MASTER_*
        ddp = DDP(model)
        step, state = checkpoint.load()
        ...

    inprocess.run(train)

Under ddprun with --restart_mode=in_process, run() calls train(); when a rank fails anywhere in the
job (its process ends, its training raises, it hangs, its node is lost), the agents ask every other
rank to abort: its collectives under way fail (gloo: the TCP connections opened since train() began
are shut down; NCCL: the process groups are aborted), its process groups are destroyed, and run()
waits for the round to form again, then calls train() once more with the new round's environment in
os.environ. The failed rank's process is replaced (warm under --preload); a rank whose training
raised keeps its process. What train() is given again is what the process kept: build the model,
compile it and start the data loaders outside it. Anywhere else (no ddprun, another restart mode)
run() just calls train().

With --standby_workers=N as well, each node keeps N standby processes: started like a worker but
without a rank (no RANK, LOCAL_RANK, WORLD_SIZE, MASTER_* in os.environ), each runs the script up
to run(), where it waits. A failed rank's process is replaced by a standby, which then calls
train() with the rank's environment, instead of by a new process. What the replacement's first
step would pay (torch.compile's tracing and compiling, CUDA's set-up) a standby pays before any
rank fails where the script asks it to, with warm_up(). Whatever depends on the rank (a sampler's
shard, a per-rank seed) belongs in train(), as it does for any in-process restart:

    def warm():
        model(torch.zeros(64, 512)).sum().backward()
        optimizer.zero_grad(set_to_none=True)  # (what it changed stays: BatchNorm's statistics)

    inprocess.warm_up(warm)
    inprocess.run(train)

The agent's side of the exchange is in the agent (workers/inprocess_channel.hpp); it is files:
<DDPRUN_INPROCESS_FILE> holds {"generation": G, "state": "run"|"abort"}, with "env": {...} and
"unset": [...] when it runs again, and "stack": true in an abort after a hang; this worker answers
with <file>.ready, <file>.raised ("G\\n<exception>"), <file>.stack ("G\\n<every thread's stack>",
before it aborts, where asked) and <file>.parked ("G").
"""
import faulthandler
import gc
import json
import os
import socket
import stat
import sys
import threading
import time
import traceback

_ENV = "DDPRUN_INPROCESS_FILE"
_STANDBY_ENV = "DDPRUN_STANDBY"  # "1": this process is a standby, without a rank yet
_POLL = 0.005  # seconds between looks at the agent's file
# How long a training whose collective failed waits for the agent's abort before the failure
# counts as this rank's own: another rank's failure reaches this rank's collectives before it
# reaches this rank's agent. Any other exception is this rank's own at once.
_PEER_FAILURE_GRACE = 2.0
# What this process's state holds besides what a new process starts from: "" (nothing), else what
# (an earlier attempt's training, a standby's warm-up). ddprun.checkpoint.load refuses to give such
# a process nothing to restore: it would train on from that state, unlike the ranks started anew.
_carried = ""
# What the message of a collective's RuntimeError holds when a peer is gone, silent or aborted:
# gloo's transport ("[../gloo/transport/tcp/pair.cc:589] Read error [..]: Connection reset by
# peer", "Connection closed by peer", a timeout), NCCL's (torch 1.13 raises them as RuntimeError;
# torch 2 as DistBackendError, a DistError) and the store's (torch 1.13: a bare "Broken pipe";
# torch 2: DistNetworkError, a DistError).
_PEER_FAILURE_MARKS = ("gloo/transport", "Connection closed by peer", "Connection reset by peer",
                       "Timed out", "NCCL", "TCPStore", "Socket Timeout", "Broken pipe")


def _peer_failure(e):
    """Whether `e`, or an exception it was raised from or while handling, is what a collective
    raises when another rank failed (not this rank's own)."""
    dist = sys.modules.get("torch.distributed")
    dist_error = getattr(dist, "DistError", None)
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if dist_error is not None and isinstance(e, dist_error):
            return True
        if isinstance(e, RuntimeError) and any(mark in str(e) for mark in _PEER_FAILURE_MARKS):
            return True
        e = e.__cause__ or e.__context__
    return False


def _tcp_sockets():
    """{(fd, inode)} of this process's open TCP sockets."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode):
            found.add((int(name), st.st_ino))
    return found


def _shut_down(sockets):
    """Shuts down the connected TCP sockets among `sockets` (a listening one is left as it is): a
    collective blocked on one fails at once."""
    for fd, _ in sockets:
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if s.family in (socket.AF_INET, socket.AF_INET6) and s.type == socket.SOCK_STREAM \
                    and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        finally:
            s.close()


def _abort_nccl():
    """Aborts the NCCL process groups, where there are some (torch's own abort)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return
    try:
        if dist.get_backend() != "nccl":
            return
        dist.distributed_c10d._abort_process_group()
    except Exception as e:  # noqa: BLE001 - what it could not abort, the sockets' shutdown may
        print(f"ddprun.inprocess: aborting the NCCL process groups: {e}", file=sys.stderr)


class _Channel:
    """This worker's side of the agent's file, and a thread that watches it for an abort."""

    def __init__(self, path):
        self.path = path
        told = self._read()
        self.generation = told["generation"] if told else 0
        self.asked = threading.Event()    # the agent asked this attempt to abort
        self.aborted = threading.Event()  # and the abort's work is done: nothing of it runs on
        self.sockets_before = set()
        self.failed_at = None  # where the training failed in this attempt (faulthandler's text)
        self.stack_asked = False  # the agent asked for this attempt's stack
        self._stack_lock = threading.Lock()
        self._lock = threading.Lock()
        self._write(".ready", "")
        threading.Thread(target=self._watch, name="ddprun-inprocess", daemon=True).start()

    def _read(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _write(self, suffix, text):
        temp = f"{self.path}{suffix}.tmp"
        with open(temp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temp, self.path + suffix)

    def _watch(self):
        seen = handled = None
        while True:
            time.sleep(_POLL)
            try:
                st = os.stat(self.path)
            except OSError:
                continue
            if (st.st_ino, st.st_mtime_ns, st.st_size) == seen:
                continue
            told = self._read()
            with self._lock:
                generation = self.generation
                # (An abort of an attempt this worker has not taken up yet is read again once it
                # has: the file is not marked seen.)
                if told and told.get("generation", 0) > generation:
                    continue
                seen = (st.st_ino, st.st_mtime_ns, st.st_size)
                if not told or told.get("state") != "abort" or \
                        told.get("generation") != generation or handled == generation:
                    continue
                before = self.sockets_before
            handled = generation
            if told.get("stack"):  # before anything wakes the training: it says it parked after
                self._write_stacks()
            # Under the lock, wait_for_resume() cannot begin the next attempt meanwhile, and the
            # training waits for `aborted` before it destroys its process groups and parks: neither
            # races the abort's work (NCCL's may take seconds), which ends only this attempt's.
            with self._lock:
                if self.generation != generation:  # the worker parked in it already
                    continue
                self.asked.set()
                try:
                    _abort_nccl()
                    _shut_down(_tcp_sockets() - before)
                finally:  # (the training waits for it, whatever the abort met)
                    self.aborted.set()

    def _write_stacks(self):
        """After a hang, where this rank waited, for the agent's report: <file>.stack in
        faulthandler's text, written before the abort unwinds it. Where the training already
        failed (another rank's abort reached its collective first), where it failed, else every
        thread's stack now; failed() rewrites it should the failure come meanwhile. A file that
        cannot be written costs the report that rank's frame, not the abort."""
        with self._stack_lock:
            self.stack_asked = True
            self._stack_file(self.failed_at)

    def _stack_file(self, failed_at):
        temp = f"{self.path}.stack.tmp"
        try:
            with open(temp, "w", encoding="utf-8", errors="backslashreplace") as f:
                f.write(f"{self.generation}\n")
                if failed_at is not None:
                    f.write(failed_at)
                else:
                    f.flush()
                    faulthandler.dump_traceback(file=f, all_threads=True)
            os.replace(temp, self.path + ".stack")
        except Exception as e:  # noqa: BLE001 - the abort must go on whatever this does
            print(f"ddprun.inprocess: writing this rank's stack: {e}", file=sys.stderr)

    def failed(self, e):
        """The training raised `e`: where, for the hang's report (innermost frame first)."""
        frames = traceback.StackSummary.extract(traceback.walk_tb(e.__traceback__),
                                                lookup_lines=False)
        text = "Where the training failed (most recent call first):\n" + "".join(
            f'  File "{f.filename}", line {f.lineno} in {f.name}\n' for f in reversed(frames))
        with self._stack_lock:
            self.failed_at = text
            if self.stack_asked:  # a live dump was written while the failure unwound: this instead
                self._stack_file(text)

    def begin(self):
        """train() is about to be called (again)."""
        with self._lock:
            self.sockets_before = _tcp_sockets()
        with self._stack_lock:
            self.failed_at, self.stack_asked = None, False

    def raised(self, text):
        self._write(".raised", f"{self.generation}\n{text}")

    def parked(self):
        self._write(".parked", str(self.generation))

    def wait_for_resume(self):
        """The environment of the attempt the agent runs this worker in next (blocks). An abort of
        a newer attempt than this worker's (one that ended before this worker read that it runs
        in it) is answered at once: parked, since it never began."""
        while True:
            told = self._read()
            generation = told.get("generation", 0) if told else 0
            if told and generation > self.generation and told.get("state") in ("run", "abort"):
                with self._lock:  # one step for the watcher: this attempt, its abort not asked
                    self.generation = generation
                    self.asked.clear()
                    self.aborted.clear()
                    self.sockets_before = _tcp_sockets()  # (an abort before begin() has them)
                if told["state"] == "run":
                    return told.get("env", {}), told.get("unset", [])
                self.parked()
            time.sleep(_POLL)


def _destroy_process_groups():
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # noqa: BLE001 - an aborted group may refuse; it is gone anyway
            print(f"ddprun.inprocess: destroying the process groups: {e}", file=sys.stderr)


def _start_again(env, unset):
    """This process runs its next attempt: the round's environment, and ddprun's own modules
    pointed at the attempt's files."""
    for name in unset:
        os.environ.pop(name, None)
    os.environ.update(env)
    for name, reset in (("ddprun.heartbeat", "_reopen"), ("ddprun._step_times", "_reopen"),
                        ("ddprun.checkpoint", "_restarted"), ("ddprun._replica", "_restarted"),
                        ("ddprun._dcp_node_items", "_restarted")):
        module = sys.modules.get(name)
        if module is not None:
            getattr(module, reset)()


def standby():
    """Whether this process is a standby of ddprun's (--standby_workers): it has no rank until
    run() is given one."""
    return bool(os.environ.get(_ENV)) and os.environ.get(_STANDBY_ENV) == "1"


def warm_up(fn, *args, **kwargs):
    """In a standby (standby() is true), calls fn(*args, **kwargs) and returns what it returns:
    a step's worth of work on made-up data, for instance, so that the compiling it causes is done
    before the standby takes a failed rank's place. Anywhere else does nothing and returns None.
    fn runs without a rank and without process groups; the state it changes (gradients, the
    optimizer's) is the script's to reset: the standby loads the rank's checkpoint in train()."""
    if not standby():
        return None
    global _carried
    _carried = "what its warm-up as a standby changed"
    return fn(*args, **kwargs)


def run(train, *args, **kwargs):
    """Calls train(*args, **kwargs) and returns what it returns; under ddprun with
    --restart_mode=in_process, calls it again in this process after every in-process restart of
    the job (see the module's text)."""
    global _carried
    path = os.environ.get(_ENV)
    if not path:
        return train(*args, **kwargs)
    # What the process made before its training and still holds (the model, the compiled code,
    # torch's modules) lives as long as the process: the collections between attempts look only at
    # what came since. A standby, whose warm-up leaves garbage and which has time, collects first;
    # a worker does not (a replacement's full collection, 0.2 to 0.4 s, would delay the restart):
    # cycles it made garbage before run(), and those among the frozen objects that it drops later,
    # are never collected.
    if standby():
        gc.collect()
    gc.freeze()
    channel = _Channel(path)
    if standby():  # a rank's place first
        _start_again(*channel.wait_for_resume())
    while True:
        channel.begin()
        try:
            return train(*args, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - every failure of the training restarts it
            channel.failed(e)
            if _peer_failure(e):
                channel.asked.wait(_PEER_FAILURE_GRACE)
            if channel.asked.is_set():
                first = traceback.format_exception_only(type(e), e)[-1].strip()
                print(f"ddprun.inprocess: attempt {channel.generation} aborted ({first})",
                      file=sys.stderr, flush=True)
            else:
                text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                print(text, end="", file=sys.stderr, flush=True)
                channel.raised(text)
                channel.asked.wait()
            traceback.clear_frames(e.__traceback__)
            del e
        channel.aborted.wait()
        _destroy_process_groups()
        checkpoints = sys.modules.get("ddprun.checkpoint")
        if checkpoints is not None:  # its saves under way end before this rank says it parked
            checkpoints._restarted()
        channel.parked()
        # What the aborted attempt made (its DDP reducer's hooks on the parameters, its groups)
        # goes before the next: while the round forms again, not before this rank says it parked
        # (a full collection of torch's objects takes a fifth of a second; with those made before
        # the training frozen, a few milliseconds).
        gc.collect()
        _start_again(*channel.wait_for_resume())
        _carried = "an earlier attempt's training"

