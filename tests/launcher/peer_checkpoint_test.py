"""Checkpoints copied to a peer node: a real DDP job (torch, gloo) on three nodes, each in a network
namespace of its own on one bridge (the job's ddprund in a fourth), saving an in-memory checkpoint
every step; one node (its agent and its workers) is SIGKILLed once its step K is copied to its
peer. A node started in its place resumes from step K with the lost node's copies, fetched from the
peer (never from --checkpoint_dir), and the job ends bit-identical to an uninterrupted run (a
stranger on the job's network, with no token in the job, gets nothing from a checkpoint port
meanwhile); with no replacement the survivors resume from step K at a smaller world size; with
two adjacent nodes lost, the ranks whose both copies went with them come from --checkpoint_dir,
said in one line.
Skipped (77) where namespaces cannot be made.

    peer_checkpoint_test.py DDPRUN DDPRUND CASE    (CASE: one of the functions named case_*)
"""
import glob
import os
import subprocess
import sys
import tempfile

from checkpoint_test import bit_identical
from agents import BridgedJob, rdzv_id
from proc_util import allocated_under, left_running, wait_for
from job_logs import node_events

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "workloads", "checkpoint_ddp.py")
PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
DDPRUN = DDPRUND = None
NET = "10.217.0"
HOSTS = 5
ADDRS = [f"{NET}.{11 + i}" for i in range(HOSTS)]
STEPS, K = 12, 5


# Every agent imports torch once and starts its workers from that (a worker's cold import of torch
# 2.14 costs ~2 CPU s; a case here starts tens of workers): 55 -> 35 CPU s for the replacement
# case. What these cases test is the copies between nodes; cold starts are tested elsewhere.
WARM = ["--preload=auto"]


class Cluster(BridgedJob):
    def __init__(self):
        super().__init__("pc", HOSTS, NET, DDPRUN, DDPRUND)
        self.nproc = 1

    def start(self, run_id, i, out, nnodes, env=None, extra=()):
        return self.agent(run_id, i, nnodes=nnodes, nproc=self.nproc,
                          extra=["--max_restarts=3", f"--event_log={out}/events.{i}.jsonl", *WARM,
                                 *extra],
                          command=[WORKLOAD, str(STEPS), out],
                          env={"PYTHON_EXEC": PY, **(env or {})})


def copies_of_step(run_id, step):
    """The peer copies of `step` held on this machine (every node's folder in /dev/shm)."""
    return glob.glob(f"/dev/shm/ddprun-checkpoints-{rdzv_id(run_id)}-*/peers/*.step{step}.ddpckpt")


def complete_on_disk(disk, ranks):
    return [d for d in os.listdir(disk) if d.startswith("step_") and all(
        os.path.exists(os.path.join(disk, d, f"rank_{r}.ddpckpt")) for r in range(ranks))]


def lose_nodes(cluster, run_id, out, victims, survivors, disk=None, status=None, env=None,
               copies=None, before=lambda: None):
    """Starts the job on victims + survivors, with the victims holding after step K (or each node
    with `env`[node]); once every node's step K is on its peer (`copies`: how many copies of it
    make that, one per node by default; and, with `disk`, a step of every rank is in it), SIGKILLs
    the victims' agents (their workers die with them), just after calling `before`."""
    for i in [*victims, *survivors]:
        cluster.start(run_id, i, out, cluster.nnodes,
                      env=(env or {}).get(i, {"HOLD_AT": str(K)} if i in victims else None),
                      extra=cluster.extra)
    nodes = len(victims) + len(survivors)
    wait_for(lambda: len(glob.glob(f"{out}/held.*")) == len(victims) * cluster.nproc,
             "the victims at step K", 120)
    wait_for(lambda: len(copies_of_step(run_id, K)) >= (copies or nodes),
             f"step {K} copied to every peer", 60)
    if disk:
        wait_for(lambda: complete_on_disk(disk, nodes), "a step of every rank persisted", 60)
    if status is not None:  # what `ddprun status` says of every node's copies meanwhile
        wait_for(lambda: cluster.status(run_id).count(f"safe up to step {K}") == nodes,
                 "every node's copies in ddprun status", 30)
        status.append(cluster.status(run_id))
    before()
    for i in victims:
        cluster.kill(run_id, i)


