"""--preload: Python workers forked from a warm interpreter are set up as cold ones, start cold
where that is unsafe, and train as they would cold. Real ddprun, real workers, real PyTorch.

    preload_test.py DDPRUN CASE     (CASE: one of the functions named case_*)
"""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from proc_util import free_port, left_running, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another (torch2).
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None
WARM_LINE = "--preload: workers start from a warm interpreter"
COLD_LINE = "--preload: workers start cold"

# What a worker reports of itself: everything a cold start decides, as data.
DUMP = r'''
import json, os, re, signal, sys, __main__
out = os.environ["DUMP_DIR"]
def fds():
    """The open descriptors and what they are, but shared libraries a module import holds open
    (libffi under Python 3.14, for example) and the listing's own."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if ".so" not in os.path.basename(target) and target != "/proc/self/fd":
            out[fd] = re.sub(r"\[[0-9]+\]", "", target)
    return out
state = {
    "env": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": getattr(sys, "orig_argv", None),
    "file": __main__.__dict__.get("__file__"),
    "main_keys": sorted(k for k in vars(__main__) if k.startswith("__")),
    "spec": re.sub("0x[0-9a-f]+", "0x", repr(__main__.__spec__)),
    "loader": type(__main__.__loader__).__name__,
    "name": __name__,
    "path": sys.path,
    "executable": sys.executable,
    "cwd": os.getcwd(),
    "ppid_is_ddprun": os.getppid() == int(os.environ["DDPRUN_PID"]),
    "leads_its_group": os.getpgid(0) == os.getpid(),
    # (Numbers as N whatever their length: the agents' pids in the paths may differ in digits, and
    # an agent whose pid a killed one had is in ddprun.<pid>.<n>.)
    "cgroup": re.sub(r"[0-9]+(\.[0-9]+)*", "N", open("/proc/self/cgroup").read()),
    "signals": {s: repr(signal.getsignal(getattr(signal, s)))
                for s in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGHUP", "SIGUSR1", "SIGCHLD")},
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "write_through": sys.stdout.write_through,
    "fds": fds(),
    "stdin_pipe": os.path.exists("/proc/self/fd/0"),
    "affinity": sorted(os.sched_getaffinity(0)),
    "cmdline": open("/proc/self/cmdline", "rb").read().rstrip(b"\0").decode(),
    "warm": "torch" in sys.modules,
}
with open(os.path.join(out, os.environ["RANK"]), "w") as f:
    json.dump(state, f)
'''
# Differ between any two runs, cold or warm: the store's port, the run id and the run's log folder.
# (and this test's own folder).
PER_RUN = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "DDPRUN_PID", "DUMP_DIR",
           "DDPRUN_CHECKPOINT_DIR", "PYTHONPATH"}


def run(args, env=None, timeout=180):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON_EXEC": PY, **(env or {})})


