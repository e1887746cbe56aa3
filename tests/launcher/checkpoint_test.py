"""In-memory checkpoints (ddprun.checkpoint): a killed worker's job resumes from the step it had
saved and ends bit-identical to an uninterrupted run; a kill in the middle of a save leaves the
step before it; a small /dev/shm and --checkpoint_memory_limit are clear errors at the first save;
no region outlives its job, however the job ends; --checkpoint_dir persists checkpoints in the
background and a job started again from nothing resumes from them; `ddprun status` shows each
rank's; torch.distributed.checkpoint saves through MemoryStorageWriter restore from memory and
persist in torch's own layout, and dcp.async_save writes into them in the background; a full
--checkpoint_dir costs training nothing. Real ddprun, real torch workers.

    checkpoint_test.py DDPRUN CASE [TRAIN_CPU]    (CASE: one of the functions named case_*)
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from job_logs import events, metrics
from proc_util import allocated_under, free_port, left_running, script, static_job_status

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
# The workers' python: Debian's (torch 1.13) unless DDPRUN_TEST_PYTHON names another (torch 2.14).
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = None


def run(args, env=None, timeout=240):
    return subprocess.run([DDPRUN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON_EXEC": PY, **(env or {})})


def ddp_job(out, steps, extra=(), env=None):
    return run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", *extra,
                os.path.join(WORKLOADS, "checkpoint_ddp.py"), str(steps), out], env=env)


def final_params(out):
    r = subprocess.run([PY, "-c", "import sys, torch; ps = torch.load(sys.argv[1]); "
                        "print(' '.join(p.double().sum().hex() for p in ps))",
                        os.path.join(out, "final.pt")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def bit_identical(a, b):
    r = subprocess.run([PY, "-c", "import sys, torch; x, y = torch.load(sys.argv[1]), "
                        "torch.load(sys.argv[2]); sys.exit(0 if len(x) == len(y) and "
                        "all(torch.equal(p, q) for p, q in zip(x, y)) else 1)",
                        os.path.join(a, "final.pt"), os.path.join(b, "final.pt")],
                       capture_output=True, text=True, timeout=120)
    return r.returncode == 0


def case_a_killed_worker_resumes_from_its_step_bit_identical():
    for preload in ([], ["--preload=auto"]):
        whole, killed = tempfile.mkdtemp(), tempfile.mkdtemp()
        r = ddp_job(whole, 12, preload)
        assert r.returncode == 0, r.stderr
        event_log = os.path.join(killed, "events.jsonl")
        r = ddp_job(killed, 12, [*preload, f"--event_log={event_log}"], env={"KILL_AT": "1:6"})
        assert r.returncode == 0, r.stderr
        assert "restore the in-memory checkpoint of step" in r.stderr, r.stderr
        log = events(event_log)
        held = [e for e in log if e["event"] == "checkpoints_held"]
        restore = [e for e in log if e["event"] == "checkpoint_restore"]
        assert held and held[0]["round"] == 0 and held[0]["steps"][1][-1] == 6, held
        assert held[0]["bytes"] > 0 and held[-1]["steps"] == [[10, 11], [10, 11]], held
        assert [e["round"] for e in restore] == [1], restore
        resumed = {open(p).read() for p in glob.glob(os.path.join(killed, "resumed.1.*"))}
        # Rank 1 died just after saving step 6; rank 0 may be there too or one step behind.
        assert resumed in ({"6"}, {"5"}), resumed
        assert bit_identical(whole, killed), (final_params(whole), final_params(killed))
        assert not left_running(killed) and not left_running(whole)
    print(f"a DDP job whose rank 1 was SIGKILLed after step 6 resumed from step {resumed.pop()} "
          "and ended bit-identical to an uninterrupted run, cold and with --preload: passed")


def persisted_steps(folder):
    """The steps complete in a --checkpoint_dir for a job of two ranks."""
    return sorted(int(d[5:]) for d in os.listdir(folder) if d.startswith("step_") and all(
        os.path.exists(os.path.join(folder, d, f"rank_{r}.ddpckpt")) for r in (0, 1)))


def case_a_job_started_again_from_nothing_resumes_from_checkpoint_dir():
    whole, first, ckpt = tempfile.mkdtemp(), tempfile.mkdtemp(), tempfile.mkdtemp()
    r = ddp_job(whole, 12)
    assert r.returncode == 0, r.stderr
    # Rank 1 dies after saving step 6 with no restart left: the job fails, and its newest step
    # (6, or 5 if rank 0 had not saved 6 yet) is persisted before the agent exits.
    flags = [f"--checkpoint_dir={ckpt}", "--checkpoint_persist_every=4"]
    ev1 = os.path.join(first, "events1.jsonl")
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=0", *flags,
             f"--event_log={ev1}", os.path.join(WORKLOADS, "checkpoint_ddp.py"), "12", first],
            env={"KILL_AT": "1:6"})
    assert r.returncode == 1, r.stderr
    on_disk = persisted_steps(ckpt)
    newest = on_disk[-1] if on_disk else None
    assert newest in (5, 6), (on_disk, r.stderr)
    persisted = events(ev1, "checkpoint_persisted")
    assert {(e["rank"], e["step"]) for e in persisted} >= {(0, newest), (1, newest)}, persisted
    assert all(e["bytes"] > 0 and e["seconds"] >= 0 for e in persisted), persisted
    # Bad input beside it: a step folder holding a torn file and a stray one; leftovers of a copy.
    os.makedirs(os.path.join(ckpt, "step_99"))
    open(os.path.join(ckpt, "step_99", "rank_0.ddpckpt"), "wb").write(b"DDPCKPT1" + bytes(100))
    open(os.path.join(ckpt, "step_99", "rank_1.ddpckpt"), "wb").write(os.urandom(5000))
    # Started again: new agents, nothing in memory. The job agrees on the newest step complete
    # on disk, reads it back into the regions, resumes there and ends as if never interrupted.
    ev2 = os.path.join(first, "events2.jsonl")
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=0", *flags,
             f"--event_log={ev2}", os.path.join(WORKLOADS, "checkpoint_ddp.py"), "12", first])
    assert r.returncode == 0, r.stderr
    assert f"the workers restore step {newest} from {ckpt}" in r.stderr, r.stderr
    restore = events(ev2, "checkpoint_restore")
    assert [(e["step"], e["from"]) for e in restore] == [(newest, ckpt)], restore
    resumed = {open(p).read() for p in glob.glob(os.path.join(first, "resumed.0.*"))}
    assert resumed == {str(newest)}, resumed
    assert bit_identical(whole, first), (final_params(whole), final_params(first))
    # Along the way the first step of each span of 4 it saw, and the last one at the end.
    later = persisted_steps(ckpt)
    assert 11 in later and len([s for s in later if s > newest]) >= 2, later
    assert not glob.glob(os.path.join(ckpt, "*", ".*.tmp")), os.listdir(ckpt)
    assert not left_running(first) and not left_running(whole)
    print(f"a job that failed at step 6 with no restart left persisted step {newest}; started "
          f"again from nothing it resumed there from --checkpoint_dir (a torn step_99 ignored) "
          f"and ended bit-identical to an uninterrupted run; steps on disk: {later}: passed")


TORCH_READS = r'''
import sys, torch, torch.distributed.checkpoint as dcp
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
state = {"model": model.state_dict()}
dcp.load(state, storage_reader=dcp.FileSystemReader(sys.argv[1]))
want = torch.load(sys.argv[2])
print(all(torch.equal(state["model"][k], v) for k, v in want.items()) and len(want) == 4)
'''


def case_dcp_saves_restore_from_memory_and_persist_in_torchs_layout():
    whole, killed, ckpt = tempfile.mkdtemp(), tempfile.mkdtemp(), tempfile.mkdtemp()
    dcp = {"CKPT_API": "dcp", "SAVE_PARAMS": "1"}
    r = ddp_job(whole, 12, env=dcp)
    assert r.returncode == 0, r.stderr
    r = ddp_job(killed, 12, [f"--checkpoint_dir={ckpt}", "--checkpoint_persist_every=4"],
                env={**dcp, "KILL_AT": "1:6"})
    assert r.returncode == 0, r.stderr
    assert "restore the in-memory checkpoint of step" in r.stderr, r.stderr
    resumed = {open(p).read() for p in glob.glob(os.path.join(killed, "resumed.1.*"))}
    assert resumed in ({"6"}, {"5"}), resumed
    assert bit_identical(whole, killed), (final_params(whole), final_params(killed))
    # Each persisted step loads with torch's own FileSystemReader, in a process without ddprun,
    # and holds that step's parameters (and not another's).
    steps = persisted_steps(ckpt)
    assert 11 in steps and len(steps) >= 3, steps
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DDPRUN_", "PYTHONPATH"))}
    reader = script(TORCH_READS)
    for step in steps:
        assert os.path.exists(os.path.join(ckpt, f"step_{step}", ".metadata")), step
        got = subprocess.run([PY, reader, os.path.join(ckpt, f"step_{step}"),
                              os.path.join(whole, f"params.{step}.pt")],
                             capture_output=True, text=True, timeout=120, env=env)
        assert got.stdout.strip() == "True", (step, got.stdout, got.stderr)
    other = subprocess.run([PY, reader, os.path.join(ckpt, f"step_{steps[0]}"),
                            os.path.join(whole, f"params.{steps[-1]}.pt")],
                           capture_output=True, text=True, timeout=120, env=env)
    assert other.stdout.strip() == "False", other.stdout + other.stderr
    assert not left_running(killed) and not left_running(whole)
    print(f"dcp.save through MemoryStorageWriter: rank 1 SIGKILLed after step 6, restored step "
          f"{resumed.pop()} from memory through MemoryStorageReader, ended bit-identical; steps "
          f"{steps} persisted, each loaded by torch's FileSystemReader without ddprun: passed")


ONE_SAVE_AT_A_TIME = r'''
import threading, torch, torch.distributed.checkpoint as dcp
from ddprun import checkpoint
go, paused = threading.Event(), threading.Event()
class Paused(checkpoint.MemoryStorageWriter):  # a save whose last step waits: still in flight
    def finish(self, metadata, results):
        paused.set()
        go.wait(60)
        super().finish(metadata, results)
state = {"w": torch.arange(8.0)}
first = dcp.async_save(state, storage_writer=Paused(1), no_dist=True)
assert paused.wait(60)
for second in (lambda: checkpoint.save(2, state),
               lambda: dcp.save(state, storage_writer=checkpoint.MemoryStorageWriter(2), no_dist=True)):
    try:
        second()
        print("a second save went ahead")
    except BaseException as e:  # dcp.save wraps it in a CheckpointException (a BaseException)
        print(" ".join(str(e).split()))
go.set()
first.result()
checkpoint.save(3, state)
print("after the first: saved")
'''


def case_dcp_async_save_writes_into_memory_in_the_background():
    whole, killed = tempfile.mkdtemp(), tempfile.mkdtemp()
    r = ddp_job(whole, 12, env={"CKPT_API": "dcp"})
    assert r.returncode == 0, r.stderr
    # dcp.async_save: staged by torch, written into the region by a thread of torch's; rank 1 is
    # killed just after async_save(6) returned, when step 6 may still be on its way.
    r = ddp_job(killed, 12, env={"CKPT_API": "dcp_async", "KILL_AT": "1:6"})
    assert r.returncode == 0, r.stderr
    resumed = {open(p).read() for p in glob.glob(os.path.join(killed, "resumed.1.*"))}
    assert resumed in ({"6"}, {"5"}), resumed
    assert bit_identical(whole, killed), (final_params(whole), final_params(killed))
    # A save while an earlier one of the same rank is still being written is refused, naming both
    # steps (it would pick the same slot); once that one is in, saving goes on.
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=1", script(ONE_SAVE_AT_A_TIME), out])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    refused = "step 2: this rank's save of step 1 is still being written"
    assert len(lines) == 3 and all(refused in line for line in lines[:2]), r.stdout
    assert lines[2] == "after the first: saved", r.stdout
    assert not left_running(killed) and not left_running(whole) and not left_running(out)
    print(f"dcp.async_save through MemoryStorageWriter: rank 1 SIGKILLed after async_save(6) "
          f"returned, resumed from step {resumed.pop()}, ended bit-identical; a save while one is "
          f"in flight is refused with both steps named: passed")


def case_a_full_checkpoint_dir_costs_training_nothing():
    # --checkpoint_dir on a 16 KiB tmpfs, in a mount namespace of the test's own: every copy
    # fails for want of space, is logged and counted, and the job trains to its end.
    out, ckpt = tempfile.mkdtemp(), tempfile.mkdtemp()
    event_log = os.path.join(out, "events.jsonl")
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           f'mount -t tmpfs -o size=16k tmpfs {ckpt} && exec "$@"', "sh", DDPRUN, "--standalone",
           "--nproc_per_node=2", f"--checkpoint_dir={ckpt}", "--checkpoint_persist_every=2",
           f"--event_log={event_log}", os.path.join(WORKLOADS, "checkpoint_ddp.py"), "8", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                       env={**os.environ, "PYTHON_EXEC": PY})
    assert r.returncode == 0, r.stderr
    assert "could not be copied" in r.stderr and "No space left on device" in r.stderr, r.stderr
    failed = events(event_log, "checkpoint_persist_failed")
    assert failed and all("No space left on device" in e["reason"] for e in failed), failed
    assert os.path.exists(os.path.join(out, "final.pt")), os.listdir(out)
    # A --checkpoint_dir that cannot be a folder is a clear error before any worker starts.
    blocker = os.path.join(out, "a-file")
    open(blocker, "w").close()
    r = run(["--standalone", "--nproc_per_node=1", f"--checkpoint_dir={blocker}/sub", "x.py"])
    assert r.returncode != 0 and blocker in r.stderr, r.stderr
    r = run(["--standalone", "--nproc_per_node=1", "--checkpoint_persist_every=0", "x.py"])
    assert r.returncode == 2 and "--checkpoint_persist_every" in r.stderr, r.stderr
    assert not left_running(out)
    print(f"a full --checkpoint_dir: {len(failed)} copies failed with ENOSPC, logged, and the job "
          f"trained to its end; a --checkpoint_dir under a file and a zero span are clear errors: "
          f"passed")


SAVE_AND_HOLD = r'''
import os, sys, time, torch
from ddprun import checkpoint
rank = int(os.environ["RANK"])
for step in range(4):
    checkpoint.save(step, {"w": torch.full((1 << 18,), float(step + rank))})
deadline = time.monotonic() + 120
while not os.path.exists(os.path.join(sys.argv[1], "go")) and time.monotonic() < deadline:
    time.sleep(0.05)
'''


class TwoNodes:
    """Two nodes of one worker each on loopback (static rendezvous: node 0's agent holds the
    store), node r with the flags `flags(r)`, their workers running `code` with `out` as argument.
    Leaving it writes out/go (the workers' sign to end) and waits for both."""

    def __init__(self, out, code, flags=lambda r: ()):
        self.out, self.port = out, free_port()
        self.logs = [open(os.path.join(out, f"ddprun.{r}.log"), "w") for r in (0, 1)]
        self.jobs = [subprocess.Popen(
            [DDPRUN, "--nnodes=2", f"--node_rank={r}", "--nproc_per_node=1",
             "--master_addr=127.0.0.1", f"--master_port={self.port}", *flags(r), script(code),
             out], stdout=subprocess.DEVNULL, stderr=self.logs[r],
            env={**os.environ, "PYTHON_EXEC": PY}) for r in (0, 1)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        open(os.path.join(self.out, "go"), "w").close()
        for job in self.jobs:
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
        for log in self.logs:
            log.close()

    def running(self):
        return any(job.poll() is None for job in self.jobs)

    def status(self, *extra):
        return static_job_status(DDPRUN, self.port, *extra)

    def texts(self):
        return [open(log.name).read() for log in self.logs]

    def returncodes(self):
        return [job.returncode for job in self.jobs]


def case_status_shows_each_ranks_checkpoints():
    out, ckpt = tempfile.mkdtemp(), tempfile.mkdtemp()
    with TwoNodes(out, SAVE_AND_HOLD,
                  lambda r: (f"--checkpoint_dir={ckpt}", "--checkpoint_persist_every=1")) as nodes:
        status = nodes.status

        def done(account):
            return account and [x["step"] for x in account["ranks"]] == [3] and \
                (account["persisted"] or {}).get("step") == 3
        deadline, accounts = time.monotonic() + 60, []
        while time.monotonic() < deadline:
            r = status("--json")
            if r.returncode == 0:
                accounts = [n["checkpoints"] for n in json.loads(r.stdout)["nodes"]]
                if len(accounts) == 2 and all(map(done, accounts)):
                    break
            time.sleep(0.5)
        assert len(accounts) == 2 and all(map(done, accounts)), (accounts, nodes.texts())
        assert [a["ranks"][0]["rank"] for a in accounts] == [0, 1], accounts
        assert all(a["ranks"][0]["save_seconds"] > 0 and a["bytes"] >= 2 * (1 << 20) and
                   a["persisted"]["seconds"] > 0 for a in accounts), accounts
        # What the node's checkpoints take, part by part, against its budget (by default half the
        # size of the file system holding them).
        shm = os.statvfs("/dev/shm")
        assert all(a["memory"]["regions"] >= a["bytes"] and
                   a["memory"]["total"] == sum(a["memory"][p] for p in
                                               ("regions", "kept", "peers", "restore", "staging"))
                   and a["memory"]["limit"] == shm.f_blocks * shm.f_frsize // 2
                   for a in accounts), accounts
        table = status().stdout
        lines = [x.strip() for x in table.splitlines() if x.strip().startswith("checkpoints:")]
        assert len(lines) == 2 and lines[1].startswith("checkpoints: step 3 on rank 1 (save ") and \
            "step 3 persisted (copied in" in lines[1] and " MiB budget: regions " in lines[1], table
    assert nodes.returncodes() == [0, 0], nodes.texts()
    assert not left_running(out)
    print(f"ddprun status shows each node's ranks' newest step, its save time, the bytes held "
          f"against the node's budget and the step persisted: '{lines[1]}': passed")

GROWING = r"""
import os, sys, time, torch
from ddprun import checkpoint
rank, out = int(os.environ["RANK"]), sys.argv[1]
open(os.path.join(out, f"folder.{rank}"), "w").write(os.environ["DDPRUN_CHECKPOINT_DIR"])
# Saves that grow a MiB every two steps until the node's budget cannot hold one.
for step in range(40):
    try:
        checkpoint.save(step, {"w": torch.full(((1 + step // 2) << 18,), float(step + rank))})
    except checkpoint.CheckpointError as e:
        open(os.path.join(out, f"refused.{rank}"), "w").write(f"{step} {e}")
        break
    time.sleep(0.2)  # the copies to the peer have time to happen
"""


def case_one_budget_bounds_everything_a_node_holds():
    # Two nodes of one worker each, copies to each other on (static rendezvous on loopback), a
    # budget of 20 MiB per node, every step persisted; each worker's state grows until a save
    # cannot fit, its node's copies for the peer dropped for it first. /dev/shm is sampled all
    # along: a node's checkpoint folder (its regions, the copies it keeps for its peer and holds
    # for it, the persister's staging) never holds more than the budget.
    out, limit = tempfile.mkdtemp(), 20 << 20
    most, parts_seen = [0, 0], set()
    with TwoNodes(out, GROWING, lambda r: ("--checkpoint_memory_limit=20M",
                                           f"--checkpoint_dir={out}/disk",
                                           "--checkpoint_persist_every=1")) as nodes:
        deadline = time.monotonic() + 120
        while nodes.running() and time.monotonic() < deadline:
            for r in (0, 1):
                try:
                    folder = open(os.path.join(out, f"folder.{r}")).read()
                except FileNotFoundError:
                    continue
                most[r] = max(most[r], allocated_under(folder))
                for part in ("kept", "peers"):
                    if allocated_under(os.path.join(folder, part)) > 0:
                        parts_seen.add(part)
            time.sleep(0.005)
    assert nodes.returncodes() == [0, 0], nodes.texts()
    assert all(0 < m <= limit for m in most), (most, limit)
    assert parts_seen == {"kept", "peers"}, parts_seen  # copies were made, and counted
    refused = [open(os.path.join(out, f"refused.{r}")).read() for r in (0, 1)]
    assert all("over the node's checkpoint budget of 20971520 bytes" in x for x in refused), refused
    # A node's own saves come before copies for its peer: where the copies took the room a grown
    # region needed, the agent dropped them for it (a line each time).
    made = [sum("copies held for and kept for peers dropped" in line for line in text.splitlines())
            for text in nodes.texts()]
    assert sum(made) > 0, nodes.texts()
    assert not left_running(out)
    print(f"a budget of 20 MiB per node, states growing until a save cannot fit: the most a node's "
          f"checkpoint folder held was {most[0] / 2**20:.1f} and {most[1] / 2**20:.1f} MiB; copies "
          f"for the peer dropped for a worker's save {made[0]} and {made[1]} time(s); the "
          f"save refused at step {refused[0].split()[0]} and {refused[1].split()[0]}: "
          f"'{refused[0].split(' ', 1)[1][:120]}...': passed")


STEADY = r"""
import os, sys, time, torch
from ddprun import checkpoint
rank, out = int(os.environ["RANK"]), sys.argv[1]
deadline = time.monotonic() + 120
step = 0
while not os.path.exists(os.path.join(out, "go")) and time.monotonic() < deadline:
    checkpoint.save(step, {"w": torch.full((1 << 20 if rank == 0 else 256,), float(step + rank))})
    step += 1
    time.sleep(0.1)
"""


def case_copies_that_cannot_keep_up_say_so():
    # Two nodes; node 1's budget leaves no room for node 0's copies, so node 0's safe step never
    # advances: its agent says so once (log, event, status), while both train on. (Node 0's state
    # is 4 MiB, node 1's 1 KiB in a region of two 1 MiB slots: 5000K holds node 1's region and what
    # it keeps of its own, never a copy of node 0's.)
    out = tempfile.mkdtemp()
    event_log = os.path.join(out, "events.jsonl")
    line = ""
    with TwoNodes(out, STEADY, lambda r: ["--checkpoint_memory_limit=5000K"] if r == 1 else
                  [f"--event_log={event_log}"]) as nodes:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            r = nodes.status()
            line = next((x.strip() for x in r.stdout.splitlines()
                         if x.strip().startswith("checkpoints:") and "BEHIND" in x), "")
            if line:
                break
            time.sleep(0.5)
    text = nodes.texts()
    assert nodes.returncodes() == [0, 0], text
    assert "(BEHIND: the safe step is not advancing)" in line, (line, text)
    warned = [x for x in text[0].splitlines() if "are behind" in x]
    # (four windows of the stride, 1: four steps, or more where a poll came late; the first copy
    # may have fitted before node 1's own checkpoints grew)
    assert len(warned) == 1 and re.search(r"the safe step \((none yet|\d+)\) has not advanced "
                                          r"while the workers saved ([4-9]|\d\d+) steps",
                                          warned[0]), text[0]
    assert "no room for a copy" in text[0], text[0]  # why: the peer's budget
    behind = events(event_log, "checkpoint_copies_behind")
    assert len(behind) == 1 and behind[0]["steps"] >= 4 and behind[0]["safe_step"] in (None, 0), \
        behind
    assert not left_running(out)
    print(f"a peer whose budget refuses every copy: one warning '{warned[0].split('] ')[-1]}', "
          f"one event, and ddprun status says '...{line[-60:]}': passed")


INTO = r'''
import os, sys, torch
from ddprun import checkpoint
out, attempt = sys.argv[1], os.environ["TORCHELASTIC_RESTART_COUNT"]
if attempt == "0":
    checkpoint.save(4, {"w": torch.arange(12.0).view(3, 4), "b": [torch.tensor(7), 5]})
    sys.exit(1)
target = {"w": torch.zeros(3, 4), "b": [torch.tensor(0), 0]}
w = target["w"]
step, got = checkpoint.load(into=target)
try:
    checkpoint.load(into={"w": torch.zeros(4, 3), "b": [torch.tensor(0), 0]})
    mismatch = "accepted"
except checkpoint.CheckpointError as e:
    mismatch = str(e)
open(os.path.join(out, "into"), "w").write(
    f"{step} {got['w'] is w} {got['b'][0] is target['b'][0]} "
    f"{torch.equal(w, torch.arange(12.0).view(3, 4))} {int(got['b'][0])} {got['b'][1]}|{mismatch}")
'''


def case_load_into_restores_in_place():
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=1", "--max_restarts=1", script(INTO), out])
    assert r.returncode == 0, r.stderr
    result, mismatch = open(os.path.join(out, "into")).read().split("|")
    assert result == "4 True True True 7 5", result
    assert "do not match those of `into`" in mismatch, mismatch
    print("load(into=state) restores each tensor into the caller's own (the saved values of the "
          "rest), and refuses a state of another shape: passed")


HUGE = r'''
import os, sys, torch
from ddprun import checkpoint
out, attempt = sys.argv[1], os.environ["TORCHELASTIC_RESTART_COUNT"]
big = torch.arange(8 << 20, dtype=torch.float32)  # 32 MiB
if attempt == "0":
    checkpoint.save(3, {"big": big, "small": torch.ones(3)})
    sys.exit(1)
step, got = checkpoint.load()
t = got["big"]
middle = t.data_ptr() + t.numel() * t.element_size() // 2
flags, here = [], False
with open("/proc/self/smaps") as f:  # the flags of the mapping holding the tensor's middle
    for line in f:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(x, 16) for x in head.split("-"))
            here = low <= middle < high
        elif head == "VmFlags:" and here:
            flags = line.split()[1:]
equal = torch.equal(t, big) and torch.equal(got["small"], torch.ones(3))
t.resize_(10)  # torch's own storage still: resizable
open(os.path.join(out, "huge"), "w").write(f"{step} {equal} {'hg' in flags}")
'''


def case_a_loaded_state_takes_huge_pages_where_the_kernel_has_them():
    """load() makes new tensors whose first touch is most of its time: a large one's memory is
    advised to take 2 MiB pages (VmFlags "hg"), unless the kernel's transparent huge pages are
    off, and its values and storage are as any tensor's."""
    try:
        mode = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
    except OSError:
        mode = "[never]"
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=1", "--max_restarts=1", script(HUGE), out])
    assert r.returncode == 0, r.stderr
    huge = "[never]" not in mode
    assert open(os.path.join(out, "huge")).read() == f"3 True {huge}", (mode, r.stderr)
    print(f"a 32 MiB tensor loaded: its values, a resizable storage, and advised to take huge "
          f"pages ({huge}; the kernel's mode: {mode.strip()}): passed")


def case_under_virtual_local_rank_each_rank_restores_its_own():
    """--virtual_local_rank gives every worker LOCAL_RANK=0: each still saves into a region of its
    own, and after a kill each rank gets back exactly what it saved."""
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--virtual_local_rank",
             os.path.join(WORKLOADS, "checkpoint_ranks.py"), "8", out], env={"KILL_AT": "1:4"})
    assert r.returncode == 0, r.stderr
    assert "restore the in-memory checkpoint of step 4" in r.stderr, r.stderr
    found = {os.path.basename(p): open(p).read() for p in glob.glob(f"{out}/loaded.*")}
    assert found == {"loaded.0@2": "own 4", "loaded.1@2": "own 4"}, found
    assert not left_running(out)
    print("--virtual_local_rank (LOCAL_RANK=0 in every worker), rank 1 SIGKILLed after step 4: "
          "each rank resumed from its own state of step 4: passed")


