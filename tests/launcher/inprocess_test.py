"""--restart_mode=in_process: a failure replaces only the failed rank's process; every other rank
runs its training again in its own process (ddprun.inprocess.run), and the job ends bit-identical to
an uninterrupted one. Real ddprun, real torch DDP over gloo on the CPU, a deterministic job that
saves an in-memory checkpoint every step (workloads/inprocess_ddp.py).

    inprocess_test.py DDPRUN CASE [DDPRUND]    (CASE: one of the functions named case_*; DDPRUND
                                                for the case of a lost node)
"""
import datetime
import glob
import os
import re
import subprocess
import sys
import tempfile

import rank_state_test
from job_logs import node_events
from proc_util import agents_ended, free_port, left_running, wait_for

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "inprocess_ddp.py")
STEPS = 12


def command(out, *flags, steps=STEPS):
    return [DDPRUN, "--nproc_per_node=2", "--max_restarts=3", *flags, WORKLOAD, str(steps), out]


def environment(**extra):
    return {**os.environ, "PYTHON_EXEC": PY, **extra}


def job(*flags, steps=STEPS, **env):
    out = tempfile.mkdtemp()
    r = subprocess.run(command(out, *flags, steps=steps), capture_output=True, text=True,
                       timeout=240, env=environment(**env))
    assert r.returncode == 0, (r.returncode, r.stderr[-5000:])
    assert not left_running(out), f"workers left running: {left_running(out)}"
    return out, r.stderr


def pids(out):
    """{(restart count, rank): pid} of every training begun."""
    found = {}
    for name in os.listdir(out):
        if name.startswith("pid."):
            _, attempt, rank = name.split(".")
            with open(os.path.join(out, name)) as f:
                found[(int(attempt), int(rank))] = int(f.read())
    return found


def same_parameters(a, b):
    code = ("import sys, torch; a, b = (torch.load(p) for p in sys.argv[1:]); "
            "sys.exit(0 if len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b)) else 1)")
    return subprocess.run([PY, "-c", code, os.path.join(a, "final.pt"), os.path.join(b, "final.pt")],
                          timeout=120).returncode == 0


def uninterrupted(*flags):
    out, _ = job("--restart_mode=in_process", *flags)
    assert set(pids(out)) == {(0, 0), (0, 1)}, pids(out)
    return out


def case_a_killed_rank_is_replaced_and_the_other_keeps_its_process_bit_identical():
    reference = uninterrupted()
    out, err = job("--restart_mode=in_process", FAULT="kill:1:5")
    p = pids(out)
    assert set(p) == {(0, 0), (0, 1), (1, 0), (1, 1)}, p
    assert p[(1, 0)] == p[(0, 0)], f"rank 0 was not kept: {p}"
    assert p[(1, 1)] != p[(0, 1)], f"rank 1 was not replaced: {p}"
    assert "local rank 0 (rank 0, pid %d) runs again in its own process" % p[(0, 0)] in err, err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 SIGKILLed at step 5: rank 0 kept pid {p[(0, 0)]}, rank 1 replaced "
          f"({p[(0, 1)]} -> {p[(1, 1)]}), final parameters bit-identical: passed")


def case_a_killed_rank_is_taken_over_by_a_standby_warmed_before_it():
    """--standby_workers=1: the standby runs the script without a rank up to inprocess.run(),
    warming up there; the killed rank's place goes to it, not to a new process."""
    reference = uninterrupted()
    out, err = job("--restart_mode=in_process", "--standby_workers=1", FAULT="kill:1:5",
                   WAIT_STANDBY="1")
    p = pids(out)
    warmed = {int(name.split(".")[1]): open(os.path.join(out, name)).read()
              for name in os.listdir(out) if name.startswith("warmed.")}
    assert set(p) == {(0, 0), (0, 1), (1, 0), (1, 1)}, p
    assert p[(1, 0)] == p[(0, 0)], f"rank 0 was not kept: {p}"
    assert p[(1, 1)] in warmed, f"rank 1 was not taken over by a standby: {p}, standbys {warmed}"
    assert warmed[p[(1, 1)]] == "", f"the standby had rank variables: {warmed[p[(1, 1)]]}"
    assert p[(0, 0)] not in warmed and p[(0, 1)] not in warmed, "a worker ran the warm-up"
    assert f"local rank 1 (rank 1) runs in standby process {p[(1, 1)]}" in err, err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 SIGKILLed at step 5 with a standby warmed (pid {p[(1, 1)]}, no rank variables "
          f"while it waited): rank 1 ran on in it, rank 0 kept pid {p[(0, 0)]}, standbys started "
          f"{len(warmed)}, none left, bit-identical: passed")


