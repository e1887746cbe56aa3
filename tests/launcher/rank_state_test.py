"""A restore gives every rank exactly what that rank saved, after any membership change: jobs whose
state differs by rank, on three nodes of two ranks each, every node in a network namespace of its
own on one bridge (the job's ddprund in a fourth) with a folder of its own for its in-memory
checkpoints (DDPRUN_SHM_DIR), saving every step.

  - FSDP2 (torch 2: fully_shard on CPU over gloo, DCP into memory): the middle node lost and
    replaced, then the node of rank 0 (after the ring changed); a node lost with no replacement
    (the job goes on at 2 nodes, resharded from memory); a third node joining a 2-node job
    (resharded). Each case ends with the full parameters and Adam's state bit-identical to its
    reference (uninterrupted, or for a changed world the same job saving the step with stock
    dcp.save and loading it at the new size with stock FileSystemReader). Their workers start warm (`--preload=auto`).
  - checkpoint.save with rank-dependent state (a tensor, the RNG's state, a data position per rank):
    after the middle or the first node's loss every rank gets its own; after a shrink, the ranks
    that remain get their own.

Skipped (77) where namespaces cannot be made.

    rank_state_test.py DDPRUN DDPRUND CASE    (CASE: one of the functions named case_*)
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

from agents import BridgedJob, rdzv_id
from proc_util import left_running, wait_for
from job_logs import node_events

HERE = os.path.dirname(os.path.abspath(__file__))
FSDP = os.path.join(HERE, "workloads", "checkpoint_fsdp.py")
RANKS = os.path.join(HERE, "workloads", "checkpoint_ranks.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
NET = "10.218.0"
HOSTS = 5
STEPS, K = 10, 4
# The FSDP2 cases' agents import torch once each (a worker's import of torch 2.14 costs ~2 CPU s,
# and these cases start ~20 workers apiece); the plain case keeps every worker's cold start.
WARM = ["--preload=auto"]


class Cluster(BridgedJob):
    """Five host namespaces on a bridge and a head one with the job's ddprund; each host's
    checkpoints in a folder of its own; every agent with the flags `flags`."""

    def __init__(self, workload, flags=()):
        super().__init__("rs", HOSTS, NET, DDPRUN, DDPRUND)
        self.workload, self.flags = workload, list(flags)
        self.shm = tempfile.mkdtemp(prefix=f"rank-state-{os.getpid()}-", dir="/dev/shm")

    def __exit__(self, *exc):
        super().__exit__(*exc)
        shutil.rmtree(self.shm, ignore_errors=True)

    def start(self, run_id, i, out, nnodes, steps=STEPS, env=None, extra=()):
        """Host i's agent of job `run_id` (two workers), with the flags `extra` too."""
        shm = os.path.join(self.shm, f"host{i}")
        os.makedirs(shm, exist_ok=True)
        return self.agent(run_id, i, nnodes=nnodes, nproc=2,
                          extra=["--max_restarts=3", f"--event_log={out}/events.{i}.jsonl",
                                 *self.flags, *extra],
                          command=[self.workload, str(steps), out],
                          env={"PYTHON_EXEC": PY, "DDPRUN_SHM_DIR": shm, **(env or {})})

    def copies_of_step(self, run_id, step):
        """The peer copies of job `run_id`'s `step` every host holds."""
        return glob.glob(f"{self.shm}/host*/ddprun-checkpoints-{rdzv_id(run_id)}-*/peers/"
                         f"*.step{step}.ddpckpt")


def node_rank_of(out, i):
    """Host i's node rank in the first round it was in."""
    return node_events(out, i, "round_formed")[0]["node_rank"]


def same_state(a, b):
    """Whether the two runs' final.pt (full parameters and optimizer state) are equal bit for bit."""
    r = subprocess.run([PY, "-c", """
import sys, torch
def same(x, y):
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return type(x) == type(y) and len(x) == len(y) and all(map(same, x, y))
    return x == y
x, y = torch.load(sys.argv[1]), torch.load(sys.argv[2])
sys.exit(0 if same(x, y) else 1)
""", os.path.join(a, "final.pt"), os.path.join(b, "final.pt")], capture_output=True, text=True,
                       timeout=120)
    return r.returncode == 0


def uninterrupted(cluster, run_id, nodes=3):
    out = tempfile.mkdtemp()
    for i in range(nodes):
        cluster.start(run_id, i, out, f"{nodes}:{nodes}")
    cluster.finish(run_id, range(nodes))
    return out