def case_a_step_saved_with_two_states_is_not_restored():
    """Rank 0 restores step 4, trains it again, saves it as step 4 and is killed before rank 1
    saves: restored as each rank's newest save of 4, rank 0 would resume from the redone state and
    rank 1 from the first (two timelines, silently). Step 4 is restored by no rank, said once;
    with --checkpoint_dir, not from the disk either (a rank's file of it may be of either save)."""
    for extra in ([], ["--checkpoint_dir"]):
        out = tempfile.mkdtemp()
        args = [f"--checkpoint_dir={tempfile.mkdtemp()}"] if extra else []
        r = run(["--standalone", "--nproc_per_node=2", "--max_restarts=2", *args,
                 os.path.join(WORKLOADS, "checkpoint_ranks.py"), "7", out],
                env={"KILL_AT": "1:4", "RESAVE": "1"})
        assert r.returncode == 0, r.stderr
        assert "restore the in-memory checkpoint of step 4" in r.stderr, r.stderr
        found = {os.path.basename(p): open(p).read() for p in glob.glob(f"{out}/loaded.*")}
        assert found == {"loaded.0@2": "fresh", "loaded.1@2": "fresh"}, (extra, found)
        assert re.search(r"step 4 was saved with two states \(global rank 0's", r.stderr), r.stderr
        assert "restore step 4 from" not in r.stderr, r.stderr
        assert not left_running(out)
    print("rank 0 saved its restored step 4 again with other contents and was killed: no rank "
          "restored step 4 (each would have taken another state of it), from memory or from "
          "--checkpoint_dir, one warning: passed")