def dump_states(work, preload, module):
    """Each rank's DUMP state, for 2 workers run as a script or with -m in `work`."""
    out = tempfile.mkdtemp()
    with open(os.path.join(work, "dump_state.py"), "w") as f:
        f.write(DUMP)
    target = ["-m", "dump_state"] if module else ["dump_state.py", "x", "--flag=1"]
    flags = [f"--preload={preload}"] if preload else []
    # ddprun's own pid reaches the workers through a variable every run sets the same way.
    wrapper = ("import os, sys; os.environ['DDPRUN_PID'] = str(os.getpid()); "
               "os.execv(sys.argv[1], sys.argv[1:])")
    r = subprocess.run([sys.executable, "-c", wrapper, DDPRUN, "--standalone", "--nproc_per_node=2",
                        *flags, *target], capture_output=True, text=True, timeout=180, cwd=work,
                       env={**os.environ, "PYTHON_EXEC": PY, "DUMP_DIR": out,
                            "PYTHONPATH": work if module else os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    assert (WARM_LINE in r.stderr) == bool(preload), r.stderr
    states = {}
    for rank in ("0", "1"):
        with open(os.path.join(out, rank)) as f:
            states[rank] = json.load(f)
        for name in PER_RUN:
            states[rank]["env"].pop(name, None)
        # The agent's mark (its name differs from run to run), in a warm worker's too.
        marks = [k for k in states[rank]["env"] if k.startswith("DDPRUN_CONTAINED_")]
        assert len(marks) == 1, marks
        states[rank]["env"].pop(marks[0])
        # The folder of ddprun's own modules is in the run's checkpoint folder: one per run.
        states[rank]["path"] = ["<ddprun modules>" if "/ddprun-checkpoints-" in p and
                                p.endswith("/python") else p for p in states[rank]["path"]]
    return states


def case_environment_and_argv_match_a_cold_start():
    for module in (False, True):
        work = tempfile.mkdtemp()
        cold = dump_states(work, None, module)
        warm = dump_states(work, "auto", module)
        for rank in ("0", "1"):
            c, w = cold[rank], warm[rank]
            assert not c.pop("warm") and w.pop("warm"), "the warm worker did not come from it"
            for key in c:
                if key == "env":
                    changed = {k for k in c["env"].keys() | w["env"].keys()
                               if c["env"].get(k) != w["env"].get(k)}
                    assert not changed, {k: (c["env"].get(k), w["env"].get(k)) for k in changed}
                assert c[key] == w[key], (rank, key, c[key], w[key])
            assert c["ppid_is_ddprun"] and c["leads_its_group"]
        assert cold["0"]["env"]["RANK"] == "0" and cold["1"]["env"]["LOCAL_RANK"] == "1"
    print(f"{len(cold['0']['env'])} variables, argv, sys.orig_argv, /proc/PID/cmdline, __main__, "
          "__file__, sys.path, the cgroup, signals, descriptors and the parent of a warm worker "
          "are a cold one's, as a script and with -m: passed")


RANDOM = r'''
import os, random, sys
import numpy
out, rank, attempt = os.environ["OUT_DIR"], os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(out, f"{attempt}.{rank}"), "w") as f:
    f.write(f"{random.random()!r} {numpy.random.rand()!r} {'torch' in sys.modules}")
if attempt == "0" and rank == "1":
    sys.exit(1)
'''


COLLECT = r'''
import gc, os, sys, time
import torch
out, rank = os.environ["OUT_DIR"], os.environ["RANK"]
frozen = gc.get_freeze_count()
started = time.perf_counter()
gc.collect()
with open(os.path.join(out, rank), "w") as f:
    f.write(f"{frozen} {time.perf_counter() - started} {'torch' in sys.modules}")
'''


def case_a_warm_workers_collections_leave_the_interpreters_objects_alone():
    """A warm worker's garbage collector has the warm interpreter's objects (torch's modules and
    all they hold) frozen: its collections never walk them, so their pages are not copied on
    write. Walked, a first full collection took seconds on a 2-core machine, and a restarted job
    under --hang_timeout=5 was declared hung before its first step. A cold worker has nothing
    frozen. (What is checked is the count frozen; the collections' times are printed.)"""
    work = tempfile.mkdtemp()
    script = os.path.join(work, "collect.py")
    with open(script, "w") as f:
        f.write(COLLECT)
    seen = {}
    for warm in (True, False):
        out = tempfile.mkdtemp()
        r = run(["--standalone", "--nproc_per_node=2", *(["--preload=auto"] if warm else []),
                 script], env={"OUT_DIR": out})
        assert r.returncode == 0, r.stderr
        assert (WARM_LINE in r.stderr) == warm, r.stderr
        for rank in (0, 1):
            frozen, took, imported = open(os.path.join(out, str(rank))).read().split()
            assert imported == "True", imported
            seen[warm, rank] = (int(frozen), float(took))
    for rank in (0, 1):
        assert seen[True, rank][0] > 10000, seen  # torch's objects, and more
        assert seen[False, rank][0] == 0, seen
    print(f"a warm worker has {seen[True, 0][0]} of the warm interpreter's objects frozen, its "
          f"first full collection took {max(seen[True, r][1] for r in (0, 1)):.3f} s; a cold "
          f"one's {max(seen[False, r][1] for r in (0, 1)):.3f} s: passed")


def case_random_state_differs_between_ranks_and_attempts():
    work = tempfile.mkdtemp()
    script = os.path.join(work, "rand.py")
    with open(script, "w") as f:
        f.write(RANDOM)
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--preload=auto", script],
            env={"OUT_DIR": work})
    assert r.returncode == 0, r.stderr
    values = {}
    for path in glob.glob(os.path.join(work, "*.*[0-9]")):
        py_random, np_random, warm = open(path).read().split()
        assert warm == "True", path
        values[os.path.basename(path)] = (py_random, np_random)
    assert sorted(values) == ["0.0", "0.1", "1.0", "1.1"], values
    assert len({v[0] for v in values.values()}) == 4, values
    assert len({v[1] for v in values.values()}) == 4, values
    print("random.random() and numpy's global generator differ between the warm workers of "
          "two ranks and two attempts: passed")


def case_a_job_that_may_have_several_nodes_starts_warm_from_its_first_round():
    """--nnodes=1:2 (so the straggler check times the steps, a per-worker file each): the first
    round's workers come from the interpreter imported at the agent's start, not a new one."""
    work = tempfile.mkdtemp()
    script = os.path.join(work, "rand.py")
    with open(script, "w") as f:
        f.write(RANDOM)
    r = run(["--nnodes=1:2", "--nproc_per_node=2", "--max_restarts=1", "--preload=auto",
             "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{free_port()}",
             "--rdzv_conf=last_call_timeout=0.5", script], env={"OUT_DIR": work})
    assert r.returncode == 0, r.stderr
    assert WARM_LINE in r.stderr and COLD_LINE not in r.stderr, r.stderr
    warm = {os.path.basename(p): open(p).read().split()[2]
            for p in glob.glob(os.path.join(work, "*.*[0-9]"))}
    assert warm == {"0.0": "True", "0.1": "True", "1.0": "True", "1.1": "True"}, warm
    print("a job of 1:2 nodes: its first round and its restart start warm: passed")


def modules_dir(sources):
    work = tempfile.mkdtemp()
    for name, text in sources.items():
        with open(os.path.join(work, name + ".py"), "w") as f:
            f.write(text)
    script = os.path.join(work, "report.py")
    with open(script, "w") as f:
        f.write("import sys\nsys.stdout.write(f\"MARKER {'preload_marker' in sys.modules}\\n\")\n")
    return work, script


def cold_case(preload, extra_modules, reason):
    work, script = modules_dir({"preload_marker": "VALUE = 1\n", **extra_modules})
    r = run(["--standalone", "--nproc_per_node=2", f"--preload={preload}", script],
            env={"PYTHONPATH": work})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("MARKER False") == 2, r.stdout  # both started cold
    lines = [line for line in r.stderr.splitlines() if COLD_LINE in line]
    assert len(lines) == 1, r.stderr  # said once
    assert re.search(reason, lines[0]), lines[0]
    assert WARM_LINE not in r.stderr, r.stderr
    return lines[0].split(COLD_LINE, 1)[1].strip()


def case_an_unsafe_warm_interpreter_is_not_used():
    said = [
        cold_case("preload_marker,ddprun_no_such_module", {},
                  r"preload ddprun_no_such_module failed: No module named"),
        cold_case("preload_marker,broken", {"broken": "raise RuntimeError('broken at import')\n"},
                  r"preload broken failed: RuntimeError: broken at import"),
        cold_case("preload_marker,thread_starter",
                  {"thread_starter": "import threading, time\n"
                                     "threading.Thread(target=time.sleep, args=(600,), "
                                     "daemon=True).start()\n"},
                  r"it runs 2 threads"),
        # Without a GPU torch.cuda.init() fails at import; with one it succeeds and the warm
        # interpreter holds CUDA: cold either way, for its own reason.
        cold_case("preload_marker,cuda_starter",
                  {"cuda_starter": "import torch\ntorch.cuda.init()\n"},
                  r"preload cuda_starter failed|CUDA was initialised|a GPU device"),
    ]
    print("a preload that cannot be imported, one that raises, one that starts a thread and one "
          "that initialises CUDA: every worker starts cold, one line says why (" +
          "; ".join(said) + "): passed")


# A library as numpy's OpenBLAS is: its load starts a thread pool, which it stops before every fork
# (pthread_atfork) and starts again on its next use.
POOL_LIBRARY = r'''
#include <pthread.h>
#include <unistd.h>
static pthread_t worker;
static int running, stop[2];
static void* idle(void* arg) { char c; (void)arg; (void)read(stop[0], &c, 1); return 0; }
static void start(void) { (void)pipe(stop); pthread_create(&worker, 0, idle, 0); running = 1; }
static void stop_before_fork(void) {
  if (!running) return;
  (void)write(stop[1], "x", 1);
  pthread_join(worker, 0);
  close(stop[0]);
  close(stop[1]);
  running = 0;
}
__attribute__((constructor)) static void load(void) { pthread_atfork(stop_before_fork, 0, 0); start(); }
int pool_use(void) { if (!running) start(); return running; }
'''
POOL_WORKER = r'''
import os, sys
warm = "pool_module" in sys.modules
import pool_module
used = pool_module.lib.pool_use()
sys.stdout.write(f"POOL warm={warm} used={used} threads={len(os.listdir('/proc/self/task'))}\n")
'''


def case_a_thread_pool_that_stops_on_fork_keeps_workers_warm():
    work = tempfile.mkdtemp()
    library = os.path.join(work, "libpool.so")
    with open(os.path.join(work, "pool.c"), "w") as f:
        f.write(POOL_LIBRARY)
    subprocess.run(["cc", "-shared", "-fPIC", "-pthread", "-o", library,
                    os.path.join(work, "pool.c")], check=True)
    with open(os.path.join(work, "pool_module.py"), "w") as f:
        f.write(f"import ctypes\nlib = ctypes.CDLL({library!r})\n")
    script = os.path.join(work, "worker.py")
    with open(script, "w") as f:
        f.write(POOL_WORKER)
    r = run(["--standalone", "--nproc_per_node=2", "--preload=pool_module", script],
            env={"PYTHONPATH": work})
    assert r.returncode == 0, r.stderr
    assert WARM_LINE in r.stderr and COLD_LINE not in r.stderr, r.stderr
    # Forked warm, and the library's pool starts again in the worker on its first use.
    assert r.stdout.count("POOL warm=True used=1 threads=2") == 2, r.stdout
    print("a preloaded library whose thread pool stops before a fork (as OpenBLAS's) keeps the "
          "workers warm, and its pool works in them: passed")


KILLER = r'''
import os, signal, sys, time
out, rank, attempt = os.environ["OUT_DIR"], os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(os.path.join(out, f"{attempt}.{rank}"), "w") as f:
    f.write(str("torch" in sys.modules))
def wait_for(done, seconds=30):
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert done()
if attempt == "0" and rank == "0":
    wait_for(lambda: os.path.exists(os.path.join(out, "0.1")))  # every worker started
    # The warm interpreter: a child of the agent (this worker's parent) run as `python -u - 3`.
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            argv = open(f"/proc/{pid}/cmdline").read().split("\0")
        except OSError:
            continue
        if (int(stat.rsplit(")", 1)[1].split()[1]) == os.getppid() and argv[1:4] == ["-u", "-", "3"]
                and int(pid) != os.getpid()):
            os.kill(int(pid), signal.SIGKILL)
            with open(os.path.join(out, "killed"), "w") as f:
                f.write(pid)
            wait_for(lambda: not os.path.exists(f"/proc/{pid}"))  # the agent saw it end
    sys.exit(1)
'''


def case_a_killed_warm_interpreter_is_replaced():
    work = tempfile.mkdtemp()
    script = os.path.join(work, "killer.py")
    with open(script, "w") as f:
        f.write(KILLER)
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--preload=torch", script],
            env={"OUT_DIR": work})
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(work, "killed")), r.stderr
    assert "the warm interpreter exited (signal 9)" in r.stderr, r.stderr
    assert r.stderr.count(WARM_LINE) == 2, r.stderr  # the first, and its replacement
    for name in ("0.0", "0.1", "1.0", "1.1"):
        assert open(os.path.join(work, name)).read() == "True", name
    print("a warm interpreter SIGKILLed during a job is replaced: the restarted workers are warm "
          "again, the job succeeds: passed")