def case_a_rank_whose_training_raises_keeps_its_process_too():
    """A RuntimeError of the training's own (not a collective's: no peer failed) is this rank's
    failure at once; only a collective's error waits for the abort a peer's failure brings."""
    reference = uninterrupted()
    out, err = job("--restart_mode=in_process", FAULT="raise:1:5")
    p = pids(out)
    assert p[(1, 0)] == p[(0, 0)] and p[(1, 1)] == p[(0, 1)], f"a process was replaced: {p}"
    said = re.search(r"^\[([0-9-]+ [0-9:.]+)\] .*failed: its training raised RuntimeError: rank 1 "
                     r"fails at step 5$", err, re.M)
    assert said, err
    with open(os.path.join(out, "raised_at")) as f:
        raised_at = float(f.read())
    reported = datetime.datetime.strptime(said[1], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    # (a wait for an abort, 2 s, would come first)
    assert reported - raised_at < 1.9, f"reported {reported - raised_at:.2f} s after the raise"
    assert "restarting the workers (restart 1 of at most 3)" in err, err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 raised a RuntimeError at step 5, reported {reported - raised_at:.2f} s later: "
          f"both ranks kept their processes ({p[(0, 0)]}, {p[(0, 1)]}), a restart spent, final "
          f"parameters bit-identical: passed")


def case_a_training_that_raises_in_every_attempt_is_a_crash_loop():
    out = tempfile.mkdtemp()
    r = subprocess.run(command(out, "--restart_mode=in_process", "--max_restarts=10"),
                       capture_output=True, text=True, timeout=240, env=environment(RAISE_EVERY="1"))
    assert r.returncode == 5, (r.returncode, r.stderr[-5000:])
    assert not left_running(out), f"workers left running: {left_running(out)}"
    p = pids(out)
    assert len({p[(a, 1)] for a in range(3)}) == 1, f"rank 1 was not kept: {p}"
    line = [l for l in r.stderr.splitlines() if "[error] crash loop:" in l]
    assert len(line) == 1 and "ValueError: rank 1 fails at step 1" in line[0], r.stderr
    assert "Root Cause" in r.stderr and "ValueError: rank 1 fails at step 1" in r.stderr
    print(f"rank 1's training raised at step 1 in every attempt (each resuming step 0), in its one "
          f"process: a crash loop after 3 attempts, exit 5 "
          f"('{line[0].split('[error] ', 1)[1][:120]}...'): passed")


def case_a_failure_before_any_step_was_saved_starts_every_rank_in_a_new_process():
    """Rank 1 raises at step 0, after the optimizer's step and before saving it: no step is
    held by every rank, so nothing is restored, and a process kept would train on from its aborted
    attempt's weights and optimizer state. Every rank starts in a new process instead, with a line
    saying why, and the job ends bit-identical to an uninterrupted one."""
    reference = uninterrupted()
    out, err = job("--restart_mode=in_process", FAULT="unsaved:1:0")
    p = pids(out)
    assert set(p) == {(0, 0), (0, 1), (1, 0), (1, 1)}, p
    assert p[(1, 0)] != p[(0, 0)] and p[(1, 1)] != p[(0, 1)], f"a process was kept: {p}"
    assert "no checkpoint step to restore, so every rank starts in a new process" in err, err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 raised at step 0 before any step was saved: both ranks started in new processes "
          f"({p[(0, 0)]} -> {p[(1, 0)]}, {p[(0, 1)]} -> {p[(1, 1)]}), final parameters "
          f"bit-identical: passed")


