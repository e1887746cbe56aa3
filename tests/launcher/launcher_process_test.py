"""ddprun as a user runs it: real worker processes, real signals, real PyTorch (Debian's torch 1.13).

    launcher_process_test.py DDPRUN CASE     (CASE: one of the functions named case_*)
"""
import errno
import glob
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from proc_util import alive, free_port, left_running, left_where, running_where, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
EXAMPLES = os.path.join(HERE, "..", "..", "examples")
TORCH1_LAUNCHER = os.path.join(HERE, "..", "..", "scripts", "torch1", "torchrun")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another, such as
# scripts/torch2/python (torch 2.6) for the tests labelled torch2.
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None


def run(args, timeout=120, env=None, **kw):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON_EXEC": PY, **(env or {})}, **kw)


# --- environment parity -----------------------------------------------------------------------

DUMP_ENV = ("import os,json,sys; "
            "json.dump(dict(os.environ), open(os.path.join(sys.argv[1], os.environ['RANK']), 'w'))")
# Where ddprun follows the newest torchrun (2.11 was compared on a GPU machine) and older ones
# differ: names that older torchruns do not set yet (TORCHELASTIC_SIGNALS_TO_HANDLE came after
# 2.6, TORCH_NCCL_ASYNC_ERROR_HANDLING after 1.13), and 1.13's NCCL_ASYNC_ERROR_HANDLING, which 2.x's
# no longer sets.
DDPRUN_EXTRAS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE",
                 "DDPRUN_CHECKPOINT_DIR", "DDPRUN_CHECKPOINT_MEMORY_LIMIT",
                 "DDPRUN_CHECKPOINT_SLOT", "DDPRUN_CHECKPOINT_SLOTS", "DDPRUN_STEP_TIMES_FILE"}
# The agent's own mark, a name unique to it (DDPRUN_CONTAINED_<hex>=<its pid>), by which its guardian
# finds what the workers left behind.
DDPRUN_MARK = "DDPRUN_CONTAINED_"
TORCH1_ONLY = {"NCCL_ASYNC_ERROR_HANDLING"}
# Set by the bash wrappers that start a reference torchrun (scripts/torch2/python), not by torchrun.
SHELL_ARTIFACTS = {"PWD", "OLDPWD", "SHLVL", "_"}


def worker_envs(launcher, nproc):
    out = tempfile.mkdtemp()
    cmd = [*launcher, "--no_python", PY, "-c", DUMP_ENV, out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ})
    assert r.returncode == 0, (cmd, r.stderr)
    envs = {}
    for rank in range(nproc):
        with open(os.path.join(out, str(rank))) as f:
            envs[rank] = json.load(f)
    return envs


def torch_version():
    return subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def reference_torchrun():
    """torchrun of the workers' torch: 2.x's own, or Debian's 1.13 through scripts/torch1/torchrun."""
    version = torch_version()
    if version.startswith("1."):
        return [TORCH1_LAUNCHER], version
    return [PY, "-m", "torch.distributed.run"], version


def port_flags(flags):
    if "--standalone" in flags:
        return []
    if "--rdzv_backend=c10d" in flags:
        return [f"--rdzv_endpoint=127.0.0.1:{free_port()}"]
    return [f"--master_port={free_port()}"]