# A preloaded module whose fork hook never returns: the warm interpreter hangs in the fork of the
# first worker (the warm-up itself forks only where threads run, and this module starts none).
HUNG_FORK = r'''
import os, time
def _hang():
    open(os.path.join(os.environ["OUT_DIR"], "forking"), "w").close()
    time.sleep(120)
os.register_at_fork(before=_hang)
'''


def case_a_stop_while_the_warm_interpreter_hangs_in_a_fork_ends_the_job_at_once():
    """The agent waits for a fork's answer on its event loop (not in a blocking poll of up to
    10 s), and the stop ends that wait: SIGTERM to ddprun while the warm interpreter hangs forking
    a worker ends the job within 3 s; no worker starts cold after it; nothing is left running."""
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "hung_fork.py"), "w") as f:
        f.write(HUNG_FORK)
    script = os.path.join(work, "never_runs.py")
    with open(script, "w") as f:
        f.write("open(__file__ + '.ran', 'w').close()\n")
    p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=1", "--preload=hung_fork",
                          script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHON_EXEC": PY, "OUT_DIR": work,
                              "PYTHONPATH": work})
    try:
        wait_for(lambda: os.path.exists(os.path.join(work, "forking")),
                 "the warm interpreter's fork", timeout=120)
        asked = time.monotonic()
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=60)[1]
        took = time.monotonic() - asked
    finally:
        p.kill()
        p.wait()
    assert took < 3, f"ddprun ended {took:.1f} s after SIGTERM\n{err}"
    assert "the workers stopped while the warm interpreter forked one" in err, err
    assert not os.path.exists(script + ".ran"), err  # no cold start after the stop
    assert not left_running(work), left_running(work)  # the warm interpreter too
    print(f"SIGTERM while the warm interpreter hung in a worker's fork: ddprun ended "
          f"{took:.2f} s later, exit {p.returncode}, no worker started, nothing left: passed")


