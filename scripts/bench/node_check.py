"""--node_check on this machine: N nodes (2, 4, 8), each in a network namespace of its own on one
bridge, ddprund in another; every run a whole job (`--nnodes=N --node_check --no_python true`).
Per N: the check's time as the agents measured it (the slowest node's, from the round formed to
the verdict), the whole job's wall time with and without the check, and the nodes kept out (none
expected: every node is healthy). The median of RUNS runs.

    node_check.py DDPRUN DDPRUND RUNS
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "launcher"))
from netns import bridge_hosts, remove_namespaces  # noqa: E402

NET = "10.217.0"


def job(ddprun, hosts, port, run_id, out, check):
    """One whole job on every host; its wall time and each node's node_check event."""
    flags = ["--node_check"] if check else []
    started = time.monotonic()
    agents = [subprocess.Popen(
        ["ip", "netns", "exec", ns, ddprun, f"--nnodes={len(hosts)}", "--nproc_per_node=1",
         "--rdzv_backend=c10d", f"--rdzv_endpoint={NET}.1:{port}", f"--rdzv_id={run_id}",
         f"--event_log={out}/{run_id}.{i}.jsonl", *flags, "--no_python", "true"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i, ns in enumerate(hosts)]
    results = [(a.wait(timeout=300), a.stderr.read()) for a in agents]
    wall = time.monotonic() - started
    if any(code != 0 for code, _ in results):
        sys.exit("node_check bench: a job failed:\n" + "\n".join(e[-2000:] for _, e in results))
    checks = []
    for i in range(len(hosts)):
        with open(f"{out}/{run_id}.{i}.jsonl") as f:
            checks += [e for e in map(json.loads, f) if e["event"] == "node_check"]
    return wall, checks


def main(ddprun, ddprund, runs):
    tag = str(os.getpid())
    out = tempfile.mkdtemp()
    lines = []
    try:
        for n in (2, 4, 8):
            head, hosts = f"nbh{tag}", [f"nb{tag}{i}" for i in range(n)]
            bridge_hosts(head, hosts, NET, [f"{NET}.{11 + i}" for i in range(n)])
            store = subprocess.Popen(["ip", "netns", "exec", head, ddprund, "--host", f"{NET}.1",
                                      "--port", "0", "--log-level", "warn"],
                                     stdout=subprocess.PIPE, text=True)
            try:
                port = int(store.stdout.readline())
                checked, plain, kept_out, seconds = [], [], 0, []
                for run in range(runs):
                    wall, checks = job(ddprun, hosts, port, f"c{n}x{run}", out, True)
                    assert len(checks) == n, checks
                    checked.append(wall)
                    seconds.append(max(c["seconds"] for c in checks))
                    kept_out += len(checks[0]["slow"])
                    plain.append(job(ddprun, hosts, port, f"p{n}x{run}", out, False)[0])
            finally:
                store.kill()
                store.wait()
                remove_namespaces([head, *hosts])
            s, c, p = (statistics.median(x) for x in (seconds, checked, plain))
            lines.append((n, s, c, p, kept_out))
            print(f"{n} nodes: the check {s:.2f} s (median of {runs}; {min(seconds):.2f} to "
                  f"{max(seconds):.2f}); the whole job {c:.2f} s with it, {p:.2f} s without "
                  f"({c / p:.1f}x); nodes kept out: {kept_out}", flush=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    n, s, c, p, kept = lines[-1]
    print(f"node_check: {n} nodes checked in {s:.2f} s (target: under 5 s), the job {c / p:.1f}x "
          f"its time without the check; {kept} healthy node(s) kept out in {runs} runs")


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), int(sys.argv[3]))