def compare_envs(ref, ours, differs, torch1, what):
    for rank in ref:
        t, d = ref[rank], ours[rank]
        for key in set(t) | set(d):
            if key in differs or key in SHELL_ARTIFACTS or key == "MASTER_PORT":
                continue
            if ((key in DDPRUN_EXTRAS or key.startswith(DDPRUN_MARK)) and key not in t) or (
                    torch1 and key in TORCH1_ONLY and key not in d):
                continue
            if key == "PYTHONPATH":
                # ddprun appends the folder of its own modules (ddprun.checkpoint) for a Python
                # worker; the rest is the launcher's PYTHONPATH, as torchrun passes it on.
                theirs, own = t.get(key), d.get(key, "")
                if own.endswith("/python"):
                    own = own.rsplit(":", 1)[0] if ":" in own else None
                assert theirs == own, (what, rank, key, theirs, d.get(key))
                continue
            if key == "TORCHELASTIC_ERROR_FILE":
                # Paths differ by temp folder; the layout must not.
                assert t[key].split("/")[-3:] == d[key].split("/")[-3:], (t[key], d[key])
                assert os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(
                    d[key])))).startswith(d["TORCHELASTIC_RUN_ID"] + "_"), d[key]
                continue
            assert t.get(key) == d.get(key), (what, rank, key, t.get(key), d.get(key))
        assert d["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


# torch 2.14 on one node without a store port: c10d on a free port with a fresh run id, as ddprun.
IMPLICIT_C10D = {"MASTER_ADDR", "TORCHELASTIC_RUN_ID"}


def case_env_parity():
    torchrun, version = reference_torchrun()
    torch1 = version.startswith("1.")
    agent_store = {"TORCHELASTIC_USE_AGENT_STORE"} if torch1 else set()
    flag_sets = [
        (["--nproc_per_node=2"], 2, set()),
        (["--nproc_per_node=3", "--role=trainer", "--max_restarts=2", "--rdzv_id=job7"], 3, set()),
        (["--nproc_per_node=1", "--master_addr=localhost"], 1, set()),
        # A random run id each (torchrun's is a UUID). torch 1.13 gave c10d workers their own store
        # on a port it probed; ddprun shares the agent's store, as torch 2.x does, and names its host
        # by IP where 2.x gives the machine's FQDN.
        (["--standalone", "--nproc_per_node=2"], 2, {"MASTER_ADDR", "TORCHELASTIC_RUN_ID"} |
         agent_store),
        (["--nnodes=1:2", "--rdzv_backend=c10d", "--rdzv_id=job8", "--nproc_per_node=2",
          "--rdzv_conf=last_call_timeout=1"], 2, {"MASTER_ADDR"} | agent_store),
    ]
    if not torch1:  # what torch 2.14 added, with every flag of it that runs without a GPU
        flag_sets += [
            (["--nproc-per-node=2", "--virtual-local-rank", "--signals-to-handle=SIGTERM,SIGUSR1",
              "--shutdown-timeout=5"], 2, set()),
            (["--nproc-per-node=2", "--tee=3", "--local-ranks-filter=1",
              "--log-line-prefix-template=${hostname}:${rank}|", "--duplicate-stdout-filters=a,,b",
              "--duplicate-stderr-filters=c", "--event-log-handler=console",
              "--start-method=fork", "--monitor-interval=0.2", "--run-path"], 2, set()),
            (["--nproc-per-node=2", "--event-log-handler=dynamic_rendezvous"], 2, set()),
            (["--nproc-per-node=2", "--rdzv-id=ignored"], 2, IMPLICIT_C10D),
        ]
    for flags, nproc, differs in flag_sets:
        def ports():
            return [] if differs is IMPLICIT_C10D else port_flags(flags)
        ref_flags = flags if "--monitor-interval=0.2" in flags else ["--monitor_interval=0.1", *flags]
        envs = run_path_envs if "--run-path" in flags else worker_envs
        ref = envs([*torchrun, *ref_flags, *ports()], nproc)
        ours = envs([DDPRUN, *flags, *ports()], nproc)
        compare_envs(ref, ours, differs, torch1, flags)
    print(f"env parity with torchrun (torch {version}) for", len(flag_sets), "flag sets: passed")


def run_path_envs(launcher, nproc):
    """--run-path: the script by path (torchrun runs it in its own interpreter with runpy)."""
    out = tempfile.mkdtemp()
    script = os.path.join(out, "dump_env.py")
    with open(script, "w") as f:
        f.write("import os, json, sys\n"
                "json.dump(dict(os.environ), open(os.path.join(sys.argv[1], os.environ['RANK']), 'w'))\n")
    r = subprocess.run([*launcher, script, out], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON_EXEC": PY})
    assert r.returncode == 0, (launcher, r.stderr)
    return {rank: json.load(open(os.path.join(out, str(rank)))) for rank in range(nproc)}


def console_and_filtered(launcher, logs, prog):
    r = subprocess.run([*launcher, "--nproc-per-node=2", "--tee=3", "--local-ranks-filter=0,1",
                        f"--log-dir={logs}", "--duplicate-stdout-filters=loss,,x,step",
                        "--duplicate-stderr-filters=warn", "--role=tr",
                        "--log-line-prefix-template=${role_name}-${rank}-$local_rank-${hostname}|",
                        "--no-python", PY, "-c", prog],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON_EXEC": PY})
    assert r.returncode == 0, (launcher, r.stderr)
    (attempt,) = glob.glob(f"{logs}/*/attempt_0")
    files = {name: sorted(open(os.path.join(attempt, name)).read().splitlines())
             for name in ("filtered_stdout.log", "filtered_stderr.log")}
    stdout = sorted(line for line in r.stdout.splitlines() if "|" in line)
    return files, stdout


def case_tee_prefix_and_duplicate_filters_match_torchrun():
    if torch_version().startswith("1."):
        print("torch 1.13 has no duplicate filters or prefix template flag: skipped")
        sys.exit(77)
    torchrun, version = reference_torchrun()
    prog = ("import os, sys\n"
            "r = os.environ['RANK']\n"
            "print('step 1 loss,x 0.5 from', r); print('no match', r); print('loss,y', r)\n"
            "print('warn: disk', r, file=sys.stderr); print('plain', r, file=sys.stderr)\n")
    theirs = console_and_filtered(torchrun, tempfile.mkdtemp(), prog)
    ours = console_and_filtered([DDPRUN], tempfile.mkdtemp(), prog)
    assert ours[0] == theirs[0], (ours, theirs)  # the filtered files
    assert len(ours[0]["filtered_stdout.log"]) == 2 and len(ours[0]["filtered_stderr.log"]) == 2
    # The console: each rank's lines whole, under its prefix (the files' prefixes, as torchrun's).
    prefix = {line.rsplit(" ", 1)[1]: line.split("|", 1)[0] + "|"
              for line in ours[0]["filtered_stdout.log"]}
    expected = sorted(f"{prefix[r]}{text} {r}" for r in ("0", "1")
                      for text in ("step 1 loss,x 0.5 from", "no match", "loss,y"))
    assert ours[1] == expected, (ours, expected)
    # torch 2.14's torchrun writes its ranks' lines from threads of its own, and a line of one
    # rank sometimes lands inside another's ("...from 0tr-1-1-vm|step 1..."): where its console
    # came out whole, it is ours.
    if all(line.count("|") == 1 and not line.endswith("|") for line in theirs[1]):
        assert ours[1] == theirs[1], (ours, theirs)
    print(f"tee prefixes and duplicate filters identical to torchrun {version}'s: passed")


def launch_run(launcher, flags, script_args):
    out = tempfile.mkdtemp()
    script = os.path.join(out, "probe.py")
    with open(script, "w") as f:
        f.write("import os, json, sys\n"
                "json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)},\n"
                "          open(os.path.join(sys.argv[-1], os.environ['LOCAL_RANK']), 'w'))\n")
    r = subprocess.run([*launcher, *flags, f"--master_port={free_port()}", script, *script_args,
                        out], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHON_EXEC": PY})
    assert r.returncode == 0, (launcher, r.stderr)
    return {rank: json.load(open(os.path.join(out, str(rank)))) for rank in range(2)}, r


def case_launch_matches_torch_distributed_launch():
    version = torch_version()
    torch1 = version.startswith("1.")
    reference = [TORCH1_LAUNCHER, "--launch"] if torch1 else [PY, "-m", "torch.distributed.launch"]
    ours = [DDPRUN, "launch"] + (["--legacy_local_rank"] if torch1 else [])
    spelling = "--local_rank" if torch1 else "--local-rank"
    flag_sets = [["--nproc_per_node=2", "--nnodes=1", "--node_rank=0", "--master_addr=localhost"],
                 ["--nproc_per_node=2", "--use_env"]]
    if not torch1:  # 1.13 knows the underscore spellings only
        flag_sets.append(["--nproc-per-node=2", "--use-env"])
    for flags in flag_sets:
        ref, _ = launch_run(reference, flags, ["--lr", "0.1"])
        got, r = launch_run(ours, flags, ["--lr", "0.1"])
        for rank in range(2):  # the last argument is each run's own output folder
            assert got[rank]["argv"][:-1] == ref[rank]["argv"][:-1], (flags, got[rank], ref[rank])
            if not any(f.startswith("--use") for f in flags):
                assert got[rank]["argv"][0] == f"{spelling}={rank}", got[rank]["argv"]
        compare_envs({k: v["env"] for k, v in ref.items()}, {k: v["env"] for k, v in got.items()},
                     set(), torch1, flags)
        assert "deprecated" in r.stderr, r.stderr
    r = subprocess.run([DDPRUN, "launch", "--no-python", "true"], capture_output=True, text=True)
    assert r.returncode == 1 and "--use-env" in r.stderr, r.stderr  # torch: a ValueError
    print(f"ddprun launch gives every rank torch.distributed.launch's arguments and environment "
          f"(torch {version}): passed")


def case_numa_binding_without_a_gpu_fails_clearly():
    if glob.glob("/dev/nvidia[0-9]*"):
        print("this machine has a GPU: skipped (scripts/gpu-test.sh binds for real)")
        sys.exit(77)
    args = ["--numa-binding=node", "--nproc-per-node=1", "--no-python", "true"]
    r = subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert "--numa-binding=node: No accelerator available for NUMA binding" in r.stderr, r.stderr
    if not torch_version().startswith("1."):
        torchrun, _ = reference_torchrun()
        t = subprocess.run([*torchrun, *args], capture_output=True, text=True, timeout=120)
        assert t.returncode != 0 and "No accelerator available for NUMA binding" in t.stderr
    print("--numa-binding without an accelerator fails at launch with torch's reason: passed")


def case_print_completion_completes_ddprun():
    bash = subprocess.run(
        ["bash", "-c", 'source <("$0" --print-completion bash)\n'
         'COMP_WORDS=(ddprun --nproc); COMP_CWORD=1; _ddprun; echo "${COMPREPLY[@]}"\n'
         'COMP_WORDS=(ddprun --numa-binding c); COMP_CWORD=2; _ddprun; echo "${COMPREPLY[@]}"\n'
         'complete -p ddprun', DDPRUN], capture_output=True, text=True, check=True)
    lines = bash.stdout.splitlines()
    assert lines[0].split() == ["--nproc-per-node", "--nproc_per_node"], lines  # torch's order
    assert lines[1] == "core-complex", lines
    assert "-F _ddprun ddprun" in lines[2], lines
    script = tempfile.mktemp()
    with open(script, "w") as f:
        f.write(subprocess.run([DDPRUN, "--print-completion", "zsh"], capture_output=True,
                               text=True, check=True).stdout)
    zsh = subprocess.run(["zsh", "-n", script], capture_output=True, text=True)
    assert zsh.returncode == 0, zsh.stderr
    with open(script, "w") as f:
        f.write(subprocess.run([DDPRUN, "--print-completion", "tcsh"], capture_output=True,
                               text=True, check=True).stdout)
    tcsh = subprocess.run(["tcsh", "-f", "-c", f"source {script}; complete ddprun"],
                          capture_output=True, text=True)
    assert tcsh.returncode == 0 and "nproc_per_node" in tcsh.stdout, (tcsh.stdout, tcsh.stderr)
    print("--print-completion: bash completes options and values, zsh parses, tcsh loads: passed")


# --- real PyTorch training ---------------------------------------------------------------------

def check_training(args, env=None):
    result = tempfile.mktemp(suffix=".json")
    r = run(["--standalone", "--nproc_per_node=2", *args], env={"RESULT_FILE": result, **(env or {})})
    assert r.returncode == 0, r.stderr
    with open(result) as f:
        res = json.load(f)
    assert res["world"] == 2
    assert res["identical"], "replicas diverged"
    assert res["losses"][-1] < 0.5 * res["losses"][0], res["losses"][::10]
    return res


def case_ddp_training():
    script = os.path.join(EXAMPLES, "ddp_train.py")
    res = check_training([script])
    check_training(["-m", "ddp_train"], env={"PYTHONPATH": EXAMPLES})
    check_training(["--no_python", PY, script])
    print(f"DDP (gloo) under ddprun: loss {res['losses'][0]:.3f} -> {res['losses'][-1]:.4f}, "
          "replicas bit-identical; script, -m and --no_python: passed")


# --- failures, restarts, signals ----------------------------------------------------------------

def case_restart_rescues_one_failure():
    logs = tempfile.mkdtemp()
    fail_once = "import os,sys; sys.exit(3 if os.environ['TORCHELASTIC_RESTART_COUNT']=='0' and os.environ['RANK']=='1' else 0)"
    r = run(["--nproc_per_node=2", "--standalone", "--max_restarts=1", f"--log_dir={logs}",
             "--no_python", PY, "-c", fail_once])
    assert r.returncode == 0, r.stderr
    attempts = sorted(os.path.basename(p) for p in glob.glob(f"{logs}/*/attempt_*"))
    assert attempts == ["attempt_0", "attempt_1"], attempts
    assert "restarting the workers (restart 1 of at most 1)" in r.stderr, r.stderr
    r = run(["--nproc_per_node=2", "--standalone", "--no_python", PY, "-c", fail_once])
    assert r.returncode == 1, r.returncode
    print("a failed worker is restarted with --max_restarts 1, and fails the job without: passed")


def case_failure_summary_reads_error_file():
    r = run(["--nproc_per_node=2", "--standalone", "--shutdown_timeout=5",
             os.path.join(WORKLOADS, "record_failure.py")])
    assert r.returncode == 1, (r.returncode, r.stderr)
    err = r.stderr
    root = err.index("Root Cause (first observed failure):")
    assert "record_failure.py" in err and "FAILED" in err, err
    assert "rank      : 1 (local_rank: 1)" in err[root:], err
    assert "exitcode  : 1" in err[root:], err
    assert "ValueError: learning rate must be positive, got -1" in err[root:], err
    assert "/attempt_0/1/error.json" in err[root:], err
    assert "cannot import" not in err, err  # the interpreter had everything the script imports
    print("failure summary names rank, exit code and the @record error message: passed")


def case_a_relative_log_dir_reaches_a_worker_that_changes_folder():
    # Hydra runs the job in a folder of its own: the error file torch's @record writes must still
    # land under --log_dir, which was given relative to where ddprun started.
    start = tempfile.mkdtemp()
    moved = tempfile.mkdtemp()
    script = os.path.join(start, "hydra_like.py")
    with open(script, "w") as f:
        f.write("import os\n"
                "from torch.distributed.elastic.multiprocessing.errors import record\n"
                "@record\n"
                "def main():\n"
                f"    os.chdir({moved!r})\n"
                "    raise ValueError('bad batch shape')\n"
                "main()\n")
    r = run(["--nproc_per_node=1", f"--master_port={free_port()}", "--log_dir=logs", script],
            cwd=start)
    assert r.returncode == 1, (r.returncode, r.stderr)
    (error_file,) = glob.glob(os.path.join(start, "logs", "*", "attempt_0", "0", "error.json"))
    assert "bad batch shape" in open(error_file).read()
    assert "ValueError: bad batch shape" in r.stderr, r.stderr
    assert f"error_file: {error_file}" in r.stderr, r.stderr
    assert not os.listdir(moved), os.listdir(moved)
    print("a relative --log_dir gives absolute error files: the summary reads one written after "
          "a chdir: passed")


def case_an_interpreter_without_the_scripts_imports_is_named_once():
    # The first python3 on PATH is one without torch (no site-packages), as a pyenv shim or a
    # bare virtual environment would be.
    bare = tempfile.mkdtemp()
    with open(f"{bare}/python3", "w") as f:
        f.write(f'#!/bin/sh\nexec {PY} -S "$@"\n')
    os.chmod(f"{bare}/python3", 0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_EXEC"}
    env["PATH"] = f"{bare}:/usr/bin:/bin"
    r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--standalone",
                        os.path.join(EXAMPLES, "ddp_train.py")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "No module named 'torch'" in r.stderr, r.stderr
    hint = f"The workers ran {bare}/python3 (the first python3 on PATH), which cannot import torch"
    assert r.stderr.count(hint) == 1, r.stderr
    assert "PYTHON_EXEC=" in r.stderr, r.stderr
    print("workers whose python3 cannot import torch: the summary names that interpreter once, "
          "and how to choose another: passed")


def case_file_timer_expiry_restarts_the_group_and_names_the_scope():
    out = tempfile.mkdtemp()
    fifo, events = os.path.join(out, "timers"), os.path.join(out, "events.jsonl")
    script = os.path.join(WORKLOADS, "timer_overstay.py")
    bystander = subprocess.Popen(["sleep", "300"])
    env = {**os.environ, "PYTHON_EXEC": PY, "TORCHELASTIC_ENABLE_FILE_TIMER": "1",
           "TORCHELASTIC_TIMER_FILE": fifo, "OUT_DIR": out}
    p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                          f"--event_log={events}", script],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # A stranger writes garbage, an oversized line and a request to kill a process that is
        # not a worker of the job.
        fd = None

        def opened():
            """Whether the FIFO opened as a client's would: once it exists and the agent reads it
            (a FIFO without a reader refuses a writer that does not wait: ENXIO)."""
            nonlocal fd
            try:
                if stat.S_ISFIFO(os.stat(fifo).st_mode):
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
            return fd is not None

        wait_for(opened, "the timer FIFO, read by the agent")
        evil = json.dumps({"version": 1, "pid": bystander.pid, "scope_id": "evil",
                           "expiration_time": time.time() - 5, "signal": 9})
        os.write(fd, b"garbage\n" * 100 + b"x" * 10000 + b"\n" + evil.encode() + b"\n")
        os.close(fd)
        _, err = p.communicate(timeout=240)
    except BaseException:
        bystander.kill()  # (it holds this test's output open: CTest would wait for it)
        raise
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert bystander.poll() is None, "a process that is not a worker was signalled"
    bystander.kill()
    done = sorted(f for f in os.listdir(out) if f[0].isdigit())
    assert done == ["0.0", "1.0", "1.1"], done  # rank 1's first attempt never finished
    expired = [e for e in map(json.loads, open(events)) if e["event"] == "timer_expired"]
    assert len(expired) == 1 and expired[0]["rank"] == 1 and expired[0]["scope"] == "step", expired
    assert expired[0]["overstay_s"] < 0.5, expired  # the deadline plus at most a tick or two
    assert "restarting the workers (restart 1 of at most 1)" in err, err
    for warning in ("not one of this node's workers", "not a timer request", "longer than 4096"):
        assert warning in err, (warning, err)
    assert not os.path.exists(fifo), "the FIFO outlived the job"

    # Without a restart the failure summary names the rank and the timer (a fresh FIFO path).
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=2", script],
            env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1", "OUT_DIR": out})
    assert r.returncode == 1, r.stderr
    root = r.stderr[r.stderr.index("Root Cause (first observed failure):"):]
    assert "rank      : 1 (local_rank: 1)" in root, root
    assert "torch expiration timer 'step' ran out" in root and "sent it SIGKILL" in root, root
    assert "out-of-memory" not in root, root
    print(f"torch's FileTimerClient: rank 1 killed {expired[0]['overstay_s']:.3f} s past its "
          "deadline, the group restarted and finished; the summary names the scope; garbage and "
          "a foreign pid on the FIFO changed nothing: passed")


def case_logs_and_timer_file_go_to_pythons_temporary_folder_as_under_torchrun():
    """Without --log_dir the logs go to a torchelastic_* folder in the folder Python's
    tempfile.gettempdir() picks (TMPDIR, TEMP, TMP, /tmp, ...: the first that takes a file), and
    the watchdog's timer file beside it, under torch 2.14's torchrun and ddprun alike (1.13's
    torchrun put the timer file in /tmp whatever the variables said; ddprun follows the newest)."""
    torchrun, version = reference_torchrun()
    base = tempfile.mkdtemp()
    try:
        for variables, expected in (({"TMPDIR": "tmpdir"}, "tmpdir"),
                                    ({"TMPDIR": "missing", "TEMP": "temp/"}, "temp"),
                                    ({"TMPDIR": "", "TMP": "tmp"}, "tmp")):
            # (torchrun 2.14 takes seconds to start: it is compared on the first set, and the
            # order of the variables is the unit tests'.)
            launchers = [("ddprun", [DDPRUN])] + ([("torchrun", torchrun)] if expected == "tmpdir"
                                                  else [])
            for name, launcher in launchers:
                folder = os.path.join(base, name)
                os.makedirs(folder)
                for v in variables.values():
                    if v and v != "missing":
                        os.makedirs(os.path.join(folder, v), exist_ok=True)
                out = os.path.join(folder, "out")
                os.mkdir(out)
                env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "TEMP", "TMP")}
                env.update(variables, PYTHON_EXEC=PY, TORCHELASTIC_ENABLE_FILE_TIMER="1")
                r = subprocess.run([*launcher, "--nproc_per_node=1", "--monitor_interval=0.1",
                                    "--no_python", PY, "-c", DUMP_ENV, out], cwd=folder,
                                   capture_output=True, text=True, timeout=120, env=env)
                assert r.returncode == 0, (name, variables, r.stderr)
                with open(os.path.join(out, "0")) as f:
                    worker = json.load(f)
                where = os.path.join(folder, expected)
                logs = glob.glob(os.path.join(where, "torchelastic_*"))
                assert len(logs) == 1, (name, variables, os.listdir(where))
                assert worker["TORCHELASTIC_ERROR_FILE"].startswith(logs[0] + "/"), (
                    name, variables, worker["TORCHELASTIC_ERROR_FILE"])
                timer = worker["TORCHELASTIC_TIMER_FILE"]
                assert os.path.dirname(timer) == where and os.path.basename(timer).startswith(
                    "watchdog_timer_"), (name, variables, timer)
                os.rename(folder, folder + "." + expected)
    finally:
        subprocess.run(["rm", "-rf", base], check=True)
    print(f"logs and the timer file in TMPDIR as under torchrun (torch {version}), else TEMP (a "
          f"missing TMPDIR passed over), else TMP (an empty TMPDIR), made absolute: passed")


def launcher_error_file(launcher, folder, args, stop=False, before=None):
    """The launcher's own TORCHELASTIC_ERROR_FILE after `args` (its text, or None where there is
    none), its exit status and pid; `stop`: SIGTERM once both workers run (each touches
    running.<LOCAL_RANK>: torch 2.14's torchrun, stopped while it still starts its second worker,
    leaves that worker running, and its output pipes with it, for as long as it lives);
    `before`: the file's text beforehand."""
    path = os.path.join(folder, "launcher_error.json")
    if before is not None:
        with open(path, "w") as f:
            f.write(before)
    env = {**os.environ, "PYTHON_EXEC": PY, "TORCHELASTIC_ERROR_FILE": path}
    p = subprocess.Popen([*launcher, "--standalone", "--nproc_per_node=2",
                          f"--log_dir={os.path.join(folder, 'logs')}", *args],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=folder)
    if stop:
        wait_for(lambda: all(os.path.exists(os.path.join(folder, f"running.{i}")) for i in (0, 1)),
                 "both workers to run", 120)
        p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=180)
    if not os.path.exists(path):
        return None, p.returncode, p.pid, err
    with open(path) as f:
        return f.read(), p.returncode, p.pid, err


def without_timestamp(text):
    record = json.loads(text)
    record["message"]["extraInfo"].pop("timestamp")
    return record


def case_the_launchers_own_error_file_is_torchruns():
    """torchrun's main is @record's: its own TORCHELASTIC_ERROR_FILE (set by whatever started it:
    TorchX, an outer agent) gets the root cause's error file with its exit status as errorCode, a
    failure without an error file leaves it as it was, and a SIGTERM is a SignalException. ddprun
    against torch 2.14's torchrun, text for text (Python's JSON layout) but for pids and times."""
    torchrun, version = reference_torchrun()
    raising = os.path.join(WORKLOADS, "record_failure.py")
    waiting = ["--no_python", "/bin/sh", "-c", "touch running.$LOCAL_RANK; exec sleep 60"]
    seen = {}
    for name, launcher in (("torchrun", torchrun), ("ddprun", [DDPRUN])):
        folder = tempfile.mkdtemp()
        text, code, _, err = launcher_error_file(launcher, folder, [raising])
        assert code == 1 and text is not None, (name, code, err)
        assert text == json.dumps(json.loads(text)), (name, text)
        record = without_timestamp(text)
        assert record["message"]["errorCode"] == 1, (name, record)
        assert record["message"]["message"] == \
            "ValueError: learning rate must be positive, got -1", (name, record)
        seen[name, "raised"] = record

        before = '{"from": "before"}'
        text, code, _, err = launcher_error_file(launcher, tempfile.mkdtemp(),
                                                 ["--no_python", "/bin/sh", "-c", "exit 3"],
                                                 before=before)
        assert code == 1 and text == before, (name, code, text, err)

        text, code, pid, err = launcher_error_file(launcher, tempfile.mkdtemp(), waiting,
                                                   stop=True)
        assert text is not None, (name, code, err)
        assert text == json.dumps(json.loads(text)), (name, text)
        message = json.loads(text)["message"]["message"]
        assert message == f"SignalException: Process {pid} got signal: 15", (name, message)
        assert set(json.loads(text)["message"]["extraInfo"]) == {"py_callstack", "timestamp"}
        seen[name, "signal"] = code
    assert seen["torchrun", "raised"] == seen["ddprun", "raised"], seen
    print(f"the launcher's own error file: the root cause's record with errorCode 1, untouched "
          f"without one, a SignalException on SIGTERM, as torch {version}'s torchrun writes it "
          f"(exit {seen['torchrun', 'signal']} and {seen['ddprun', 'signal']} on SIGTERM): passed")


# A worker that marks its launch's arrival and waits (60 s at most) for the other launch's.
MEET = ("import os,sys,time; open(os.path.join(sys.argv[1], sys.argv[2]), 'w').close(); "
        "other = os.path.join(sys.argv[1], sys.argv[3]); deadline = time.monotonic() + 60\n"
        "while not os.path.exists(other) and time.monotonic() < deadline: time.sleep(0.05)\n"
        "sys.exit(0 if os.path.exists(other) else 4)")


def case_two_launches_of_one_slurm_batch_script_run_side_by_side():
    """In a Slurm batch script (Slurm's job variables, no step: this node only), two launches at
    once run side by side, as torchrun's do: each on a port of its own."""
    out = tempfile.mkdtemp()
    env = {**os.environ, "SLURM_JOB_ID": "4711", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "0",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_PROCID": "0",
           "MASTER_PORT": str(free_port())}
    env.pop("SLURM_STEP_ID", None)
    launches = [subprocess.Popen([DDPRUN, "--nproc_per_node=1", "--no_python", PY, "-c", MEET, out,
                                  me, other], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
                for me, other in (("a", "b"), ("b", "a"))]
    try:
        for p in launches:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert "not an srun step" in err, err
    finally:
        for p in launches:
            if p.poll() is None:
                p.kill()
                p.communicate()
        subprocess.run(["rm", "-rf", out], check=True)
    print("two launches of one Slurm batch script at once, each on a port of its own: passed")


def case_sigterm_ignoring_worker_is_killed():
    d = tempfile.mkdtemp()
    start = time.monotonic()
    r = run(["--nproc_per_node=2", "--standalone", "--shutdown_timeout=1", "--no_python", PY,
             os.path.join(WORKLOADS, "signal_probe.py"), d, "--ignore-term", "--fail-rank0"],
            timeout=60)
    elapsed = time.monotonic() - start
    assert r.returncode == 1, r.stderr
    assert "did not exit within the shutdown timeout: sending SIGKILL" in r.stderr, r.stderr
    assert elapsed < 20, elapsed
    pid1 = int(open(os.path.join(d, "ready.1")).read())
    assert not alive(pid1)
    print(f"a worker ignoring SIGTERM is SIGKILLed after the grace period ({elapsed:.1f}s): passed")


def signal_case(sig, expect, flags=()):
    d = tempfile.mkdtemp()
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=2", "--standalone", *flags, "--no_python", PY,
                          os.path.join(WORKLOADS, "signal_probe.py"), d],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: all(os.path.exists(os.path.join(d, f"ready.{r}")) for r in range(2)),
             "workers ready")
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, (p.returncode, err)
    for rank in range(2):
        with open(os.path.join(d, f"got.{rank}")) as f:
            assert f.read() == expect