COMPILER = r'''
import importlib.util, json, os, sys, time
out, rank, attempt = os.environ["OUT_DIR"], os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
carried = "torch._inductor.compile_fx" in sys.modules  # before this script imports anything
comm = open("/proc/self/comm").read().strip()
if importlib.util.find_spec("torch._inductor") is None:
    open(os.path.join(out, "no_inductor"), "w").close()
    sys.exit(0)
def warm_interpreter_name():
    """The name (/proc/PID/comm) of the warm interpreter: the agent's child run as `python -u - 3`."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            argv = open(f"/proc/{pid}/cmdline").read().split("\0")
            if (int(stat.rsplit(")", 1)[1].split()[1]) == os.getppid()
                    and argv[1:4] == ["-u", "-", "3"]):
                return open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            continue
    return None
if attempt == "0":  # both ranks wait (one that ended would have the other stopped)
    deadline = time.monotonic() + 120
    while warm_interpreter_name() != "ddprun-warmed" and time.monotonic() < deadline:
        time.sleep(0.05)
    with open(os.path.join(out, "warmed." + rank), "w") as f:
        f.write(str(warm_interpreter_name()))
from torch._inductor.cpu_vec_isa import valid_vec_isa_list
state = {"carried": carried, "probed": valid_vec_isa_list.cache_info().currsize == 1, "comm": comm}
with open(os.path.join(out, f"{attempt}.{rank}.tmp"), "w") as f:
    json.dump(state, f)
os.rename(os.path.join(out, f"{attempt}.{rank}.tmp"), os.path.join(out, f"{attempt}.{rank}"))
if attempt == "0":  # once both wrote theirs (the first to end has the other stopped)
    other = os.path.join(out, f"0.{1 - int(rank)}")
    deadline = time.monotonic() + 60
    while not os.path.exists(other) and time.monotonic() < deadline:
        time.sleep(0.02)
    sys.exit(1)
'''


