# ddprun's warm interpreter (--preload): run by the agent as `python -u - FD MAIN_DIR PAD MODULE...`
# with this source on stdin and a SOCK_SEQPACKET socket to the agent at FD; MAIN_DIR is sys.path[0]
# for the imports, PAD room for a worker's command line. It imports the preloaded modules once, then
# forks every worker the agent asks for. Each worker is set up as a cold `python -u script args`
# would be and then runs the script (or the module, for -m).
#
# Messages, one per packet. Agent to here: first the environment the agent started this
# interpreter with (JSON object), then one request per worker: JSON {"args": the worker's argv
# after the interpreter and its options, "env": its environment, "cpus": [..],
# "agent": pid, "cgroup": bool} with four descriptors attached (stdin, stdout, stderr, and its
# cgroup's cgroup.procs, or a /dev/null stand-in where "cgroup" is false), each batch of them
# after a ping, {"ping": true} with no descriptors. Here to the agent: "ready MODULES" once the
# imports are done (those imported, comma-separated), or "cold REASON" (then this process exits);
# per ping "pong" (at once, or once a step of the warm-up below ends); per request "pid N" (the
# worker, already a child of the agent: it was started by a child of this process that exited at
# once), or "cold REASON".
# What the interpreter put in __main__ before this program ran: a worker's fresh __main__ gets the
# same (for example __annotations__, which some Python versions add).
_MAIN_AT_START = {name: value for name, value in globals().items() if name.startswith("__")}
import atexit  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import select  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402

_worker = None  # this process's pid once it is a worker forked from here


def _say_the_program_ended():
    """At a worker's exit, once every other exit handler has run (this one is registered before
    anything is imported, so it runs last: after the script's own and those of the modules it
    imported or found imported, multiprocessing's joins and logging's flush among them): sets the
    top bit of its heartbeat file's counter, so that for --hang_timeout what is left is the
    interpreter's teardown, not the job. That teardown writes to most of the heap the worker
    shares with this interpreter, a copy of each page: about 1 s for torch 2.14 on a quiet 2-core
    machine and about 10 s under load, where a fixed timeout called a worker that had finished
    hung. Nothing in this interpreter, nor in a process a worker forks (which inherits the
    handler)."""
    if os.getpid() != _worker:
        return
    beats = sys.modules.get("ddprun.heartbeat")
    end = getattr(beats, "_end", None)
    if end is not None and end():  # through its mapping: a beat after it keeps the bit
        return
    path = os.environ.get("DDPRUN_HEARTBEAT_FILE")
    if not path:
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        counter = int.from_bytes(os.pread(fd, 8, 0).ljust(8, b"\0"), "little")
        os.pwrite(fd, (counter | 1 << 63).to_bytes(8, "little"), 0)
    except OSError:
        pass
    finally:
        os.close(fd)


atexit.register(_say_the_program_ended)

_AUTO = ["torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
         "torch.distributed.algorithms.join", "numpy"]
_PR_SET_PDEATHSIG = 1
# Seconds without a request before the interpreter takes the next step of its warm-up, and
# seconds after the agent's ping (workers are about to start) before it takes one.
_IDLE_BEFORE_WARMING = 0.3
_QUIET_AFTER_PING = 2.0


def _import_inductor():
    __import__("torch._inductor.compile_fx")


def _hash_torch_sources():
    from torch._inductor.codecache import torch_key
    torch_key()


def _probe_vector_isa():
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list
    valid_vec_isa_list()


# What torch.compile does once in every process, and a fork carries (--preload=auto, torch with
# inductor): its modules (0.9 s), the hash of torch's sources its caches are keyed by (0.3 s), and
# the probe of the CPU's vector instructions, which compiles small programs with the C++ compiler
# (0.8 s; torch 2.14 on this 2-core machine). A replaced rank of a compiled model paid all of it
# again before its first step. Taken step by step once the first worker started, while no request
# waits; a step that fails ends the warm-up (the worker then does it itself, as a cold one would).
_AUTO_WARM_UP = [_import_inductor, _hash_torch_sources, _probe_vector_isa]
# This process's name (/proc/PID/comm, what top shows) once the whole warm-up was done; a worker
# takes back the name the interpreter started with.
_WARMED_NAME = "ddprun-warmed"