def hold_every_node_then_lose(cluster, run_id, out, hosts, victim_rank, step, nnodes):
    """Starts `hosts` holding after `step`; once every host's workers hold there and the step is
    on every peer, kills the host whose node rank is `victim_rank`; returns that host."""
    for i in hosts:
        cluster.start(run_id, i, out, nnodes, env={"HOLD_AT": str(step)})
    wait_for(lambda: len(glob.glob(f"{out}/held.{step}.*")) == 2 * len(hosts),
             f"every rank at step {step}", 180)
    wait_for(lambda: len(cluster.copies_of_step(run_id, step)) >= 2 * len(hosts),
             f"step {step} copied to every peer", 60)
    victim = next(i for i in hosts if node_rank_of(out, i) == victim_rank)
    cluster.kill(run_id, victim)
    return victim


def restored_ranks(out, hosts, step):
    """Every host's last restore: the global ranks and where each came from."""
    got = {}
    for i in hosts:
        restore = node_events(out, i, "checkpoint_restore")
        assert restore and restore[-1]["step"] == step, (i, restore)
        for r in restore[-1].get("ranks", []):
            got[r["rank"]] = r["from"]
    return got


def replaced(out, hosts, victim_rank, step):
    """After the node of rank `victim_rank` was lost and replaced and every rank of `hosts`
    resumed from `step`: checks that only the lost node's ranks moved (the replacement took its
    place, every other rank's shard came from its own node); returns the bytes fetched."""
    got = restored_ranks(out, hosts, step)
    assert node_events(out, hosts[-1], "round_formed")[-1]["node_rank"] == victim_rank, \
        node_events(out, hosts[-1], "round_formed")
    moved = sorted(r for r, where in got.items() if where.startswith("node "))
    assert moved == [2 * victim_rank, 2 * victim_rank + 1], got
    resumed = {open(p).read() for p in glob.glob(f"{out}/resumed.*@6")}
    assert resumed == {str(step)}, resumed
    return sum(f["bytes"] for i in hosts for f in node_events(out, i, "checkpoint_fetched")
               if f.get("step", step) == step)


def case_fsdp2_nodes_lost_and_replaced():
    """The middle node lost and replaced, then the node of rank 0 (after the ring changed), against
    an uninterrupted run."""
    with Cluster(FSDP, WARM) as cluster:
        whole = uninterrupted(cluster, "whole")
        K2 = K + 3
        out = tempfile.mkdtemp()
        for i in (0, 1, 2):
            cluster.start("twice", i, out, "3:3", env={"HOLD_AT": f"{K},{K2}"})
        wait_for(lambda: len(glob.glob(f"{out}/held.{K}.*")) == 6, f"every rank at step {K}", 180)
        wait_for(lambda: len(cluster.copies_of_step("twice", K)) >= 6, f"step {K} copied", 60)
        first = next(i for i in (0, 1, 2) if node_rank_of(out, i) == 1)
        cluster.kill("twice", first)
        cluster.start("twice", 3, out, "3:3", env={"HOLD_AT": f"{K2}"})
        wait_for(lambda: len(glob.glob(f"{out}/held.{K2}.*")) == 6, f"every rank at step {K2}", 180)
        moved = replaced(out, [i for i in (0, 1, 2, 3) if i != first], 1, K)
        print(f"FSDP2, 3 nodes x 2 ranks, the middle node lost after step {K} and replaced: its "
              f"two ranks' own shards fetched ({moved} bytes moved), every other rank's from its "
              f"own node: passed")
        wait_for(lambda: len(cluster.copies_of_step("twice", K2)) >= 6, f"step {K2} copied", 60)
        # `ddprun status` says where each node's ranks' state came from at the last restore.
        status = cluster.status("twice")
        assert status.count(f"restored step {K} (") == 3 and "from its own region" in status and \
            "rank 2 from node " in status and "rank 3 from node " in status, status
        # The second loss: the node of rank 0, after the ring changed.
        alive = [i for i in (0, 1, 2, 3) if i != first]
        second = next(i for i in alive
                      if node_events(out, i, "round_formed")[-1]["node_rank"] == 0)
        cluster.kill("twice", second)
        cluster.start("twice", 4, out, "3:3")
        survivors = [*(i for i in alive if i != second), 4]
        cluster.finish("twice", survivors)
        moved = replaced(out, survivors, 0, K2)
        assert same_state(whole, out), "the job resumed twice differs from an uninterrupted run"
        assert not left_running(out) and not left_running(whole)
    print(f"FSDP2, then the node of rank 0 lost after step {K2}, after the ring changed, and "
          f"replaced ({moved} bytes moved); parameters and Adam's state bit-identical to an "
          f"uninterrupted run: passed")


def reference_at(cluster, run_id, before, after):
    """The reference for a changed world: `before` nodes run to step K and save it with stock
    dcp.save; `after` nodes load it with stock FileSystemReader and run on."""
    out, saved = tempfile.mkdtemp(), tempfile.mkdtemp()
    for i in range(before):
        cluster.start(run_id, i, out, f"{before}:{before}", steps=K + 1, env={"REF_SAVE": saved})
    cluster.finish(run_id, range(before))
    out2 = tempfile.mkdtemp()
    for i in range(after):
        cluster.start(run_id + "2", i, out2, f"{after}:{after}", env={"REF_LOAD": saved})
    cluster.finish(run_id + "2", range(after))
    return out2