def case_a_restarted_worker_finds_torch_compiles_per_process_work_done():
    """--preload=auto: once the first workers started, the warm interpreter imports inductor,
    hashes torch's sources and probes the CPU's vector instructions (what torch.compile does once
    per process); a restarted worker has them, and the name a cold worker has."""
    work = tempfile.mkdtemp()
    script = os.path.join(work, "compiler.py")
    with open(script, "w") as f:
        f.write(COMPILER)
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--preload=auto", script],
            env={"OUT_DIR": work})
    assert r.returncode == 0, r.stderr
    if os.path.exists(os.path.join(work, "no_inductor")):
        print("this torch has no inductor: nothing to warm")
        sys.exit(77)
    assert WARM_LINE in r.stderr and COLD_LINE not in r.stderr, r.stderr
    for rank in ("0", "1"):
        assert open(os.path.join(work, "warmed." + rank)).read() == "ddprun-warmed", r.stderr
    states = {name: json.load(open(os.path.join(work, name)))
              for name in ("0.0", "0.1", "1.0", "1.1")}
    for name in ("1.0", "1.1"):
        assert states[name]["carried"] and states[name]["probed"], states
    assert not states["0.0"]["carried"], states  # the first workers started before the warm-up
    assert len({s["comm"] for s in states.values()}) == 1, states
    assert states["1.0"]["comm"] != "ddprun-warmed", states
    print("a restarted worker finds inductor imported and the CPU probed by the warm interpreter, "
          f"under its cold name ({states['1.0']['comm']}): passed")