def case_a_hung_rank_is_replaced_and_the_rank_waiting_for_it_keeps_its_process():
    reference = uninterrupted("--hang_timeout=3")
    out, err = job("--restart_mode=in_process", "--hang_timeout=3", FAULT="hang:1:5")
    p = pids(out)
    assert p[(1, 0)] == p[(0, 0)], f"rank 0, which only waited, was not kept: {p}"
    assert p[(1, 1)] != p[(0, 1)], f"the hung rank 1 was not replaced: {p}"
    assert "rank 1: inprocess_ddp.py" in err and "in fault" in err, err  # its stack was taken
    # Rank 0 only waited: its stack, written before it aborted, says where (DDP's backward).
    waited = re.search(r"rank 0: (\S+\.py:\d+ in [^\s;]+)", err)
    assert waited and waited_in_torch(waited.group(1)), err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 hung (alive, silent) at step 5: declared hung, its stack taken, replaced; rank 0 "
          f"kept pid {p[(0, 0)]}, waiting at {waited.group(1)}; final parameters bit-identical: "
          f"passed")


def case_a_hung_rank_is_taken_over_by_a_standby_and_the_rank_waiting_keeps_its_process():
    """A hang with --standby_workers=1: the hung rank's place goes to the warmed standby, not to a
    new process; the rank that only waited runs again in its own."""
    reference = uninterrupted("--hang_timeout=3")
    out, err = job("--restart_mode=in_process", "--hang_timeout=3", "--standby_workers=1",
                   FAULT="hang:1:5", WAIT_STANDBY="1")
    p = pids(out)
    warmed = {int(name.split(".")[1]) for name in os.listdir(out) if name.startswith("warmed.")}
    assert set(p) == {(0, 0), (0, 1), (1, 0), (1, 1)}, p
    assert p[(1, 0)] == p[(0, 0)], f"rank 0, which only waited, was not kept: {p}"
    assert p[(1, 1)] in warmed, \
        f"the hung rank 1 was not taken over by a standby: {p}, {warmed}: {err[-5000:]}"
    assert "is hung" in err and f"local rank 1 (rank 1) runs in standby process {p[(1, 1)]}" in err, \
        err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"rank 1 hung at step 5 with a standby warmed: declared hung, rank 1 ran on in the standby "
          f"(pid {p[(1, 1)]}), rank 0 kept pid {p[(0, 0)]}; final parameters bit-identical: passed")


def two_nodes(out, run_id, *flags, **env):
    """Two agents of two ranks each on this host (c10d), run to their end: their stderr."""
    port = free_port()
    agents = {
        node: subprocess.Popen(
            [DDPRUN, "--nnodes=2", "--nproc_per_node=2", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", f"--rdzv_id={run_id}", "--max_restarts=3",
             *flags, WORKLOAD, str(STEPS), out],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            env=environment(**env))
        for node in (0, 1)
    }
    errs = agents_ended(agents, {0: 0, 1: 0}, timeout=240)
    assert not left_running(out), f"workers left running: {left_running(out)}"
    return errs


def case_on_two_nodes_every_rank_but_the_killed_one_keeps_its_process():
    out = tempfile.mkdtemp()
    errs = two_nodes(out, "inprocess", "--restart_mode=in_process", FAULT="kill:1:5")
    p = pids(out)
    assert set(p) == {(a, r) for a in (0, 1) for r in range(4)}, p
    kept = [r for r in range(4) if p[(1, r)] == p[(0, r)]]
    assert kept == [0, 2, 3], f"ranks kept: {kept} (expected every rank but 1): {p}"
    # The other node heard of the failure from the failed rank's node at once, not once that
    # node's round ended: its ranks, whose collectives failed with rank 1, did not count it as
    # their own.
    told = [e for e in errs.values() if "stopping this node's workers: a worker of node" in e]
    assert len(told) == 1 and "its training raised" not in told[0], errs
    # Four ranks sum their gradients in another order than two: compare with a 4-rank run.
    reference = tempfile.mkdtemp()
    two_nodes(reference, "reference")
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print("2 nodes x 2 ranks, rank 1 SIGKILLed at step 5: ranks 0, 2, 3 kept their processes "
          "(the other node's too), rank 1 replaced; final parameters bit-identical: passed")


def waited_in_torch(frame):
    """Whether a rank that waited for the hung one is placed in DDP's backward pass (autograd's
    graph.py or __init__.py), not in the code that handled its abort."""
    return re.fullmatch(r"(graph|__init__)\.py:\d+ in (_engine_run_backward|backward)",
                        frame) is not None


