"""A round's worker store serves the round's nodes only: a 2-node elastic job (ddprund in a namespace
of its own, each node in another) trains with torch's gloo across the namespaces while a stranger,
in a fourth namespace on the same network, is refused by the worker store at once, with torch's own
client and with raw bytes. Skipped (77) where network namespaces cannot be made.

    netns_worker_store_test.py DDPRUN DDPRUND
"""
import os
import subprocess
import sys
import tempfile
import time

from netns import bridge_hosts, remove_namespaces

PY = os.environ.get("DDPRUN_TEST_PYTHON", "/usr/bin/python3")
NET = "10.214.0"
ADDRS = (f"{NET}.11", f"{NET}.12", f"{NET}.13")  # node a, node b, the stranger

# Each rank writes the worker store's address, waits for the stranger's verdict, then trains.
TRAIN = """
import os, sys, torch, torch.distributed as dist
out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    open(os.path.join(out, "master"), "w").write(os.environ["MASTER_ADDR"] + " " + os.environ["MASTER_PORT"])
while not os.path.exists(os.path.join(out, "probed")):
    import time; time.sleep(0.05)
w = torch.zeros(4)
for step in range(20):
    g = torch.ones(4) * (rank + 1)
    dist.all_reduce(g)
    w += g
open(os.path.join(out, f"w.{rank}"), "w").write(repr(w.tolist()))
dist.destroy_process_group()
"""

STRANGER = """
import datetime, socket, sys, torch.distributed as dist
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=5))
    s.set("x", "y")
    print("torch: SERVED", s.get("x"))
except Exception as e:
    print("torch: REFUSED", type(e).__name__)
c = socket.create_connection((host, port), timeout=5)
# VALIDATE, then PING 7: a store that serves this peer echoes the 7.
c.sendall(bytes([0]) + (0x3C85F7CE).to_bytes(4, "little") + bytes([13]) + (7).to_bytes(4, "little"))
c.settimeout(5)
try:
    print("raw: SERVED" if c.recv(16) else "raw: REFUSED")
except OSError:
    print("raw: REFUSED")
"""


def main(ddprun, ddprund):
    tag = str(os.getpid())
    head, hosts = f"wsh{tag}", [f"ws{tag}{c}" for c in "abc"]
    try:
        bridge_hosts(head, hosts, NET, ADDRS)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print("network namespaces unavailable here:", e)
        remove_namespaces([head, *hosts])
        sys.exit(77)
    procs = []
    try:
        store = subprocess.Popen(["ip", "netns", "exec", head, ddprund, "--host", f"{NET}.1",
                                  "--port", "0", "--log-level", "warn"],
                                 stdout=subprocess.PIPE, text=True)
        procs.append(store)
        port = int(store.stdout.readline())
        out = tempfile.mkdtemp()
        train = os.path.join(out, "train.py")
        open(train, "w").write(TRAIN)
        agents = []
        for i in (0, 1):
            env = {**os.environ, "PYTHON_EXEC": PY, "GLOO_SOCKET_IFNAME": "eth0"}
            agents.append(subprocess.Popen(
                ["ip", "netns", "exec", hosts[i], ddprun, "--nnodes=2", "--nproc_per_node=1",
                 "--rdzv_backend=c10d", f"--rdzv_endpoint={NET}.1:{port}", "--rdzv_id=ws",
                 "--rdzv_conf=join_timeout=60", train, out],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
        procs += agents
        master = os.path.join(out, "master")
        deadline = time.monotonic() + 120
        while not os.path.exists(master) or not open(master).read():
            assert time.monotonic() < deadline, "the job did not start"
            assert all(a.poll() is None for a in agents), [a.communicate() for a in agents]
            time.sleep(0.05)
        addr, mport = open(master).read().split()
        assert addr in ADDRS[:2], addr
        verdict = subprocess.run(["ip", "netns", "exec", hosts[2], PY, "-c", STRANGER, addr, mport],
                                 capture_output=True, text=True, timeout=120)
        open(os.path.join(out, "probed"), "w").close()
        errs = []
        for a in agents:
            _, err = a.communicate(timeout=120)
            assert a.returncode == 0, err[-3000:]
            errs.append(err)
        assert "torch: REFUSED" in verdict.stdout and "raw: REFUSED" in verdict.stdout, (
            verdict, errs)
        assert any("refusing connection from " + ADDRS[2] in e for e in errs), errs
        weights = {open(os.path.join(out, f"w.{r}")).read() for r in (0, 1)}
        assert weights == {repr([60.0] * 4)}, weights
        print(f"a stranger at {ADDRS[2]} refused by the worker store at {addr}:{mport}; the job's "
              "2 nodes trained across it: passed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        remove_namespaces([head, *hosts])


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