def case_a_step_saved_twice_with_one_state_is_restored():
    """Each step saved twice with the same state, replicated= (the holder's two payloads differ by
    their ordinal) and, with torch 2, through torch.distributed.checkpoint (by its save count):
    one state, so a rank SIGKILLed after step 6 resumes from it, bit-identical to a run never
    interrupted."""
    apis = [{"CKPT_REPLICATED": "1"}]
    if PY.endswith("torch2/python"):  # torch 2.14
        apis.append({"CKPT_API": "dcp"})
    whole = tempfile.mkdtemp()
    assert ddp_job(whole, 10).returncode == 0
    for api in apis:
        killed = tempfile.mkdtemp()
        r = ddp_job(killed, 10, env={"KILL_AT": "1:6", "CKPT_TWICE": "1", **api})
        assert r.returncode == 0, r.stderr
        assert "two states" not in r.stderr, r.stderr
        resumed = {open(p).read() for p in glob.glob(os.path.join(killed, "resumed.1.*"))}
        assert resumed in ({"6"}, {"5"}), (api, resumed, r.stderr)
        assert bit_identical(whole, killed), (api, final_params(whole), final_params(killed))
        assert not left_running(killed)
    assert not left_running(whole)
    print(f"each step saved twice with one state ({', '.join(str(a) for a in apis)}): a rank "
          f"SIGKILLed after step 6 resumed from step {resumed.pop()}, bit-identical: passed")