def _own_name():
    try:
        with open("/proc/self/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def _set_own_name(name):
    try:
        with open("/proc/self/comm", "w") as f:
            f.write(name)
    except OSError:
        pass


_NAME_AT_START = _own_name()
_renamed = False  # this interpreter took _WARMED_NAME (a worker forked since takes its own back)
# The interpreter and its options as the kernel started it (behind any wrapper the agent ran):
# what a cold start's sys.orig_argv begins with.
_INTERPRETER_ARGV = sys.orig_argv[:len(sys.orig_argv) - len(sys.argv)] \
    if hasattr(sys, "orig_argv") else []


def _send(sock, text):
    sock.send(text.encode())


def _thread_count():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _cuda_in_use():
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return "CUDA was initialised"
    except Exception:
        pass
    try:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink("/proc/self/fd/" + fd)
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                return "a GPU device (" + target + ") is open"
    except OSError:
        pass
    return None


def _let_pools_stop():
    """A library that starts a thread pool at import and stops it before every fork (numpy's
    OpenBLAS does, through pthread_atfork, and starts it again on its next use, which never comes
    in this interpreter) leaves one thread once a fork has happened. One fork whose child ends at
    once lets such pools stop; threads that do not stop still make forking unsafe."""
    if _thread_count() == 1:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ on forking with threads
        pid = os.fork()
        if pid == 0:
            os._exit(0)
    os.waitpid(pid, 0)


def _unsafe():
    """Why forking now would not give a cold start's process, or None."""
    threads = _thread_count()
    if threads != 1:
        return "it runs %d threads (a fork keeps only one)" % threads
    return _cuda_in_use()


def _preload(spec, imported):
    automatic = spec == ["auto"]
    for name in _AUTO if automatic else spec:
        try:
            __import__(name)
        except ImportError as e:
            if automatic:
                continue  # this torch has no such module; auto takes what exists
            return "preload %s failed: %s" % (name, e)
        except BaseException as e:  # a module's own error at import
            last = traceback.format_exception_only(type(e), e)[-1].strip()
            return "preload %s failed: %s" % (name, last)
        imported.append(name)
    return None


def _libc_prctl(option, value):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
               ctypes.c_ulong(0))


