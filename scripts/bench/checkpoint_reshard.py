"""The driver of scripts/bench/checkpoint_reshard.sh (its header says what is measured).
    checkpoint_reshard.py DDPRUN DDPRUND PYTHON WORKLOAD"""
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

DDPRUN, DDPRUND, PY, WORKLOAD = map(os.path.abspath, sys.argv[1:5])
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "launcher"))
from netns import bridge_hosts, remove_namespaces  # noqa: E402

NET = "10.220.0"
TAG = str(os.getpid())
HEAD, HOSTS = f"brh{TAG}", [f"br{TAG}{i}" for i in range(3)]
ADDRS = [f"{NET}.{11 + i}" for i in range(3)]
STEPS = 3


def agent(i, port, run_id, out, nnodes, steps, env):
    cmd = ["ip", "netns", "exec", HOSTS[i], DDPRUN, f"--nnodes={nnodes}", "--nproc_per_node=2",
           "--max_restarts=3", "--rdzv_backend=c10d", f"--rdzv_endpoint={NET}.1:{port}",
           f"--rdzv_id={run_id}", "--rdzv_conf=last_call_timeout=1,join_timeout=300,"
           "heartbeat_timeout=5", f"--event_log={out}/events.{i}.jsonl", WORKLOAD, str(steps), out]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{out}/agent.{i}.log", "w"),
                            env={**os.environ, "PYTHON_EXEC": PY, "GLOO_SOCKET_IFNAME": "eth0",
                                 **env})


def finish(agents, what):
    for p in agents:
        if p.wait(timeout=1800) != 0:
            raise SystemExit(f"{what}: an agent exited {p.returncode}")


def events(out, i, name):
    path = f"{out}/events.{i}.jsonl"
    return [e for e in map(json.loads, open(path)) if e["event"] == name] if os.path.exists(path) else []


def loads(out, world):
    return [float(open(p).read()) for p in glob.glob(f"{out}/load_seconds.*@{world}")]


def main():
    try:
        bridge_hosts(HEAD, HOSTS, NET, ADDRS)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"network namespaces unavailable here: {e}")
    store = subprocess.Popen(["ip", "netns", "exec", HEAD, DDPRUND, "--host", f"{NET}.1", "--port",
                              "0", "--log-level", "error"], stdout=subprocess.PIPE, text=True)
    work = tempfile.mkdtemp()  # (under /tmp: the torch 2.14 root sees it)
    keep = os.environ.get("KEEP")
    try:
        port = int(store.stdout.readline())
        # The reference: stock dcp.save of step 1 into a local folder, then stock FileSystemReader.
        ref, saved = os.path.join(work, "ref"), os.path.join(work, "saved")
        os.makedirs(ref)
        os.makedirs(saved)
        finish([agent(i, port, "ref", ref, "3:3", 2, {"REF_SAVE": saved}) for i in range(3)],
               "the reference's save")
        subprocess.run(["sync"], check=True)
        finish([agent(i, port, "ref2", ref, "2:2", STEPS, {"REF_LOAD": saved}) for i in range(2)],
               "the reference's load")
        stock = loads(ref, 4)  # the folder in the page cache, just written
        # The same with the folder read from the disk: a node that starts again reads a shared or
        # local folder it did not just write.
        cold_out = os.path.join(work, "cold")
        os.makedirs(cold_out)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        finish([agent(i, port, "ref3", cold_out, "2:2", STEPS, {"REF_LOAD": saved})
                for i in range(2)], "the reference's load from the disk")
        cold = loads(cold_out, 4)
        saved_bytes = sum(os.path.getsize(p) for p in glob.glob(f"{saved}/*"))
        # ddprun: a node lost after step 1, the 2 left resharded from memory.
        out = os.path.join(work, "ddprun")
        os.makedirs(out)
        agents = [agent(i, port, "mem", out, "2:3", STEPS, {"HOLD_AT": "1@6"}) for i in range(3)]
        deadline = time.monotonic() + 1800
        copied = lambda: glob.glob("/dev/shm/ddprun-checkpoints-mem-*/peers/*.step1.ddpckpt")
        while len(glob.glob(f"{out}/held.1.*")) < 6 or len(copied()) < 6:
            if time.monotonic() > deadline or any(a.poll() is not None for a in agents):
                raise SystemExit("ddprun: the job never held at step 1 with every copy made")
            time.sleep(0.1)
        victim = next(i for i in range(3) if events(out, i, "round_formed")[0]["node_rank"] == 1)
        agents[victim].send_signal(signal.SIGKILL)
        agents[victim].wait()
        finish([a for i, a in enumerate(agents) if i != victim], "ddprun's resumed job")
        mine = loads(out, 4)
        fetched = [e for i in range(3) for e in events(out, i, "checkpoint_fetched") if e["ok"]]
        restores = [e for i in range(3) if i != victim for e in events(out, i, "checkpoint_restore")]
    finally:
        store.kill()
        remove_namespaces([HEAD, *HOSTS])
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    assert restores and all(r["reshard"] and r["step"] == 1 for r in restores), restores
    gathered = sum(e["bytes"] for e in fetched)
    gather_s = max((e["seconds"] for e in fetched), default=0.0)
    m, s, c = statistics.median(mine), statistics.median(stock), statistics.median(cold)
    width = int(os.environ["FSDP_WIDTH"])
    print(f"## FSDP2, 3 nodes x 2 ranks, layers of {width} x {width}: "
          f"{saved_bytes / 6 / (1 << 20):.0f} MiB of state per rank as DCP saves it; a node lost "
          f"after step 1, 2 nodes go on")
    print(f"stock dcp.load from a local folder (FileSystemReader), 4 ranks: {s:.2f} s in the page "
          f"cache (median of {len(stock)}, slowest {max(stock):.2f} s), {c:.2f} s from the disk "
          f"(caches dropped first; slowest {max(cold):.2f} s)")
    print(f"ddprun MemoryStorageReader from memory, 4 ranks: {m:.2f} s (median of {len(mine)}, "
          f"slowest {max(mine):.2f} s); the agents first gathered {gathered / (1 << 20):.0f} MiB "
          f"over the nodes' links, the slowest fetch {gather_s:.2f} s")
    print(f"checkpoint reshard: stock dcp.load took {s / m:.1f}x ddprun's reshard from memory from "
          f"the page cache and {c / m:.1f}x from the disk (target at least 5x); counting the "
          f"agents' gathering, {s / (m + gather_s):.1f}x and {c / (m + gather_s):.1f}x")


if __name__ == "__main__":
    main()