KILL_IN_SAVE = r'''
import mmap, os, signal, struct, sys, threading, time
import torch
from ddprun import checkpoint
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
step, state = checkpoint.load()
out = sys.argv[1]
path = os.path.join(os.environ["DDPRUN_CHECKPOINT_DIR"], "rank" + os.environ["LOCAL_RANK"])
if attempt == "1":
    ok = state is not None and all(bool((t == float(step)).all()) for t in state["big"])
    # One bit of the restored slot's data flipped: load() refuses it.
    with open(path, "r+b") as f:
        region = mmap.mmap(f.fileno(), 0)
        slot = [s for s in (0, 1) if struct.unpack_from("<Qq", region, 64 + 64 * s) == (2, step)][0]
        at = 4096 + slot * struct.unpack_from("<Q", region, 8)[0] + (100 << 20)
        region[at] ^= 1
    try:
        checkpoint.load()
        refused = "loaded"
    except checkpoint.CheckpointError as e:
        refused = str(e)
    open(os.path.join(out, "restored"), "w").write(f"{step} {ok}|{refused}")
    sys.exit(0)
for s in (1, 2):
    checkpoint.save(s, {"big": [torch.full((8 << 20,), float(s)) for _ in range(8)]})
# Step 3: killed while its bytes are being copied, as soon as its slot says it is being written.
f = open(path, "r+b")
header = mmap.mmap(f.fileno(), 4096)
# Steps 1 and 2 fill both slots: step 3 goes to the older one (the lower sequence number).
slot = min((0, 1), key=lambda s: struct.unpack_from("<Q", header, 64 + 64 * s + 32)[0])
def kill_when_writing():
    deadline = time.monotonic() + 30
    while struct.unpack_from("<Q", header, 64 + 64 * slot)[0] != 1 and time.monotonic() < deadline:
        pass
    open(os.path.join(out, "killed_in_save"), "w").write(str(slot))
    os.kill(os.getpid(), signal.SIGKILL)
threading.Thread(target=kill_when_writing, daemon=True).start()
checkpoint.save(3, {"big": [torch.full((8 << 20,), 3.0) for _ in range(8)]})
time.sleep(30)  # not reached: killed during the save
'''


