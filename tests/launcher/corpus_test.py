"""Real torchrun command lines (tests/launcher/corpus/command_lines.py, each with its source) run
under torch 2.14's torchrun (or torch.distributed.launch) and under ddprun with the same arguments:
every rank must see the same argv and environment (except the differences listed in DIFFERENCES,
each with its reason), each node must exit with the same status, and the files under --log_dir must
have the same layout.

    corpus_test.py DDPRUN PART/PARTS     (the cases whose index % PARTS == PART)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "corpus"))
from command_lines import CASES  # noqa: E402
from proc_util import free_port  # noqa: E402

TORCH2 = os.path.join(HERE, "..", "..", "scripts", "torch2", "python")

# Written as each case's script (and as the module that `-m` names): records its argv, working
# folder and environment as JSON under $CORPUS_OUT, one file per rank.
RECORDER = """#!/usr/bin/python3
import json, os, sys
out = os.environ["CORPUS_OUT"]
with open(os.path.join(out, os.environ["RANK"] + ".json"), "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}, f)
sys.exit(int(os.environ.get("CORPUS_EXIT", "0")))
"""

# Where ddprun deliberately differs from torchrun 2.14 (docs/cli.md says the same); a case names
# those it shows in its `differs`.
DIFFERENCES = {
    "MASTER_ADDR": "c10d rounds: the round's first node by the address its kernel routes to the "
                   "rendezvous endpoint from, where torch gives socket.getfqdn(), which on a "
                   "multi-homed host or in a container can name another interface or none",
    "MASTER_PORT": "an OS-chosen store port differs from run to run; c10d workers use the "
                   "rendezvous store (one node) or the round's worker store (several) where torch "
                   "2.14 gives one node's workers a fresh free port",
    "TORCHELASTIC_RUN_ID": "a random run id (--standalone, one node without a port) differs from "
                           "run to run",
}
# ddprun's own variables for every worker (docs/cli.md), which torchrun's do not have.
OWN = {"DDPRUN_CHECKPOINT_DIR", "DDPRUN_CHECKPOINT_STEP", "DDPRUN_CHECKPOINT_MEMORY_LIMIT",
       "DDPRUN_CHECKPOINT_SLOT", "DDPRUN_CHECKPOINT_SLOTS", "DDPRUN_STEP_TIMES_FILE"}
# ddprun's mark, a name unique to each agent (DDPRUN_CONTAINED_<hex>), for its guardian.
OWN_PREFIX = "DDPRUN_CONTAINED_"
# Set by the wrapper that runs torch 2.14 from its root (scripts/torch2/python) or by the shell.
WRAPPER = {"PWD", "OLDPWD", "SHLVL", "_", "PYTHONPATH", "USE_LIBUV"}
# Each run's own folders: the run folder's random suffix, the test's temporary folder.
RUN_DIR = re.compile(r"(_[A-Za-z0-9_]{6,8})(?=/attempt_)")


def write_recorder(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(RECORDER)
    os.chmod(path, 0o755)


def prepare(work, case):
    """The job's working folder (work/job) with the case's scripts, modules and executables (on
    PATH, from work/bin) as recorders."""
    job = os.path.join(work, "job")
    os.makedirs(job)
    for script in case.get("scripts", ["train.py"]):
        write_recorder(os.path.join(job, script))
    for module in case.get("modules", []):  # `-m a.b` needs a/__init__.py and a/b.py
        parts = module.split(".")
        for i in range(1, len(parts)):
            package = os.path.join(job, *parts[:i])
            os.makedirs(package, exist_ok=True)
            open(os.path.join(package, "__init__.py"), "a").close()
        write_recorder(os.path.join(job, *parts) + ".py")
    for name in case.get("executables", []):
        write_recorder(os.path.join(work, "bin", name))
    return job


def fill(text, node, ports, job):
    return text.format(port=ports[0], port2=ports[1], node_rank=node,
                       is_host="1" if node == 0 else "0", cwd=job)


def leftovers(out):
    """Processes still running with this run's CORPUS_OUT in their environment."""
    marker = f"CORPUS_OUT={out}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            continue
    return found


def run_case(case, which, ddprun, ports):
    work = tempfile.mkdtemp(prefix=f"corpus-{which}-")
    out = os.path.join(work, "out")
    os.makedirs(out)
    job = prepare(work, case)
    dialect = case.get("launcher", "torchrun")
    if which == "ddprun":
        launcher = [ddprun, "launch"] if dialect == "launch" else [ddprun]
    else:
        module = "torch.distributed.launch" if dialect == "launch" else "torch.distributed.run"
        launcher = [TORCH2, "-m", module]
    procs = []
    for node in range(case.get("nodes", 1)):
        # One PATH for both (a Python version manager adds its folders to the one its python runs).
        env = {**os.environ, "CORPUS_OUT": out,
               "PATH": f"{work}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               **{k: fill(v, node, ports, job) for k, v in case.get("env", {}).items()}}
        env.pop("PYTHON_EXEC", None)
        cmd = [*launcher, *(fill(a, node, ports, job) for a in case["args"])]
        procs.append(subprocess.Popen(cmd, cwd=job, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"{which}: {case['source']} did not end in 180 s")
        results.append((p.returncode, stderr))
    assert not leftovers(out), (which, case["source"], "processes left behind", leftovers(out))
    ranks = {}
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            ranks[int(name.split(".")[0])] = json.load(f)
    return work, results, ranks


def relative(path, work, run_id=None):
    path = path.replace(work, "<work>")
    if run_id:
        path = path.replace(f"/{run_id}_", "/<run_id>_")
    path = RUN_DIR.sub("_<rand>", path)
    # (Both launchers make it in Python's temporary folder: TMPDIR where set.)
    return re.sub(re.escape(tempfile.gettempdir()) + r"/torchelastic_[A-Za-z0-9_]+", "<tmp>", path)


def log_files(work, case, ranks):
    log_dir = case.get("log_dir")
    if not log_dir:
        return set()
    run_ids = {r["env"]["TORCHELASTIC_RUN_ID"] for r in ranks.values()}
    root = os.path.join(work, "job", log_dir)
    found = set()
    for folder, _, files in os.walk(root):
        for f in files:
            found.add(relative(os.path.join(folder, f), work, *run_ids))
    return found


def compare(case, ref, ours):
    ref_work, ref_results, ref_ranks = ref
    our_work, our_results, our_ranks = ours
    what = f"{case['source']}: {' '.join(case['args'])}"
    codes = [code for code, _ in ref_results], [code for code, _ in our_results]
    assert codes[0] == codes[1], (what, "exit codes", codes, [e[-2000:] for _, e in our_results],
                                  [e[-2000:] for _, e in ref_results])
    if codes[0] == [2] * len(codes[0]):  # refused by argparse: the same reason, word for word
        theirs = [e.strip().splitlines()[-1].split("error: ", 1)[1] for _, e in ref_results]
        mine = [e.strip().splitlines()[-1].split("error: ", 1)[1] for _, e in our_results]
        assert theirs == mine, (what, "usage errors", theirs, mine)
    assert sorted(ref_ranks) == sorted(our_ranks), (what, "ranks", sorted(ref_ranks),
                                                    sorted(our_ranks))
    differs = set(case.get("differs", ()))
    assert differs <= set(DIFFERENCES), (what, differs - set(DIFFERENCES))
    for rank, theirs in ref_ranks.items():
        mine = our_ranks[rank]
        t_argv = [relative(a, ref_work) for a in theirs["argv"]]
        m_argv = [relative(a, our_work) for a in mine["argv"]]
        assert t_argv == m_argv, (what, rank, "argv", t_argv, m_argv)
        assert relative(theirs["cwd"], ref_work) == relative(mine["cwd"], our_work)
        t_env, m_env = theirs["env"], mine["env"]
        for key in sorted(set(t_env) | set(m_env)):
            if key in WRAPPER or key == "CORPUS_OUT" or (
                    (key in OWN or key.startswith(OWN_PREFIX)) and key not in t_env):
                continue
            if key in differs:
                assert key in t_env and key in m_env, (what, rank, key)
                continue
            t = relative(t_env.get(key, "<unset>"), ref_work, t_env.get("TORCHELASTIC_RUN_ID"))
            m = relative(m_env.get(key, "<unset>"), our_work, m_env.get("TORCHELASTIC_RUN_ID"))
            assert t == m, (what, rank, key, t, m)
        if m_env.get("TORCHELASTIC_ERROR_FILE"):
            assert os.path.isabs(m_env["TORCHELASTIC_ERROR_FILE"]), (what, m_env)
        assert m_env.get("DDPRUN_CHECKPOINT_DIR"), (what, rank, "no DDPRUN_CHECKPOINT_DIR")
    theirs, mine = log_files(ref_work, case, ref_ranks), log_files(our_work, case, our_ranks)
    assert theirs == mine, (what, "log files", sorted(theirs), sorted(mine))


def main():
    ddprun = sys.argv[1]
    part, parts = (int(x) for x in sys.argv[2].split("/"))
    if not os.path.exists("/var/cache/ddprun/torch2-forky/.ddprun-torch2-root") and \
            "DDPRUN_TORCH2_ROOT" not in os.environ:
        print("no torch 2 root (scripts/torch2-root.sh builds it): skipped")
        sys.exit(77)
    chosen = [(i, c) for i, c in enumerate(CASES) if i % parts == part]
    failed = []
    for i, case in chosen:
        ports = (free_port(), free_port())  # the same for both: workers see them
        ref = run_case(case, "torchrun", ddprun, ports)
        ours = run_case(case, "ddprun", ddprun, ports)
        try:
            compare(case, ref, ours)
            print(f"[{i}] {case['source']}: same argv, environment, exit status and log files")
        except AssertionError as e:
            failed.append(i)
            print(f"[{i}] {case['source']}: FAILED {e}")
        for work in (ref[0], ours[0]):
            shutil.rmtree(work, ignore_errors=True)
    assert not failed, f"command lines {failed} behave differently"
    print(f"{len(chosen)} command lines of {len(CASES)} behave as under torchrun 2.14: passed")

if __name__ == "__main__":
    main()