def frames_said(err):
    """{rank: frame} from the agent's line "hang: every rank's innermost frame: ranks 0, 2-3: X;
    rank 1: Y" (the last such line)."""
    lines = re.findall(r"hang: every rank's innermost frame: (.*)", err)
    frames = {}
    for group in (lines[-1].split("; ") if lines else []):
        ranks, _, frame = group.partition(": ")
        for part in ranks.split(" ", 1)[1].split(", "):
            first, _, last = part.partition("-")
            for rank in range(int(first), int(last or first) + 1):
                frames[rank] = frame
    return frames


def case_on_two_nodes_a_hang_reports_where_every_rank_waited():
    """Rank 1 hangs at step 5: every other rank, on its node and on the other, aborts in process
    after writing its stack; both nodes' reports give every rank's frame."""
    out = tempfile.mkdtemp()
    errs = two_nodes(out, "inprocess-hang", "--restart_mode=in_process", "--hang_timeout=3",
                     FAULT="hang:1:5")
    p = pids(out)
    kept = [r for r in range(4) if p.get((1, r)) == p[(0, r)]]
    assert kept == [0, 2, 3], f"ranks kept: {kept} (expected every rank but 1): {p}"
    for node, err in errs.items():
        # Every rank's frame, from both nodes: the hung one's, and where the three others waited.
        frames = frames_said(err)
        assert set(frames) == {0, 1, 2, 3}, (node, frames, err[-3000:])
        assert frames[1].endswith(" in fault"), (node, frames)
        assert all(waited_in_torch(frames[r]) for r in (0, 2, 3)), (node, frames)
    reference = tempfile.mkdtemp()
    two_nodes(reference, "inprocess-hang-reference")
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"2 nodes x 2 ranks, rank 1 hung at step 5: ranks 0, 2, 3 kept their processes; both "
          f"nodes give every rank's frame ({frames}); bit-identical: passed")


def two_nodes_losing_one(cluster, run_id, out, k):
    """Starts hosts 0 and 1 in process, 2 ranks each; returns once node rank 1's ranks hold after
    step k (to be killed with their node)."""
    for i in (0, 1):
        cluster.start(run_id, i, out, "2:2", steps=STEPS, env={"LOSE_AT": str(k)},
                      extra=["--restart_mode=in_process"])
    wait_for(lambda: len(glob.glob(f"{out}/held.*")) == 2, f"node rank 1's ranks at step {k}", 180)


def begun_twice(out):
    """{rank: [pid of each training begun]} of a 2-node job's 4 ranks, each begun twice."""
    begun = {}
    for rank in range(4):
        with open(os.path.join(out, f"begun.{rank}")) as f:
            begun[rank] = [int(pid) for pid in f.read().split()]
    assert all(len(b) == 2 for b in begun.values()), begun
    return begun


def restored_on_host_2_bit_identical(cluster, out, k):
    """Host 2 (the new node) restored step k, and the job's parameters are those of an
    uninterrupted job of 2 nodes."""
    restore = node_events(out, 2, "checkpoint_restore")
    assert restore and restore[-1]["step"] == k, restore
    reference = tempfile.mkdtemp()
    for i in (0, 1):
        cluster.start("reference", i, reference, "2:2", steps=STEPS)
    cluster.finish("reference", [0, 1])
    assert same_parameters(reference, out), "the restarted job's parameters differ"


def case_a_lost_nodes_ranks_are_replaced_and_the_other_nodes_keep_their_processes():
    """2 nodes x 2 ranks, each node in a network namespace of its own (rank_state_test's cluster):
    node rank 1 (its agent and workers) SIGKILLed once its step K is on its peer, a node started in
    its place. Ranks 0 and 1 run their training again in their own processes; 2 and 3 start on the
    new node from the peer's copies; the job ends bit-identical to an uninterrupted one."""
    rank_state_test.DDPRUN, rank_state_test.DDPRUND = DDPRUN, DDPRUND
    k, in_process = 5, ["--restart_mode=in_process"]
    with rank_state_test.Cluster(WORKLOAD) as cluster:
        out = tempfile.mkdtemp()
        two_nodes_losing_one(cluster, "lost", out, k)
        wait_for(lambda: len(cluster.copies_of_step("lost", k)) >= 4,
                 f"step {k} copied to each peer", 60)
        victim = next(i for i in (0, 1) if rank_state_test.node_rank_of(out, i) == 1)
        cluster.kill("lost", victim)
        cluster.start("lost", 2, out, "2:2", steps=STEPS, extra=in_process)
        cluster.finish("lost", [1 - victim, 2])
        assert not left_running(out), f"workers left running: {left_running(out)}"
        begun = begun_twice(out)
        kept = [r for r in range(4) if begun[r][0] == begun[r][1]]
        assert kept == [0, 1], f"ranks kept: {kept} (expected the surviving node's 0 and 1): {begun}"
        # The survivors' training was aborted for the lost node, not counted as raising.
        raised = node_events(out, 1 - victim, "worker_raised")
        assert not raised, raised
        restored_on_host_2_bit_identical(cluster, out, k)
    print(f"2 nodes x 2 ranks, node rank 1 SIGKILLed with its workers after step {k} and replaced: "
          f"ranks 0 and 1 ran again in their processes, 2 and 3 restored step {k} from the peer's "
          f"copies on the new node; final parameters bit-identical: passed")