def _set_command_line(argv):
    """What /proc/self/cmdline (ps, pgrep -f, py-spy) shows: `argv`, written over this process's
    own argument area, which the agent padded for it; cut short where it does not fit."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    data = b"\0".join(os.fsencode(a) for a in argv)[:size - 1]
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)


def _reseed():
    # `random` is reseeded by its own fork hook; numpy's global generator is not.
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        try:
            numpy.random.seed()
        except Exception:
            pass


def _worker_environment(request_env, given_env, own_env):
    """The worker's environment as a wrapper between the agent and python would have made it:
    what the wrapper changed in ours (given by the agent, then own at start), changed in its."""
    env = dict(request_env)
    for name, value in own_env.items():
        if given_env.get(name) != value:
            env[name] = value
    for name in given_env:
        if name not in own_env:
            env.pop(name, None)
    return env


def _run_script(args):
    path = args[0]
    sys.argv = list(args)
    file = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write("%s: can't open file %r: [Errno %d] %s\n"
                         % (sys.orig_argv[0], file, e.errno, e.strerror))
        sys.exit(2)
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    import importlib.machinery
    import types
    main = types.ModuleType("__main__")
    if "__annotations__" in _MAIN_AT_START:
        main.__annotations__ = {}
    main.__file__ = file
    main.__cached__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", file)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    code = compile(source, file, "exec")
    try:
        exec(code, main.__dict__)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as e:
        # As the interpreter reports it: from the script's frame on.
        e.__traceback__ = e.__traceback__.tb_next if e.__traceback__ is not None else None
        sys.excepthook(type(e), e, e.__traceback__)
        sys.exit(1)


def _run_module(args):
    import runpy
    sys.argv = ["-m"] + list(args[1:])
    sys.path[0] = os.getcwd()
    runpy._run_module_as_main(args[0], alter_argv=True)


def _become_worker(request, fds, release):
    global _worker
    _worker = os.getpid()
    own = set(fds)
    os.setpgid(0, 0)
    if _renamed:
        _set_own_name(_NAME_AT_START)
    if request["cgroup"]:
        os.write(fds[3], b"0")
    if os.read(release, 1) != b"x":  # the warm interpreter died before the worker was adopted
        os._exit(1)
    os.close(release)
    _libc_prctl(_PR_SET_PDEATHSIG, 9)
    if os.getppid() != request["agent"]:
        os._exit(1)  # the agent died before the line above took effect
    if request["cpus"]:
        try:
            os.sched_setaffinity(0, request["cpus"])
        except OSError as e:
            os.write(fds[2], ("cannot bind to CPUs %s: %s\n" % (request["cpus"], e.strerror))
                     .encode())
            os._exit(127)
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in own:
        if fd > 2:
            os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    _reseed()
    if not sys.stdout.write_through:  # started without -u: line buffered on a terminal only
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
    args = request["args"]
    if hasattr(sys, "orig_argv"):
        sys.orig_argv = _INTERPRETER_ARGV + list(args)
        _set_command_line(sys.orig_argv)
    if args[0] == "-m":
        _run_module(args[1:])
    else:
        _run_script(args)


def _freeze_what_is_here():
    """Collects this interpreter's garbage and moves what it holds to the collector's permanent
    generation (gc.freeze), so that a worker forked from it never walks those objects in its
    collections. Walked, every page holding one is copied on write in the worker: a warm worker's
    first full collection took 0.53-0.68 s under torch 1.13 and 2.0-2.2 s under 2.14 on a slower
    2-core machine (0.002 s frozen), and both ranks of a restarted job doing so at once were
    declared hung under --hang_timeout=5. Only what came since the last call is walked here: after
    the first, milliseconds."""
    gc.collect()
    gc.freeze()


def _warm_up_while_idle(sock, steps, idle):
    """Takes `steps`' next step when no request came for `idle` seconds; False while one waits.
    A request that comes during a step waits for it (the longest, inductor's import: 0.9 s here)."""
    global _renamed
    if select.select([sock], [], [], idle)[0]:
        return False
    step = steps.pop(0)
    try:
        step()
        _let_pools_stop()
    except Exception:  # whatever torch raised: the worker does it itself
        del steps[:]
        return True
    finally:
        _freeze_what_is_here()  # while idle, not at the next start
    if _unsafe() is not None:
        del steps[:]  # no further step; the next request is answered cold, with the reason
    elif not steps and _NAME_AT_START is not None:
        _set_own_name(_WARMED_NAME)
        _renamed = True
    return True


def _serve(sock, given_env, own_env, warm_up):
    served, pinged = False, 0.0
    while True:
        idle = max(_IDLE_BEFORE_WARMING, pinged + _QUIET_AFTER_PING - time.monotonic())
        if served and warm_up and _warm_up_while_idle(sock, warm_up, idle):
            continue
        try:
            message, ancillary, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 4))
        except InterruptedError:
            continue
        if not message:
            return  # the agent is gone
        fds = []
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(memoryview(data).cast("i"))
        request = json.loads(message)
        if not fds and request.get("ping"):
            _send(sock, "pong")  # starts follow: no warm-up step while they come
            pinged = time.monotonic()
            continue
        problem = _unsafe()
        if problem is not None:
            _send(sock, "cold " + problem)
            return
        request["env"] = _worker_environment(request["env"], given_env, own_env)
        release_read, release_write = os.pipe()
        pid_read, pid_write = os.pipe()
        _freeze_what_is_here()
        middle = os.fork()
        if middle == 0:
            worker = -1
            try:
                sock.close()
                os.close(release_write)
                os.close(pid_read)
                worker = os.fork()
            finally:
                if worker != 0:  # this process: report the worker, and end
                    if worker > 0:
                        os.write(pid_write, str(worker).encode())
                    os._exit(0)
            os.close(pid_write)
            _become_worker(request, fds, release_read)
            return  # the script ended: the interpreter exits as after `python script.py`
        os.close(release_read)
        os.close(pid_write)
        for fd in fds:
            os.close(fd)
        worker = os.read(pid_read, 32)
        os.close(pid_read)
        os.waitpid(middle, 0)  # the worker is the agent's child (its subreaper) from here on
        # Its pid goes to the agent before it runs: the agent, should it stop waiting for this
        # answer, still reads it first, and a worker it never hears of never runs.
        _send(sock, "pid " + worker.decode() if worker else "cold a fork failed")
        os.write(release_write, b"x")
        os.close(release_write)
        served = True


def main():
    sock = socket.socket(fileno=int(sys.argv[1]))
    given_env = json.loads(sock.recv(1 << 20))
    own_env = dict(os.environ)
    main_dir, modules = sys.argv[2], sys.argv[4:]  # (argv[3] is room for a worker's argv)
    sys.path[0] = main_dir
    imported = []
    problem = _preload(modules, imported)
    if problem is None:
        _let_pools_stop()
        problem = _unsafe()
    if problem is None:
        _freeze_what_is_here()
    if problem is not None:
        _send(sock, "cold " + problem)
        return
    _send(sock, "ready " + ",".join(imported))
    # Not where a GPU is: whether the warm-up leaves a CUDA device open (no fork then) is unmeasured.
    gpu = any(os.path.exists(d) for d in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd"))
    automatic = modules == ["auto"] and "torch._dynamo" in imported and not gpu
    _serve(sock, given_env, own_env, list(_AUTO_WARM_UP) if automatic else [])


main()