def case_signals_reach_workers():
    signal_case(signal.SIGTERM, "SIGTERM")
    signal_case(signal.SIGINT, "SIGINT")
    # SLURM's preemption notice, forwarded when asked for (--signals_to_handle).
    signal_case(signal.SIGUSR1, "SIGUSR1", ["--signals_to_handle=SIGTERM,SIGUSR1"])
    print("SIGTERM, SIGINT and a requested SIGUSR1 to ddprun reach every worker; exit status 128+N: "
          "passed")


SLEEPER = "import time; time.sleep(60)"


def sleepers(marker):
    """Whether a command line (proc_util's match) is /usr/bin/python3 -c SLEEPER `marker`, exactly:
    not a launcher, whose arguments hold the same words, nor its forks before they exec."""
    argv = [b"/usr/bin/python3", b"-c", SLEEPER.encode(), marker.encode()]
    return lambda cmdline: cmdline.split(b"\0")[:4] == argv


def case_a_sigterm_while_workers_start_leaves_none_running():
    """A SIGTERM that comes while ddprun still starts its workers ends every one of them, those
    that had not started yet too: none outlives ddprun or holds its output pipes open. (torch
    2.14's torchrun, stopped while it started its second worker, left it running: the error-file
    case above.) The signal comes as soon as the first of 8 workers runs, 10 times over."""
    marker = f"ddprun-stopped-while-starting-{os.getpid()}"
    # (/usr/bin/python3 itself, not PY: sleepers matches the exact argv.)
    worker = ["--no_python", "/usr/bin/python3", "-c", SLEEPER, marker]
    counts = []
    for attempt in range(10):
        p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=8", "--shutdown_timeout=2",
                              *worker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            # (Looked for without a pause: the window is milliseconds wide.)
            while not (running := running_where(sleepers(marker))):
                if p.poll() is not None or time.monotonic() > deadline:
                    p.kill()
                    raise AssertionError((attempt, "no worker ran", p.communicate(timeout=30)))
            counts.append(len(running))
            start = time.monotonic()
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=30)  # (EOF: no worker holds the pipes)
            took = time.monotonic() - start
            left = left_where(sleepers(marker), seconds=5)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        assert p.returncode == 128 + signal.SIGTERM, (attempt, p.returncode, err)
        assert took < 2 + 8, (attempt, took, err)  # (the shutdown timeout, and a loaded machine)
        assert not left, (attempt, left, err)
    assert not left_running(marker, seconds=10)  # (ddprun's guardians too)
    print(f"a SIGTERM while 8 workers start (when the first runs; workers running then: "
          f"{sorted(counts)}) ends every one, within the shutdown timeout: passed")