def warmed_standbys(out):
    """{pid: the rank variables it had} of every standby that warmed up."""
    found = {}
    for name in os.listdir(out):
        if name.startswith("warmed."):
            with open(os.path.join(out, name)) as f:
                found[int(name.split(".")[1])] = f.read()
    return found


def case_a_spare_nodes_standbys_take_a_lost_nodes_ranks():
    """As the case above, with the node that takes the lost one's place waiting as a spare
    (--nnodes=2:2, a third node) with --standby_workers=2: while it waits, its two standbys run the
    script without a rank up to inprocess.run() and warm up there; the lost node's ranks 2 and 3
    go to them, not to new processes; the job ends bit-identical to an uninterrupted one."""
    rank_state_test.DDPRUN, rank_state_test.DDPRUND = DDPRUN, DDPRUND
    k, in_process = 5, ["--restart_mode=in_process"]
    with rank_state_test.Cluster(WORKLOAD) as cluster:
        out = tempfile.mkdtemp()
        two_nodes_losing_one(cluster, "spare", out, k)
        cluster.start("spare", 2, out, "2:2", steps=STEPS,
                      extra=[*in_process, "--standby_workers=2"])
        ready = f"{cluster.shm}/host2/ddprun-inprocess-*/standby.*.ready"  # (waiting in run())
        wait_for(lambda: len(glob.glob(ready)) == 2, "the spare's two standbys ready", 120)
        warmed = warmed_standbys(out)
        assert all(v == "" for v in warmed.values()), f"a standby had rank variables: {warmed}"
        wait_for(lambda: len(cluster.copies_of_step("spare", k)) >= 4,
                 f"step {k} copied to each peer", 60)
        victim = next(i for i in (0, 1) if rank_state_test.node_rank_of(out, i) == 1)
        cluster.kill("spare", victim)
        cluster.finish("spare", [1 - victim, 2])
        assert not left_running(out), f"workers left running: {left_running(out)}"
        begun = begun_twice(out)
        assert begun[0][0] == begun[0][1] and begun[1][0] == begun[1][1], f"not kept: {begun}"
        assert {begun[2][1], begun[3][1]} == set(warmed), \
            f"ranks 2 and 3 did not run in the spare's standbys {sorted(warmed)}: {begun}"
        adopted = node_events(out, 2, "standby_adopted")
        assert sorted(e["rank"] for e in adopted) == [2, 3], adopted
        restored_on_host_2_bit_identical(cluster, out, k)
    print(f"2 nodes x 2 ranks and a spare with 2 standbys warmed while it waited (pids "
          f"{sorted(warmed)}): node rank 1 SIGKILLed after step {k}; ranks 2 and 3 ran on in the "
          f"standbys from the peer's copies, 0 and 1 in their own processes; bit-identical: passed")