def case_a_kill_during_a_save_restores_the_step_before():
    out = tempfile.mkdtemp()
    r = run(["--standalone", "--nproc_per_node=1", "--max_restarts=1", script(KILL_IN_SAVE), out])
    assert r.returncode == 0, r.stderr
    assert os.path.exists(os.path.join(out, "killed_in_save")), r.stderr
    assert not left_running(out)
    restored, corrupted = open(os.path.join(out, "restored")).read().split("|")
    assert restored == "2 True", restored
    assert corrupted.startswith("checkpoint: step 2 in ") and "fails its checksum" in corrupted, \
        corrupted
    print("a worker SIGKILLed while copying step 3 (256 MiB) into its slot: step 2 restored, "
          "checksum verified, every value as saved; one bit flipped in it and load() refuses it: "
          "passed")


SAVE_BIG = r'''
import os, sys, torch
from ddprun import checkpoint
try:
    checkpoint.save(0, {"w": torch.zeros(int(sys.argv[1]) // 4)})
except checkpoint.CheckpointError as e:
    print("ERROR", e)
    sys.exit(7)
print("SAVED")
'''


def case_a_small_dev_shm_and_the_memory_limit_are_clear_errors():
    # /dev/shm of 2 MiB, in a mount namespace of the test's own.
    shm = tempfile.mkdtemp()
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
           f'mount -t tmpfs -o size=2m tmpfs {shm} && exec "$@"', "sh", DDPRUN, "--standalone",
           "--nproc_per_node=1", script(SAVE_BIG), str(8 << 20)]
    env = {**os.environ, "PYTHON_EXEC": PY, "DDPRUN_SHM_DIR": shm}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    budget = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
    # By default the budget is half of it: 1 MiB.
    assert budget and "over the node's checkpoint budget of 1048576 bytes" in budget[0] and \
        "half the size of the file system" in budget[0], r.stdout
    assert "checkpoints: at most 1.0 MiB of memory on this node (half the size" in r.stderr, \
        r.stderr
    # A budget larger than /dev/shm: what it cannot hold is named, with --shm-size.
    r = subprocess.run(cmd[:9] + ["--checkpoint_memory_limit=64M"] + cmd[9:], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    line = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
    assert line and "cannot hold this rank's" in line[0] and "--shm-size" in line[0], r.stdout
    assert "No space left on device" in line[0], line[0]
    # Over --checkpoint_memory_limit (and its PET_ form).
    for flags, env in ((["--checkpoint_memory_limit=4M"], {}),
                       ([], {"PET_CHECKPOINT_MEMORY_LIMIT": "4m"})):
        r = run(["--standalone", "--nproc_per_node=1", *flags, script(SAVE_BIG), str(8 << 20)],
                env=env)
        assert r.returncode == 1, r.stderr
        limit = [x for x in r.stdout.splitlines() if x.startswith("ERROR")]
        assert limit and "over the node's checkpoint budget of 4194304 bytes" in limit[0], \
            r.stdout
    r = run(["--standalone", "--nproc_per_node=1", "--checkpoint_memory_limit=64M",
             script(SAVE_BIG), str(8 << 20)])
    assert r.returncode == 0 and "SAVED" in r.stdout, r.stderr
    r = run(["--standalone", "--nproc_per_node=1", "--checkpoint_memory_limit=4X", "x.py"])
    assert r.returncode == 2 and "is not a size" in r.stderr, r.stderr
    print(f"a 2 MiB /dev/shm: '{line[0][6:90]}...'; over --checkpoint_memory_limit: "
          f"'{limit[0][6:90]}...': passed")


HOLD = r'''
import os, sys, time, torch
from ddprun import checkpoint
out, how = sys.argv[1], sys.argv[2]
checkpoint.save(0, {"w": torch.ones(1 << 20)})
# Whole or not at all: the test reads it as soon as it exists.
with open(os.path.join(out, f"dir.{os.environ['RANK']}"), "w") as f:
    f.write(os.environ["DDPRUN_CHECKPOINT_DIR"])
os.replace(os.path.join(out, f"dir.{os.environ['RANK']}"), os.path.join(out, "dir"))
if how == "fail":
    sys.exit(1)
if how == "hold":
    time.sleep(120)
'''


def case_no_region_outlives_its_job():
    """Nor any other folder the agent keeps in memory (the workers' heartbeat files and in-process
    restart channels here): in a folder of the test's own (DDPRUN_SHM_DIR), nothing is left."""
    outcomes = []
    shm = tempfile.mkdtemp(dir="/dev/shm")
    for how in ("succeed", "fail", "sigterm", "sigkill"):
        out = tempfile.mkdtemp()
        log = open(os.path.join(out, "ddprun.log"), "w")
        p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=2", "--metrics_port=0",
                              "--hang_timeout=600", "--restart_mode=in_process", script(HOLD), out,
                              "hold" if how.startswith("sig") else how],
                             stdout=subprocess.DEVNULL, stderr=log, text=True,
                             env={**os.environ, "PYTHON_EXEC": PY, "DDPRUN_SHM_DIR": shm})
        marker = os.path.join(out, "dir")
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), open(log.name).read()
        folder = open(marker).read()
        if how.startswith("sig"):
            assert os.listdir(folder), folder  # the regions are there while the job runs
            made = sorted(name.rsplit("-", 1)[0] for name in os.listdir(shm))
            assert made == sorted(["ddprun-heartbeats", "ddprun-inprocess", os.path.basename(
                folder).rsplit("-", 1)[0]]), made
            # Both ranks saved step 0 (one of them has, at least, by now: wait for the other).
            port = int(re.search(r"metrics at http://[^ ]+:(\d+)/metrics",
                                 open(log.name).read()).group(1))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                samples = metrics(port)
                if all(samples.get(f'ddprun_checkpoint_step{{local_rank="{r}"}}') == 0
                       for r in (0, 1)):
                    break
                time.sleep(0.05)
            assert samples['ddprun_checkpoint_step{local_rank="1"}'] == 0, samples
            assert samples["ddprun_checkpoint_bytes"] >= 2 * (4 << 20), samples
            p.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        p.wait(timeout=60)
        log.close()
        deadline = time.monotonic() + 10  # after a SIGKILL the guardian removes them
        while os.listdir(shm) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.listdir(shm), (how, os.listdir(shm))
        assert not left_running(out), (how, left_running(out))
        outcomes.append(f"{how}: exit {p.returncode}")
    os.rmdir(shm)
    leftover = glob.glob("/dev/shm/ddprun-*")
    print(f"the metrics give each rank's newest step and the bytes held; the checkpoint, "
          f"heartbeat and in-process folders are gone after every ending "
          f"({', '.join(outcomes)}); {len(leftover)} other job(s)' folders in /dev/shm: passed")