def case_fsdp2_node_lost_without_replacement_reshards():
    with Cluster(FSDP, WARM) as cluster:
        reference = reference_at(cluster, "ref", 3, 2)
        out = tempfile.mkdtemp()
        victim = hold_every_node_then_lose(cluster, "shrink", out, [0, 1, 2], 1, K, "2:3")
        survivors = [i for i in (0, 1, 2) if i != victim]
        cluster.finish("shrink", survivors)
        for i in survivors:
            restore = node_events(out, i, "checkpoint_restore")[-1]
            assert restore["step"] == K and restore["reshard"] and \
                restore["saved_world_size"] == 6, restore
        resumed = {open(p).read() for p in glob.glob(f"{out}/resumed.*@4")}
        assert resumed == {str(K)}, resumed
        assert same_state(reference, out), "the resharded job differs from stock DCP's"
        assert not left_running(out)
    print(f"FSDP2, 3 nodes x 2 ranks, a node lost after step {K} with no replacement: the job went "
          f"on at 4 ranks from step {K}, resharded from memory, bit-identical to stock dcp.save "
          f"and FileSystemReader: passed")


def case_fsdp2_third_node_joining_reshards():
    with Cluster(FSDP, WARM) as cluster:
        reference = reference_at(cluster, "ref", 2, 3)
        out = tempfile.mkdtemp()
        for i in (0, 1):
            cluster.start("grow", i, out, "2:3", env={"HOLD_AT": f"{K}@4"})
        wait_for(lambda: len(glob.glob(f"{out}/held.{K}.*")) == 4, f"every rank at step {K}", 180)
        wait_for(lambda: len(cluster.copies_of_step("grow", K)) >= 4, f"step {K} copied", 60)
        cluster.start("grow", 2, out, "2:3")
        cluster.finish("grow", [0, 1, 2])
        for i in (0, 1, 2):
            restore = node_events(out, i, "checkpoint_restore")[-1]
            assert restore["step"] == K and restore["reshard"] and \
                restore["saved_world_size"] == 4, restore
        resumed = {open(p).read() for p in glob.glob(f"{out}/resumed.*@6")}
        assert resumed == {str(K)}, resumed
        assert same_state(reference, out), "the grown job differs from stock DCP's"
        assert not left_running(out)
    print(f"FSDP2, 2 nodes x 2 ranks joined by a third after step {K}: every rank resumed from "
          f"step {K}, resharded from memory to 6 ranks, bit-identical to stock DCP: passed")


def plain_checks(out, world):
    """What each rank of the world of `world` ranks found when it last loaded: 'own STEP' where it
    got what it saved."""
    found = {}
    for p in glob.glob(f"{out}/loaded.*@{world}"):
        found[p.rsplit(".", 1)[1].split("@")[0]] = open(p).read()
    return found


def case_plain_state_is_each_ranks_own_after_any_loss():
    with Cluster(RANKS) as cluster:
        for victim_rank in (1, 0):
            out = tempfile.mkdtemp()
            run = f"plain{victim_rank}"
            victim = hold_every_node_then_lose(cluster, run, out, [0, 1, 2], victim_rank, K,
                                               "3:3")
            cluster.start(run, 3, out, "3:3")
            cluster.finish(run, [i for i in (0, 1, 2, 3) if i != victim])
            found = plain_checks(out, 6)
            assert sorted(found) == [str(r) for r in range(6)], found
            assert all(v == f"own {K}" for v in found.values()), found
            assert not left_running(out)
        # A shrink: the 4 ranks that remain get what ranks 0-3 saved.
        out = tempfile.mkdtemp()
        victim = hold_every_node_then_lose(cluster, "plainshrink", out, [0, 1, 2], 2, K, "2:3")
        cluster.finish("plainshrink", [i for i in (0, 1, 2) if i != victim])
        found = plain_checks(out, 4)
        assert sorted(found) == [str(r) for r in range(4)], found
        assert all(v == f"own {K}" for v in found.values()), found
        assert not left_running(out)
    print(f"checkpoint.save of rank-dependent state (a tensor, the RNG, a data position), 3 nodes x "
          f"2 ranks: after the middle node's and the first node's loss every rank got its own "
          f"state of step {K}; after a shrink to 4 ranks, ranks 0-3 got theirs: passed")


def main():
    global DDPRUN, DDPRUND
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    globals()["case_" + sys.argv[3]]()


if __name__ == "__main__":
    main()