# A stranger's try at a checkpoint port: the greeting with a proof of zeros (what a job without a
# token accepted once), then a get of each global rank's step K anyway. Prints what came back.
PROBE = """
import os, socket, struct, sys
host, port, step, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
answers, got = [], 0
for rank in range(world):
    try:
        s = socket.create_connection((host, port), timeout=10)
    except OSError as e:
        print("unreachable", e)
        sys.exit(0)
    s.settimeout(10)
    try:
        s.sendall(b"DDPPEER4" + os.urandom(32))
        greeting = s.recv(40)
        s.sendall(bytes(32))
        answers.append(s.recv(33)[:1].hex())
        s.sendall(struct.pack("<7Q", 2, 0, rank, step, world, 0, 1) + b"-")
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += len(chunk)
    except OSError:
        pass
    s.close()
print("answers", " ".join(answers), "bytes after them", got)
"""


def stranger_gets_nothing(cluster, out, survivors):
    """A stranger on the job's network (a host namespace of no node) and on a survivor's own
    loopback tries a survivor's checkpoint port, in a job without a token: refused, no byte of a
    checkpoint, and the port is bound to the node's announced address only."""
    ports = {e["peer"] for i in survivors for e in node_events(out, i, "checkpoint_replicated")
             if e["peer"].rsplit(":", 1)[0] in {ADDRS[j] for j in survivors}}
    assert ports, [node_events(out, i, "checkpoint_replicated") for i in survivors]
    host, port = next(iter(ports)).rsplit(":", 1)
    owner = cluster.hosts[ADDRS.index(host)]
    for ns, addr in ((cluster.hosts[HOSTS - 1], host), (owner, "127.0.0.1")):
        r = subprocess.run(["ip", "netns", "exec", ns, PY, "-c", PROBE, addr, port, str(K), "3"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        if addr == "127.0.0.1":
            assert r.stdout.startswith("unreachable"), r.stdout  # not on every address
        else:
            assert r.stdout.strip() == "answers 00 00 00 bytes after them 0", r.stdout


def case_a_replacement_node_resumes_from_its_peers_copy_bit_identical():
    """Two ranks per node whose DDP state is saved as replicated: each node holds, sends and keeps
    one replica of it per step (local rank 0's slot; rank 1's slot refers to it), and the
    replacement's two ranks restore from the one fetched. The replacement waits as a spare from
    before the loss: meanwhile it holds memory of the size of a node's newest slots (the nodes say
    them), and its fetches write over that memory."""
    replacement_resumes_from_its_peers_copy({"CKPT_REPLICATED": "1", "WIDTH": "16384"}, nproc=2,
                                            spare_waits=True)


def case_a_replacement_node_resumes_a_dcp_checkpoint_from_its_peers_copy():
    """The same through torch.distributed.checkpoint (torch 2): MemoryStorageWriter's saves copied,
    MemoryStorageReader reading the fetched copies back. Each node keeps one copy of each item of
    DDP's state, shared out between its two ranks' slots."""
    replacement_resumes_from_its_peers_copy({"CKPT_API": "dcp", "WIDTH": "16384"}, nproc=2)


def node_folders(run_id):
    return glob.glob(f"/dev/shm/ddprun-checkpoints-{rdzv_id(run_id)}-*")


def one_replica_per_node(run_id, state, shared_out):
    """Each node's regions and the copies it holds for its peer at step K: one replica of the
    `state` bytes each: local rank 0's slot, the other rank's a reference of under a MiB (saved
    with replicated=), or `shared_out` between the two ranks' slots (DCP's items, each kept by one
    rank of the node). Returns each node's bytes in /dev/shm."""
    held = []
    for folder in node_folders(run_id):
        regions = sorted(os.stat(os.path.join(folder, f"rank{r}")).st_blocks * 512 for r in (0, 1))
        copies = sorted(os.path.getsize(p) for p in glob.glob(f"{folder}/peers/*.step{K}.ddpckpt"))
        if shared_out:  # two slots a region: twice the replica in all, not four times
            assert 2 * state <= sum(regions) < 3 * state, (folder, regions, state)
            assert len(copies) == 2 and state <= sum(copies) < 1.5 * state, (folder, copies, state)
        else:
            assert regions[0] <= 2 * (1 << 20) + 8192 and regions[1] >= 2 * state, \
                (folder, regions)
            assert len(copies) == 2 and copies[0] < (1 << 20) and copies[1] >= state, \
                (folder, copies)
        held.append((allocated_under(folder), regions, copies))
    return held


def spare_holds_room(cluster, out, api):
    """Starts host 3 as a spare of the job "lost" (every node's workers holding after step K);
    returns what it says it holds for a restore, once it holds some."""
    cluster.start("lost", 3, out, "3:3", env=api, extra=cluster.extra)
    wait_for(lambda: any(e["held"] > 0 for e in node_events(out, 3, "restore_room_held")),
             "the spare holding memory for a restore", 60)
    return node_events(out, 3, "restore_room_held")[-1]


def replacement_resumes_from_its_peers_copy(api, nproc=1, spare_waits=False):
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra, cluster.nproc = "3:3", [], nproc
        whole = tempfile.mkdtemp()
        for i in range(3):
            cluster.start("whole", i, whole, "3:3", env=api)
        cluster.finish("whole", range(3))

        out, disk = tempfile.mkdtemp(), tempfile.mkdtemp()
        cluster.extra = [f"--checkpoint_dir={disk}", "--checkpoint_persist_every=1000"]
        status = []
        # The model's state and Adam's, the same on every rank: 3 x (32 x W + 2 x W + 1) floats.
        state, held, room = 3 * 4 * (34 * int(api.get("WIDTH", 64)) + 1), [], []

        def before():
            if "WIDTH" in api:
                held.extend(one_replica_per_node("lost", state,
                                                 shared_out=api.get("CKPT_API") == "dcp"))
            if spare_waits:  # (after the look at each node's folder: the spare has one too)
                room.append(spare_holds_room(cluster, out, api))

        lose_nodes(cluster, "lost", out, victims=[1], survivors=[0, 2], status=status,
                   env={0: api, 1: {**api, "HOLD_AT": str(K)}, 2: api}, copies=3 * nproc,
                   before=before)
        assert status[0].count("holds copies of node") == 3, status[0]
        stranger_gets_nothing(cluster, out, survivors=[0, 2])
        if not spare_waits:
            cluster.start("lost", 3, out, "3:3", env=api, extra=cluster.extra)  # the replacement
        errs = cluster.finish("lost", [0, 2, 3])
        restored = node_events(out, 3, "checkpoint_restore")
        assert restored and restored[-1]["step"] == K and restored[-1]["from"] == "peer", \
            (restored, errs[3])
        # The lost node's global ranks, now the replacement's (stable ranks): their own slots,
        # fetched.
        base = node_events(out, 1, "round_formed")[0]["base_rank"]
        lost_ranks = list(range(base, base + nproc))
        assert [r["rank"] for r in restored[-1]["ranks"]] == lost_ranks, restored
        assert node_events(out, 3, "round_formed")[-1]["base_rank"] == base
        assert all(r["from"].startswith("node ") for r in restored[-1]["ranks"]), restored
        fetched = node_events(out, 3, "checkpoint_fetched")
        assert fetched and all(f["ok"] for f in fetched) and fetched[-1]["bytes"] > 0, fetched
        if spare_waits:
            # A file of each of a node's slots held (the replica and its referrer), and every
            # byte fetched written over them.
            assert room[0]["files"] == nproc and room[0]["held"] == room[0]["wanted"] and \
                room[0]["short_by"] is None, room
            assert all(f["over_held_pages"] == f["bytes"] for f in fetched), fetched
            assert room[0]["held"] >= sum(f["bytes"] for f in fetched), (room, fetched)
            assert "of them into memory held beforehand" in errs[3], errs[3]
        for i in (0, 2):
            mine = node_events(out, i, "checkpoint_restore")
            assert mine and mine[-1]["step"] == K and mine[-1]["from"] == "memory", mine
        read_back = [e for i in (0, 2, 3) for e in node_events(out, i, "checkpoint_read_back")]
        restores = [e for i in (0, 2, 3) for e in node_events(out, i, "checkpoint_restore")]
        assert not read_back and not any(e["from"] == disk for e in restores), read_back
        # (A round re-formed around a lost node is not a restart: its workers' attempt is still
        # 0, and each rank's file says the step the last round resumed from.)
        resumed = sorted(open(p).read() for p in glob.glob(f"{out}/resumed.*"))
        assert resumed == [str(K)] * 3 * nproc, resumed
        assert bit_identical(whole, out), "the resumed job's parameters differ"
        lost = ",".join(map(str, lost_ranks))
        assert f"got step 5 of global rank(s) {lost} from node" in errs[3], errs[3]
        # Each node's event log says where its copies went and what it held of others'.
        for i in (0, 2):
            assert node_events(out, i, "checkpoint_replicated"), node_events(out, i)
            # To the next node of the round, never to itself.
            assert all(not e["peer"].startswith(ADDRS[i] + ":")
                       for e in node_events(out, i, "checkpoint_replicated")), node_events(out, i)
            held_event = node_events(out, i, "checkpoints_held")
            assert held_event and held_event[0]["safe_step"] is not None and \
                held_event[0]["peer"], held_event
            assert len(held_event[0]["peer_copies"]) == 1, held_event
            if api.get("CKPT_REPLICATED"):
                # DDP's replica is the same bytes on every node: the peer held it already (as a
                # link to its own kept copy of the step) and only the referrers' slots crossed.
                # (The step the workers stopped at may cross whole: a node that notices the pause
                # over 2 s after its peer keeps its own copy of it too late.)
                assert held_event[0]["copy_bytes_held"] > held_event[0]["copy_bytes_sent"], \
                    held_event
        assert not left_running(out) and not left_running(whole)
    replicas = ""
    if "WIDTH" in api:
        mib = lambda n: f"{n / 2**20:.2f}"  # noqa: E731
        per_node = "; ".join(
            f"{mib(total)} MiB in all, regions {'+'.join(map(mib, regions))}, the peer's copies of "
            f"step {K} {'+'.join(map(mib, copies))}" for total, regions, copies in held)
        replicas = (f" Each node held one replica of the {mib(state)} MiB state per step "
                    f"({per_node}).")
    if spare_waits:
        replicas += (f" The replacement, a spare since before the loss, held "
                     f"{room[0]['held'] / 2**20:.2f} MiB for the restore and fetched over it.")
    print(f"a node SIGKILLed after step {K}: its replacement resumed from the copies its peer held "
          "(not from --checkpoint_dir), and the job ended bit-identical to an uninterrupted run."
          f"{replicas} passed")


# Fills a checkpoint port's cap of connections from one address (8) with idle ones, opening one
# again whenever the port closes one (it closes a connection that has not greeted it within 10 s),
# until its stdin closes or 120 s passed. Prints "ready" once they are open.
CAP_FILLER = """
import selectors, socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sel = selectors.DefaultSelector()
def open_one():
    sel.register(socket.create_connection((host, port), timeout=10), selectors.EVENT_READ)
for _ in range(n):
    open_one()
sel.register(sys.stdin, selectors.EVENT_READ)
print("ready", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    for key, _ in sel.select(timeout=1):
        if key.fileobj is sys.stdin:
            if not sys.stdin.buffer.read1(64):
                sys.exit(0)
            continue
        try:
            data = key.fileobj.recv(64)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
            open_one()
"""


def case_a_node_whose_copies_stalled_is_restored_at_its_safe_step():
    """Host 0's copies to its peer stall after step K (its packets to the peer's checkpoint port
    held back to 8 bit/s by tc in its namespace) while both nodes train on 4 more steps; host 0 asks every node
    to keep step K, its safe step, and the survivor keeps its own copy of it past its two newest.
    Host 0 is lost then: its replacement and the survivor resume from step K, from memory (the
    survivor had dropped step K before: nothing in memory, and the job started afresh)."""
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra = "2:2", []
        out, later = tempfile.mkdtemp(), K + 4
        for i in (0, 1):
            cluster.start("stall", i, out, "2:2", env={"WAIT_AT": str(K), "HOLD_AT": f"{later}~a"})
        wait_for(lambda: len(glob.glob(f"{out}/waited.*")) == 2, f"every rank at step {K}", 120)
        # Both nodes' safe step is K: the peer holds the copy and the sender knows it.
        wait_for(lambda: cluster.status("stall").count(f"safe up to step {K} ") == 2,
                 f"step {K} safe on both nodes", 60)
        peer = node_events(out, 0, "checkpoint_replicated")[0]["peer"]
        host, port = peer.rsplit(":", 1)
        # Everything else at the link's speed; what goes to the peer's checkpoint port at 8 bit/s.
        tc = ["ip", "netns", "exec", cluster.hosts[0], "tc"]
        for args in (["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "1"],
                     ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:1", "htb",
                      "rate", "10gbit", "quantum", "60000"],
                     ["class", "add", "dev", "eth0", "parent", "1:", "classid", "1:2", "htb",
                      "rate", "8bit", "ceil", "8bit", "quantum", "1514"],
                     ["filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "prio", "1",
                      "u32", "match", "ip", "dst", f"{host}/32", "match", "ip", "dport", port,
                      "0xffff", "flowid", "1:2"]):
            r = subprocess.run([*tc, *args], capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, (args, r.stderr)
        open(os.path.join(out, "go"), "w").close()
        wait_for(lambda: len(glob.glob(f"{out}/held~a.*")) == 2, f"every rank at step {later}", 120)
        # Both nodes hear host 0's request (the survivor's status line says it).
        status = []
        wait_for(lambda: status.append(cluster.status("stall")) or
                 status[-1].count(f"the round's nodes ask to keep step(s) [{K}]") == 2 and
                 f"asks every node to keep step {K}" in status[-1], "the request heard", 60)
        cluster.kill("stall", 0)
        cluster.start("stall", 2, out, "2:2")  # the replacement
        errs = cluster.finish("stall", [1, 2])
        for i, source in ((1, "memory"), (2, "peer")):
            restored = node_events(out, i, "checkpoint_restore")
            assert restored and restored[-1]["step"] == K and restored[-1]["from"] == source, \
                (i, restored, errs[i])
        resumed = sorted(open(p).read() for p in glob.glob(f"{out}/resumed.*"))
        assert resumed == [str(K)] * 2, resumed
        assert not left_running(out)
    print(f"a node whose copies stalled after step {K} while the job trained to step {later}: "
          f"it asked every node to keep step {K}, and after its loss the job resumed from step "
          f"{K}, from memory: passed")


def case_a_fetch_that_fails_is_asked_again_and_the_replacement_resumes_from_memory():
    """The replacement's fetch of the lost node's copies fails at first: the port of the node
    holding them has its cap of connections from the replacement's address filled (idle
    connections, as a stuck client on that host would leave). The replacement asks again until the
    connections are gone and resumes from step K with the copies; without --checkpoint_dir a
    failed fetch would otherwise start the whole job afresh."""
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra = "3:3", []
        out = tempfile.mkdtemp()
        filler = []

        def fill_the_holders_cap():
            peers = {e["peer"] for e in node_events(out, 1, "checkpoint_replicated")}
            assert len(peers) == 1, peers
            host, port = next(iter(peers)).rsplit(":", 1)
            filler.append(subprocess.Popen(
                ["ip", "netns", "exec", cluster.hosts[3], PY, "-c", CAP_FILLER, host, port, "8"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            assert filler[0].stdout.readline().strip() == "ready"

        try:
            lose_nodes(cluster, "again", out, victims=[1], survivors=[0, 2],
                       before=fill_the_holders_cap)
            cluster.start("again", 3, out, "3:3")  # the replacement
            wait_for(lambda: any(not f["ok"] for f in node_events(out, 3, "checkpoint_fetched")),
                     "the replacement's fetch refused at the holder's cap", 120)
        finally:
            for f in filler:
                f.stdin.close()
                f.wait(timeout=30)
        errs = cluster.finish("again", [0, 2, 3])
        fetched = node_events(out, 3, "checkpoint_fetched")
        assert not fetched[0]["ok"] and fetched[-1]["ok"] and fetched[-1]["bytes"] > 0, fetched
        assert "did not arrive" in errs[3] and "asking again" in errs[3], errs[3]
        restored = node_events(out, 3, "checkpoint_restore")
        assert restored and restored[-1]["step"] == K and restored[-1]["from"] == "peer", \
            (restored, errs[3])
        resumed = sorted(open(p).read() for p in glob.glob(f"{out}/resumed.*"))
        assert resumed == [str(K)] * 3, resumed
        assert os.path.exists(os.path.join(out, "final.pt"))
        assert not left_running(out)
    print(f"the replacement's fetch of step {K} failed {sum(not f['ok'] for f in fetched)} time(s) "
          "at the holder's cap of connections, was asked again once they were gone, and the job "
          f"resumed from step {K}: passed")


def case_a_copy_that_fails_its_checksum_gives_way_to_the_step_before():
    """The only copy of the lost node's step K, held by its peer, has a byte flipped (memory gone
    bad): the replacement's fetch fails its checksum, and the round restores step K-1 instead (the
    peer keeps the newest two steps of each slot, the survivors' regions the newest two of their
    own), on every node; not a start from step 0."""
    copy_gone_bad(disk=False)


def case_a_copy_that_fails_its_checksum_gives_way_to_a_newer_step_on_disk():
    """The same with step K persisted for every rank in --checkpoint_dir: the disk's step K, newer
    than the step before it in memory, is restored."""
    copy_gone_bad(disk=True)


def copy_gone_bad(disk):
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra = "3:3", []
        out = tempfile.mkdtemp()
        if disk:
            disk = tempfile.mkdtemp()
            cluster.extra = [f"--checkpoint_dir={disk}", "--checkpoint_persist_every=1"]
        flipped = []

        def flip_a_byte_of_the_copy():
            pid = node_events(out, 1, "agent_started")[0]["agent_pid"]
            copies = [p for p in copies_of_step("bad", K)
                      if bytes.fromhex(os.path.basename(p).split(".")[0]).decode()
                      .startswith(f"vm_{pid}_")]
            assert len(copies) == 1, (copies, copies_of_step("bad", K))
            # (DDP's state is the same bytes on every node: the copy may be a link to the
            # holder's own kept copy of step K, flipped with it; the holder restores from its
            # region, and step K is dropped everywhere after the restore.)
            with open(copies[0], "r+b") as f:  # a byte of the payload (after the 4 KiB header)
                f.seek(4096 + 100)
                byte = f.read(1)
                f.seek(4096 + 100)
                f.write(bytes([byte[0] ^ 0x5A]))
            flipped.append(copies[0])
            if disk:
                wait_for(lambda: f"step_{K}" in complete_on_disk(disk, 3),
                         f"step {K} of every rank persisted", 60)

        # Every node pauses 3 s after step K-1: its copies then are of K-1 too, whatever the
        # stride (a paused job's newest step is copied), and the peer holds K-1 and K of each.
        pause = {"PAUSE_AT": f"{K - 1}:3"}
        lose_nodes(cluster, "bad", out, victims=[1], survivors=[0, 2],
                   env={0: pause, 1: {**pause, "HOLD_AT": str(K)}, 2: pause},
                   before=flip_a_byte_of_the_copy)
        cluster.start("bad", 3, out, "3:3", extra=cluster.extra)  # the replacement
        errs = cluster.finish("bad", [0, 2, 3])
        assert "fails its checksum" in errs[3], errs[3]
        step = K if disk else K - 1
        for i in (0, 2, 3):
            trying = node_events(out, i, "checkpoint_step_unfetched")
            restored = node_events(out, i, "checkpoint_restore")
            assert restored and restored[-1]["step"] == step, (i, restored, errs[i])
            if disk:
                assert not trying and restored[-1]["from"] == disk, (i, trying, restored)
            else:
                assert trying and trying[-1]["step"] == K and trying[-1]["trying"] == K - 1, \
                    (i, trying, errs[i])
        if not disk:
            assert f"step {K} could not be gathered on every node: trying step {K - 1}" in \
                errs[3], errs[3]
            assert node_events(out, 3, "checkpoint_restore")[-1]["from"] == "peer"
        resumed = sorted(open(p).read() for p in glob.glob(f"{out}/resumed.*"))
        assert resumed == [str(step)] * 3, resumed
        assert os.path.exists(os.path.join(out, "final.pt"))
        assert not left_running(out)
    print(f"the lost node's copy of step {K} failed its checksum at the replacement: every node "
          f"restored step {step} instead, from {'--checkpoint_dir' if disk else 'memory'}: passed")


def case_a_second_node_lost_after_the_ring_changed_resumes_from_its_new_peers_copy():
    """After a replacement the round's ring is a new one: the replacement holds a survivor's
    copies. That survivor is lost next, once step K2 is copied in the new ring: a second
    replacement resumes from step K2 with the copies the first replacement holds, and the job ends
    bit-identical to an uninterrupted run."""
    K2 = K + 3
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra = "3:3", []
        whole = tempfile.mkdtemp()
        for i in range(3):
            cluster.start("whole", i, whole, "3:3")
        cluster.finish("whole", range(3))

        out = tempfile.mkdtemp()
        later = {"HOLD_AT": f"{K2}@3"}  # every node of the second round holds after step K2
        lose_nodes(cluster, "twice", out, victims=[1], survivors=[0, 2],
                   env={1: {"HOLD_AT": f"{K},{K2}@3"}, 0: later, 2: later})
        cluster.start("twice", 3, out, "3:3", env=later)
        wait_for(lambda: len(glob.glob(f"{out}/held@3.*")) == 3, f"the new round at step {K2}", 120)
        wait_for(lambda: len(copies_of_step("twice", K2)) >= 3, f"step {K2} copied in the new ring",
                 60)
        # The survivor whose copies now go to the replacement (node 3) is lost next.
        to_3 = [i for i in (0, 2) if any(e["peer"].startswith(ADDRS[3] + ":")
                                         for e in node_events(out, i, "checkpoint_replicated"))]
        assert len(to_3) == 1, [node_events(out, i, "checkpoint_replicated") for i in (0, 2)]
        victim = to_3[0]
        cluster.kill("twice", victim)
        cluster.start("twice", 4, out, "3:3")
        errs = cluster.finish("twice", [i for i in (0, 2, 3, 4) if i != victim])
        restored = node_events(out, 4, "checkpoint_restore")
        assert restored and restored[-1]["step"] == K2 and restored[-1]["from"] == "peer", \
            (restored, errs[4])
        fetched = node_events(out, 4, "checkpoint_fetched")
        assert fetched and all(f["ok"] for f in fetched), fetched
        assert fetched[-1]["from"].startswith(ADDRS[3] + ":"), fetched  # the first replacement
        assert bit_identical(whole, out), "the resumed job's parameters differ"
        assert not left_running(out) and not left_running(whole)
    print(f"a node lost after step {K}, then, once the ring was a new one, the survivor whose "
          f"copies went to the replacement lost after step {K2}: a second replacement resumed "
          f"from the first replacement's copies, bit-identical to an uninterrupted run: passed")


def case_the_survivors_resume_at_a_smaller_world_size():
    with Cluster() as cluster:
        cluster.nnodes, cluster.extra = "2:3", []
        out = tempfile.mkdtemp()
        lose_nodes(cluster, "shrink", out, victims=[2], survivors=[0, 1])
        errs = cluster.finish("shrink", [0, 1])
        for i in (0, 1):
            mine = node_events(out, i, "checkpoint_restore")
            assert mine and mine[-1]["step"] == K, (mine, errs[i])
        resumed = [open(f"{out}/resumed.0.{r}").read() for r in (0, 1)]  # world size 2 now
        assert resumed == [str(K), str(K)], resumed
        assert os.path.exists(os.path.join(out, "final.pt"))
        assert not left_running(out)
    print(f"a node SIGKILLed after step {K} with no replacement: the two survivors resumed from "
          f"step {K} at world size 2: passed")


def case_two_adjacent_nodes_lost_fall_back_to_disk_naming_the_ranks():
    with Cluster() as cluster:
        out, disk = tempfile.mkdtemp(), tempfile.mkdtemp()
        cluster.nnodes = "3:3"
        cluster.extra = [f"--checkpoint_dir={disk}", "--checkpoint_persist_every=2"]
        # Node ranks follow the order of joining; whichever two are lost, in a ring of three they
        # are adjacent, and one of them held the other's copies.
        lose_nodes(cluster, "both", out, victims=[0, 1], survivors=[2], disk=disk)
        cluster.start("both", 3, out, "3:3", extra=cluster.extra)
        cluster.start("both", 4, out, "3:3", extra=cluster.extra)
        errs = cluster.finish("both", [2, 3, 4])
        said = [line for e in errs.values() for line in e.splitlines()
                if "no in-memory slot of global rank" in line]
        assert said, errs
        lost = [e for i in (2, 3, 4) for e in node_events(out, i, "checkpoint_copies_lost")]
        assert lost and len(lost[0]["ranks"]) == 1, lost
        restored = [e for i in (2, 3, 4) for e in node_events(out, i, "checkpoint_restore")]
        assert restored and all(e["from"] == disk for e in restored), (restored, errs)
        assert all(e["step"] <= K for e in restored), restored
        assert not left_running(out)
    print(f"two adjacent nodes lost: the rank whose copies went with both came from "
          f"--checkpoint_dir, said in one line ({said[0].split('] ')[-1]}): passed")


def case_without_peer_copies_a_lost_node_restores_from_disk():
    with Cluster() as cluster:
        out, disk = tempfile.mkdtemp(), tempfile.mkdtemp()
        extra = ["--no_checkpoint_peer_copies", f"--checkpoint_dir={disk}",
                 "--checkpoint_persist_every=1"]
        for i in (0, 1, 2):
            cluster.start("nocopy", i, out, "3:3", env={"HOLD_AT": str(K)} if i == 1 else None,
                          extra=extra)
        wait_for(lambda: len(glob.glob(f"{out}/held.*")) == 1, "the victim at step K", 120)
        wait_for(lambda: complete_on_disk(disk, 3), "a step of every rank persisted", 60)
        cluster.kill("nocopy", 1)
        cluster.start("nocopy", 3, out, "3:3", extra=extra)
        errs = cluster.finish("nocopy", [0, 2, 3])
        assert not glob.glob(f"/dev/shm/ddprun-checkpoints-{rdzv_id('nocopy')}-*/peers/*"), \
            "a node held another's copies"
        assert not any(node_events(out, i, "checkpoint_replicated") for i in range(4))
        restored = node_events(out, 3, "checkpoint_restore")
        assert restored and restored[-1]["from"] == disk, (restored, errs[3])
        assert not left_running(out)
    print("with --no_checkpoint_peer_copies no node held another's copies, and the replacement "
          f"of a lost node restored step {restored[-1]['step']} from --checkpoint_dir: passed")


def case_a_node_back_after_another_rounds_restore_gives_none_of_its_old_steps():
    """Node 1 is paused past the heartbeat timeout while both nodes hold after step K; the round
    re-forms with a spare (node 2), which has no copy of rank 1 (no peer copies): that round starts
    afresh and saves steps 0 to K again, a new timeline. Node 1, woken, waits as a spare with its
    old timeline's steps K-1 and K still in its region; once node 2 is lost it is placed again. The
    numbers match node 0's new steps, but node 1 missed the restore that abandoned its own: it
    gives none of them (one warning, event checkpoint_slots_behind), and the round starts afresh
    rather than restore step K from two timelines."""
    import signal
    with Cluster() as cluster:
        out = tempfile.mkdtemp()
        extra = ["--no_checkpoint_peer_copies"]
        for i in (0, 1):  # both hold after step K, once
            cluster.start("back", i, out, "2:2", env={"HOLD_AT": f"{K}~first"}, extra=extra)
        wait_for(lambda: len(glob.glob(f"{out}/held~first.*")) == 2, "both nodes at step K", 120)
        paused = cluster.agents[("back", 1)]
        paused.send_signal(signal.SIGSTOP)
        try:
            # The spare holds after its step K of the new timeline (node 0's rank then waits for it
            # in step K + 1, its step K saved).
            cluster.start("back", 2, out, "2:2", env={"HOLD_AT": f"{K}~spare"}, extra=extra)
            wait_for(lambda: os.path.exists(f"{out}/held~spare.1"), "the new timeline at step K",
                     120)
        finally:
            paused.send_signal(signal.SIGCONT)
        wait_for(lambda: "spare" in cluster.status("back"), "node 1 waiting as a spare", 60)
        cluster.kill("back", 2)
        errs = cluster.finish("back", [0, 1])
        behind = node_events(out, 1, "checkpoint_slots_behind")
        assert behind and behind[-1]["slots"] >= 1, (behind, errs[1])
        assert "may be of the timeline that restore abandoned" in errs[1], errs[1]
        last = max(e["round"] for e in node_events(out, 0, "round_formed"))
        restored = [e for i in (0, 1) for e in node_events(out, i, "checkpoint_restore")
                    if e["round"] == last]
        assert not restored, restored  # afresh: no step of two timelines
        assert os.path.exists(os.path.join(out, "final.pt"))
        assert not left_running(out)
    print(f"a node paused past the heartbeat timeout while holding steps up to {K}, back as a spare "
          f"after the job restarted afresh and saved steps up to {K} again, then placed again: it "
          f"gave none of its {behind[-1]['slots']} old slot(s), said so, and the round started "
          "afresh rather than restore one step of two timelines: passed")


def main():
    global DDPRUN, DDPRUND
    DDPRUN, DDPRUND = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    globals()["case_" + sys.argv[3]]()


if __name__ == "__main__":
    main()