def case_sigkill_of_ddprun_leaves_no_worker():
    d = tempfile.mkdtemp()
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=3", "--standalone", "--no_python", PY,
                          os.path.join(WORKLOADS, "signal_probe.py"), d],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: all(os.path.exists(os.path.join(d, f"ready.{r}")) for r in range(3)),
             "workers ready")
    pids = [int(open(os.path.join(d, f"ready.{r}")).read()) for r in range(3)]
    p.kill()
    p.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in pids), "workers to die with ddprun", 10)
    print("SIGKILL of ddprun leaves no worker alive: passed")


def case_bad_flags_exit_as_torchruns():
    # 2 where torchrun's argparse refuses the line, 1 where torchrun refuses a value after parsing.
    for args, code in ((["--bogus", "x.py"], 2), (["--nnodes=2:3", "x.py"], 2), ([], 2),
                       (["--nproc", "2", "x.py"], 2), (["--nproc_per_node=abc", "x.py"], 1),
                       (["--nproc_per_node=gpu", "x.py"], 1), (["--nnodes=2:1", "x.py"], 1)):
        r = run(args, timeout=10, env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode == code, (args, r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ddprun: error: "), (args, r.stderr)
    r = run(["--help"], timeout=10)
    assert r.returncode == 0 and "Exit status" in r.stdout
    print("bad flags: exit status 2 and one line: passed")


def case_log_layout_and_tee():
    logs = tempfile.mkdtemp()
    prog = "import os,sys; r=os.environ['RANK']; print('out', r); print('err', r, file=sys.stderr)"
    r = run(["--nproc_per_node=2", "--standalone", f"--log_dir={logs}", "--redirects=1", "--tee=2",
             "--no_python", PY, "-c", prog])
    assert r.returncode == 0, r.stderr
    (run_dir,) = glob.glob(f"{logs}/*_*")
    for rank in range(2):
        base = os.path.join(run_dir, "attempt_0", str(rank))
        assert open(os.path.join(base, "stdout.log")).read() == f"out {rank}\n"
        assert open(os.path.join(base, "stderr.log")).read() == f"err {rank}\n"
        assert f"[default{rank}]:err {rank}\n" in r.stderr, r.stderr
        assert f"out {rank}" not in r.stdout  # redirected only
    r = run(["--nproc_per_node=12", "--standalone", "--tee=3", "--local_ranks_filter=11",
             "--role=w", "--no_python", PY, "-c", prog])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[w11]:out 11\n", r.stdout
    assert "[w11]:err 11\n" in r.stderr and "[w3]" not in r.stderr, r.stderr
    r = run(["--nproc_per_node=1", "--standalone", "--tee=1", "--no_python", PY, "-c",
             "import sys; sys.stdout.write('partial line without newline')"],
            env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "<${role_name}|${rank}> "})
    assert r.stdout == "<default|0> partial line without newline\n", repr(r.stdout)
    print("log folders, -r/-t, per-rank prefixes, local_ranks_filter, whole lines: passed")


def case_a_console_nobody_reads_never_blocks_supervision():
    logs = tempfile.mkdtemp()
    # 20 MB on stdout, then wait for SIGTERM; stdout is a pipe the test never reads from.
    prog = ("import signal, sys, time\n"
            "for i in range(20000): sys.stdout.write('x' * 999 + '\\n')\n"
            "sys.stdout.flush(); open(sys.argv[1] + '/printed', 'w').close()\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "time.sleep(600)\n")
    reader, writer = os.pipe()
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=1", "--standalone", f"--log_dir={logs}",
                          "--tee=1", "--no_python", PY, "-c", prog, logs],
                         stdout=writer, stderr=subprocess.PIPE, text=True)
    os.close(writer)
    wait_for(lambda: os.path.exists(f"{logs}/printed"), "the worker's 20 MB", timeout=60)
    rss_kb = int(next(l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")).split()[1])
    p.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _, err = p.communicate(timeout=30)
    took = time.monotonic() - sent
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
    # The agent acted on SIGTERM at once (the console's drain wait is bounded by 2 s at exit).
    assert took < 5, took
    (run_dir,) = glob.glob(f"{logs}/*_*")
    assert os.path.getsize(f"{run_dir}/attempt_0/0/stdout.log") == 20000 * 1000
    assert rss_kb < 100 * 1024, rss_kb
    os.close(reader)
    # A 50 MB line without a newline: the console gets it in pieces, the agent holds none of it.
    prog = ("import signal, sys, time\n"
            "for i in range(50): sys.stdout.write('y' * 1000000)\n"
            "sys.stdout.flush(); open(sys.argv[1] + '/long', 'w').close()\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
            "time.sleep(600)\n")
    p = subprocess.Popen([DDPRUN, "--nproc_per_node=1", "--standalone", f"--log_dir={logs}",
                          "--tee=1", "--no_python", PY, "-c", prog, logs],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: os.path.exists(f"{logs}/long"), "the worker's 50 MB line", timeout=60)
    peak_kb = int(next(l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmHWM")).split()[1])
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert peak_kb < 40 * 1024, peak_kb
    # A progress bar's '\r' updates reach the console one by one, each with its prefix.
    r = subprocess.run([DDPRUN, "--nproc_per_node=1", "--standalone", "--tee=1", "--no_python", PY,
                        "-c", "import sys; sys.stdout.write(' 50%\\r100%\\r\\n')"],
                       capture_output=True, timeout=120)  # bytes: text mode would turn \r into \n
    assert r.stdout == b"[default0]: 50%\r[default0]:100%\r[default0]:\n", r.stdout
    print(f"--tee to a stdout nobody reads: 20 MB printed, agent RSS {rss_kb // 1024} MB, SIGTERM "
          f"acted on in {took * 1000:.0f} ms, the log file complete; a 50 MB line: agent peak RSS "
          f"{peak_kb // 1024} MB; '\\r' ends console lines: passed")


def case_pet_variables_configure_ddprun():
    r = run(["--no_python", "/bin/sh", "-c", 'echo "$RANK/$WORLD_SIZE $ROLE_NAME"'],
            env={"PET_NPROC_PER_NODE": "3", "PET_STANDALONE": "1", "PET_ROLE": "trainer"})
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == [f"{i}/3 trainer" for i in range(3)], r.stdout
    r = run(["--nproc_per_node=1", "--no_python", "/bin/true"], env={"PET_STANDALONE": "perhaps"})
    assert r.returncode == 2 and "PET_STANDALONE: invalid boolean value 'perhaps'" in r.stderr, r.stderr
    print("PET_* variables configure ddprun, the command line wins, bad values are usage errors: passed")


def case_loglevel_sets_what_ddprun_logs():
    job = ["--nproc_per_node=1", "--standalone", "--no_python", "/bin/true"]
    quiet = run(job, env={"LOGLEVEL": "ERROR"})
    assert quiet.returncode == 0 and "[info]" not in quiet.stderr, quiet.stderr
    debug = run(job, env={"LOGLEVEL": "debug"})
    assert debug.returncode == 0 and "[debug]" in debug.stderr, debug.stderr
    bad = run(job, env={"LOGLEVEL": "loud"})
    assert bad.returncode == 0, bad.stderr
    assert "LOGLEVEL=loud is not a log level" in bad.stderr and "[info]" in bad.stderr, bad.stderr
    print("LOGLEVEL quiets ddprun, opens its debug lines, and a bad one is named and ignored: passed")


def case_missing_executable_is_a_clear_failure():
    r = run(["--nproc_per_node=1", "--standalone", "--no_python", "/nonexistent/trainer"])
    assert r.returncode == 1, r.returncode
    assert "cannot execute '/nonexistent/trainer': No such file or directory" in r.stderr, r.stderr
    print("a missing executable fails the job with the reason: passed")


def case_signal_death_is_named_with_oom_hint():
    r = run(["--nproc_per_node=1", "--standalone", "--no_python", PY, "-c",
             "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    assert r.returncode == 1, r.returncode
    assert "exitcode  : -9" in r.stderr, r.stderr
    assert "Signal 9 (SIGKILL) received by PID" in r.stderr, r.stderr
    assert "out-of-memory killer" in r.stderr, r.stderr
    print("a worker killed by a signal is named by it, with the OOM hint for SIGKILL: passed")


if __name__ == "__main__":
    DDPRUN = os.path.abspath(sys.argv[1])
    globals()["case_" + sys.argv[2]]()