def case_a_ddp_job_restarts_warm_with_identical_replicas():
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--preload=auto",
             os.path.join(WORKLOADS, "ddp_restart.py")], env={"OUT_DIR": out})
    assert r.returncode == 0, r.stderr
    assert WARM_LINE in r.stderr and COLD_LINE not in r.stderr, r.stderr
    assert os.path.exists(os.path.join(out, "failed")), r.stderr
    for rank in ("0", "1"):
        assert open(os.path.join(out, f"identical.1.{rank}")).read() == "True", rank
    failed = float(open(os.path.join(out, "failed")).read())
    first = max(float(open(p).read()) for p in glob.glob(os.path.join(out, "first_step.1.*")))
    print(f"DDP (gloo) restarted warm after rank 1 failed: first step {1000 * (first - failed):.0f} ms "
          "after the failure, replicas bit-identical: passed")


def case_an_environment_that_is_not_utf8_starts_the_workers_cold_with_its_bytes():
    # A variable's value is bytes to the kernel (and to torchrun, which runs such a job); the warm
    # interpreter is given its environment as JSON text: the workers start cold, said once.
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "env_bytes.py"), "w") as f:
        f.write("import os\nopen(os.path.join(os.environ['OUT'], os.environ['RANK']), 'wb')"
                ".write(os.environb[b'NOT_UTF8'])\n")
    env = {**os.environb, b"PYTHON_EXEC": PY.encode(), b"OUT": work.encode(),
           b"NOT_UTF8": b"caf\xe9 \xff"}
    r = subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=2", "--preload=auto",
                        os.path.join(work, "env_bytes.py")], capture_output=True, timeout=180,
                       env=env)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert err.count(COLD_LINE) == 1 and '"NOT_UTF8" is not UTF-8 text' in err, err
    for rank in ("0", "1"):
        with open(os.path.join(work, rank), "rb") as f:
            assert f.read() == b"caf\xe9 \xff"
    assert not left_running(work)
    print("a variable that is not UTF-8 under --preload: the workers start cold (one warning "
          "naming it) and get its bytes: passed")


def case_no_python_ignores_preload_and_bad_names_are_usage_errors():
    r = run(["--standalone", "--nproc_per_node=1", "--preload=auto", "--no_python", "/bin/true"])
    assert r.returncode == 0, r.stderr
    assert "--preload is ignored with --no_python" in r.stderr, r.stderr
    for bad in ("1torch", "torch,,numpy", "torch.", "a-b"):
        r = run(["--standalone", "--preload=" + bad, "x.py"])
        assert r.returncode == 2 and "argument --preload" in r.stderr, (bad, r.stderr)
    r = run(["--standalone", "--nproc_per_node=1", "/dev/null"], env={"PET_PRELOAD": "1bad"})
    assert r.returncode == 2 and "argument --preload" in r.stderr, r.stderr
    print("--no_python warns that it ignores --preload; malformed module names, also through "
          "PET_PRELOAD, are usage errors (exit 2): passed")


if __name__ == "__main__":
    DDPRUN = os.path.abspath(sys.argv[1])
    globals()["case_" + sys.argv[2]]()