def case_an_fsdp2_job_sharded_again_in_its_processes_resumes_bit_identical():
    workload = os.path.join(os.path.dirname(WORKLOAD), "checkpoint_fsdp.py")
    outs = []
    for kill in ("", "1:5"):
        out = tempfile.mkdtemp()
        r = subprocess.run([DDPRUN, "--nproc_per_node=2", "--max_restarts=3",
                            "--restart_mode=in_process", workload, str(STEPS), out],
                           capture_output=True, text=True, timeout=240,
                           env=environment(INPROCESS="1", KILL_AT=kill))
        assert r.returncode == 0, (r.returncode, r.stderr[-5000:])
        assert not left_running(out), f"workers left running: {left_running(out)}"
        outs.append(out)
    p = pids(outs[1])
    assert p[(1, 0)] == p[(0, 0)] and p[(1, 1)] != p[(0, 1)], p
    code = ("import sys, torch\n"
            "def same(a, b):\n"
            "    if isinstance(a, dict): return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)\n"
            "    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(map(same, a, b))\n"
            "    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b\n"
            "sys.exit(0 if same(*(torch.load(p) for p in sys.argv[1:])) else 1)")
    finals = [os.path.join(out, "final.pt") for out in outs]
    assert subprocess.run([PY, "-c", code, *finals], timeout=120).returncode == 0, \
        "the restarted job's parameters or optimizer state differ"
    print(f"FSDP2 (fully_shard, DCP into memory), rank 1 SIGKILLed at step 5: rank 0 kept pid "
          f"{p[(0, 0)]} and sharded its model again in it; full parameters and Adam state "
          f"bit-identical: passed")


def case_a_script_without_the_api_restarts_its_processes_and_says_so():
    reference = uninterrupted()
    out, err = job("--restart_mode=in_process", FAULT="kill:1:5", NO_API="1")
    p = pids(out)
    assert p[(1, 0)] != p[(0, 0)] and p[(1, 1)] != p[(0, 1)], f"a process was kept: {p}"
    lines = [l for l in err.splitlines() if "does not run its training under ddprun.inprocess" in l]
    assert len(lines) == 1, err
    assert same_parameters(reference, out), "the restarted job's parameters differ"
    print(f"a script calling its training directly: both processes restarted, one line "
          f"('{lines[0].split('] ', 2)[-1]}'), bit-identical: passed")


def case_twenty_restarts_keep_a_survivors_memory_threads_and_descriptors_bounded():
    out, err = job("--restart_mode=in_process", "--max_restarts=20", "--preload=auto",
                   steps=30, FAULT_EVERY="20")
    p = pids(out)
    assert len({p[(a, 0)] for a in range(21)}) == 1, f"rank 0 was not kept throughout: {p}"
    assert len({p[(a, 1)] for a in range(21)}) == 21, f"rank 1 was not replaced each time: {p}"
    use = {}
    for a in range(21):
        with open(os.path.join(out, f"use.{a}.0")) as f:
            use[a] = tuple(map(int, f.read().split()))
    # Attempt 0 began before anything was trained (no optimizer state, no DDP buckets): the first
    # restart is the baseline.
    (rss1, threads1, fds1), (rss20, threads20, fds20) = use[1], use[20]
    assert threads20 <= threads1 + 1, use
    assert fds20 <= fds1 + 2, use
    assert rss20 <= rss1 + 32 * 1024, use
    print(f"20 in-process restarts in a row (rank 1 SIGKILLed in each): rank 0 kept one process; "
          f"from the 1st to the 20th: resident {rss1 // 1024} -> {rss20 // 1024} MiB, threads "
          f"{threads1} -> {threads20}, descriptors {fds1} -> {fds20} (bounds: +32 MiB, +1, +2): "
          f"passed")


def case_bad_restart_modes_are_usage_errors():
    for mode in ("inprocess", "PROCESS"):
        r = subprocess.run([DDPRUN, f"--restart_mode={mode}", "--nproc_per_node=1", "x.py"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (mode, r.returncode, r.stderr)
        assert f"--restart_mode: '{mode}' is not one of process, in_process" in r.stderr, r.stderr
    for flags, said in ((["--standby_workers=1"], "add --restart_mode=in_process"),
                        (["--restart_mode=in_process", "--standby_workers=-1"],
                         "'-1' is not a number from 0 to 64")):
        r = subprocess.run([DDPRUN, *flags, "--nproc_per_node=1", "x.py"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 2 and "--standby_workers: " in r.stderr and said in r.stderr, \
            (flags, r.returncode, r.stderr)
    print("--restart_mode=inprocess / PROCESS, --standby_workers without in_process or below 0: "
          "usage errors naming the choices: passed")


def main():
    global DDPRUN, DDPRUND
    DDPRUN = os.path.abspath(sys.argv[1])
    DDPRUND = os.path.abspath(sys.argv[3]) if len(sys.argv) > 3 else None
    globals()["case_" + sys.argv[2]]()


if __name__ == "__main__":
    main()