def descendants(pid):
    """`pid` and every process below it."""
    children = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{p}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(p))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def owner_line(pid, ticks=None, ns_offset=0):
    """An .owner file's line for process `pid` (its own start time unless `ticks` is given)."""
    if ticks is None:
        with open(f"/proc/{pid}/stat") as f:
            ticks = f.read().rsplit(")", 1)[1].split()[19]
    return f"{pid} {ticks} {os.stat('/proc/self/ns/pid').st_ino + ns_offset}\n"


def case_a_folder_left_by_a_killed_agent_and_guardian_is_removed_by_the_next_job():
    out, shm = tempfile.mkdtemp(), tempfile.mkdtemp(dir="/dev/shm")
    try:
        env = {**os.environ, "PYTHON_EXEC": PY, "DDPRUN_SHM_DIR": shm}
        # (With the agent's other folders in memory: the workers' heartbeat files and in-process
        # restart channels.)
        p = subprocess.Popen([DDPRUN, "--standalone", "--nproc_per_node=1", "--hang_timeout=600",
                              "--restart_mode=in_process", script(HOLD), out, "hold"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        marker = os.path.join(out, "dir")
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(marker), p.stderr.read() if p.poll() is not None else "no save"
        folder = open(marker).read()
        # The agent, its guardian and the worker SIGKILLed together, as a batch system kills a step:
        # all stopped first, so that none sees another die.
        tree = descendants(p.pid)
        assert len(tree) >= 3, tree
        for pid in tree:
            os.kill(pid, signal.SIGSTOP)
        # The agent last: once it is dead, the guardian's process group is orphaned, and the kernel
        # sends a stopped member of such a group SIGCONT, which would let the guardian act first.
        for pid in [*[x for x in tree if x != p.pid], p.pid]:
            os.kill(pid, signal.SIGKILL)
        p.wait(timeout=30)
        assert not left_running(out)
        assert os.path.exists(os.path.join(folder, "rank0")), folder  # nobody left to remove it
        left = [os.path.join(shm, name) for name in os.listdir(shm)]
        others = {kind: [f for f in left if os.path.basename(f).startswith(f"ddprun-{kind}-")]
                  for kind in ("heartbeats", "inprocess")}
        assert all(len(f) == 1 for f in others.values()), left
        # Folders the next agent must leave alone: another pid namespace's (a container sharing
        # /dev/shm), a running agent's (this test stands in for it), one without an owner file, and
        # (as root) another user's whose agent is gone, which it reports.
        kept = {}
        for name, owner in (("other-ns", owner_line(p.pid, ticks=1, ns_offset=1)),  # dead there
                            ("running", owner_line(os.getpid())), ("unowned", None),
                            ("other-user", owner_line(p.pid, ticks=1))):
            if name == "other-user" and os.geteuid() != 0:
                continue
            kept[name] = os.path.join(shm, f"ddprun-checkpoints-{name}-XXXXXX")
            os.makedirs(kept[name])
            if owner:
                with open(os.path.join(kept[name], ".owner"), "w") as f:
                    f.write(owner)
            if name == "other-user":
                os.chown(kept[name], 12345, 12345)
        # An empty one without an owner file, unchanged for two minutes (an agent killed between
        # making it and writing the owner file): removed. (The one just made above may be an
        # agent's about to.)
        unowned_old = os.path.join(shm, "ddprun-checkpoints-unowned-old-XXXXXX")
        os.makedirs(unowned_old)
        os.utime(unowned_old, (time.time() - 120, time.time() - 120))
        r = subprocess.run([DDPRUN, "--standalone", "--nproc_per_node=1", script(HOLD), out,
                            "succeed"], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert f"removed {folder}: the checkpoint folder of an agent no longer running" in \
            r.stderr, r.stderr
        assert not os.path.exists(folder), os.listdir(folder)
        for kind, what in (("heartbeats", "heartbeat folder"), ("inprocess", "in-process restart "
                                                                             "folder")):
            gone = others[kind][0]
            assert f"removed {gone}: the {what} of an agent no longer running" in r.stderr, r.stderr
            assert not os.path.exists(gone), gone
        assert not os.path.exists(unowned_old), unowned_old
        assert f"removed {unowned_old}: an empty checkpoint folder without an owner" in r.stderr, \
            r.stderr
        assert all(os.path.exists(k) for k in kept.values()), os.listdir(shm)
        if "other-user" in kept:
            assert f"{kept['other-user']}: the checkpoint folder of an agent no longer running, " \
                "of another user (uid 12345)" in r.stderr, r.stderr
            assert r.stderr.count("of another user") == 1, r.stderr
        assert sorted(os.listdir(shm)) == sorted(os.path.basename(k) for k in kept.values()), \
            os.listdir(shm)  # and the second job's own folder went with it
        assert not left_running(out)
    finally:  # (whatever failed: nothing of the test stays in /dev/shm)
        shutil.rmtree(shm, ignore_errors=True)
    print("agent, guardian and worker SIGKILLed together: the checkpoint folder, the heartbeat "
          "and in-process folders stayed, and the next job's agent removed them and an empty "
          "unowned folder two minutes old, leaving another pid namespace's, a running agent's, a "
          "fresh unowned folder and another user's (reported) alone: passed")


OUTSIDE = r'''
import warnings, torch
from ddprun import checkpoint
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    checkpoint.save(1, {"w": torch.ones(3)})
    checkpoint.save(2, {"w": torch.ones(3)})
print(len(w), str(w[0].message) if w else "", checkpoint.load())
'''


def case_outside_ddprun_save_warns_once_and_load_finds_nothing():
    package = tempfile.mkdtemp()
    src = os.path.join(HERE, "..", "..", "python", "ddprun")
    os.makedirs(os.path.join(package, "ddprun"))
    for name in ("checkpoint.py", "heartbeat.py"):
        with open(os.path.join(src, name)) as f, \
                open(os.path.join(package, "ddprun", name), "w") as g:
            g.write(f.read())
    open(os.path.join(package, "ddprun", "__init__.py"), "w").close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DDPRUN_")}
    r = subprocess.run([PY, script(OUTSIDE)], capture_output=True, text=True, timeout=120,
                       env={**env, "PYTHONPATH": package})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1 ddprun.checkpoint.save: not started by ddprun: nothing is " \
                               "saved (None, None)", r.stdout
    print("outside ddprun: save() warns once and keeps nothing, load() gives (None, None): passed")


def case_train_cpu_resumes_after_a_killed_rank():
    """The C++ API (ddp/checkpoint.hpp) in libddp's train_cpu example."""
    train = sys.argv[3]
    marker = f"checkpoint-test-{os.getpid()}"  # an argument train_cpu ignores, to find its processes
    whole = run(["--standalone", "--nproc_per_node=2", "--no_python", train, "150", marker])
    assert whole.returncode == 0, whole.stderr
    killed = run(["--standalone", "--nproc_per_node=2", "--max_restarts=1", "--no_python", train,
                  "150", marker], env={"KILL_AT": "1:60"})
    assert killed.returncode == 0, killed.stderr
    # Rank 1 died just after saving step 60; rank 0 may be there too or one step behind.
    assert re.search(r"resumed from step (59|60)\n", killed.stdout), killed.stdout
    assert "exit code -9" in killed.stderr or "signal 9" in killed.stderr or \
        "SIGKILL" in killed.stderr, killed.stderr
    last = [line for line in whole.stdout.splitlines() if line.startswith("step  149")]
    assert last and last[0] in killed.stdout, (whole.stdout, killed.stdout)
    assert not left_running(marker)
    resumed = re.search(r"resumed from step (\d+)", killed.stdout).group(1)
    print(f"train_cpu with rank 1 SIGKILLed after step 60 resumed from step {resumed} and ended "
          f"as an uninterrupted run ({last[0].strip()}): passed")


def main():
    global DDPRUN
    DDPRUN = sys.argv[1]
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
