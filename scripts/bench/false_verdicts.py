"""How often ddprun's verdicts on nodes are wrong under load (scripts/bench/false_verdicts.sh):
every node healthy, LOAD busy loops on the machine meanwhile (one per core by default), and count
what each check said:
  node check  CHECKS jobs of 4 nodes with --node_check (scripts/bench/node_check.py's job): the
              nodes kept out (false, every one), and the suspicions the confirmation cleared
  straggler   JOBS DDP jobs of 3 nodes x 1 rank, STEPS steps each (the cluster and workload of
              tests/launcher/straggler_test.py): the verdicts (false, every one) and the links
              measured again
The last line gives the rates.

    false_verdicts.py DDPRUN DDPRUND PYTHON REPO CHECKS JOBS STEPS LOAD
"""
import os
import subprocess
import sys
import tempfile

ddprun, ddprund, py, repo = (os.path.abspath(a) for a in sys.argv[1:5])
checks, jobs, steps, load = (int(a) for a in sys.argv[5:9])
sys.path.insert(0, os.path.join(repo, "tests", "launcher"))
sys.path.insert(0, os.path.join(repo, "scripts", "bench"))
import node_check as nc  # noqa: E402 - the node check benchmark's job
import straggler_test as t  # noqa: E402 - the straggler test's cluster and workload
from netns import bridge_hosts, remove_namespaces  # noqa: E402
from job_logs import node_events  # noqa: E402

t.DDPRUN, t.DDPRUND, t.PY = ddprun, ddprund, py
HOG = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end: pass\n"


def node_checks():
    """(nodes kept out, suspicions cleared) over `checks` jobs of 4 healthy nodes."""
    tag, out = str(os.getpid()), tempfile.mkdtemp()
    head, hosts = f"fvh{tag}", [f"fv{tag}{i}" for i in range(4)]
    bridge_hosts(head, hosts, nc.NET, [f"{nc.NET}.{11 + i}" for i in range(4)])
    store = subprocess.Popen(["ip", "netns", "exec", head, ddprund, "--host", f"{nc.NET}.1",
                              "--port", "0", "--log-level", "warn"],
                             stdout=subprocess.PIPE, text=True)
    kept_out = cleared = 0
    try:
        port = int(store.stdout.readline())
        for run in range(checks):
            _, events = nc.job(ddprun, hosts, port, f"fv{run}", out, True)
            assert len(events) == 4, events
            kept_out += len(events[0]["slow"])
            cleared += len(events[0]["unconfirmed"])
    finally:
        store.kill()
        store.wait()
        remove_namespaces([head, *hosts])
    return kept_out, cleared


def straggler_jobs():
    """(verdicts, link measurements, steps) over `jobs` healthy DDP jobs."""
    verdicts = measured = timed = 0
    for run in range(jobs):
        out = tempfile.mkdtemp()
        with t.Cluster() as c:
            for i in range(3):
                c.start(f"fv{run}", i, out, steps, extra=[f"--event_log={out}/events.{i}.jsonl"])
            errs = c.finish(f"fv{run}", {0: 0, 1: 0, 2: 0})
        verdicts += sum(len(node_events(out, i, "straggler")) for i in range(3))
        measured += errs[0].count("every node measures its links")
        timed += len(t.step_times(out, 0))
    return verdicts, measured, timed


hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(load)]
try:
    kept_out, cleared = node_checks()
    print(f"node check, 4 healthy nodes beside {load} busy loop(s): {kept_out} node(s) kept out "
          f"in {checks} checks; {cleared} suspicion(s) cleared by the confirmation", flush=True)
    verdicts, measured, timed = straggler_jobs()
    print(f"straggler check, 3 healthy nodes beside {load} busy loop(s): {verdicts} verdict(s) in "
          f"{jobs} jobs of {steps} steps ({timed} steps timed on rank 0); links measured again "
          f"{measured} time(s)", flush=True)
finally:
    for h in hogs:
        h.kill()
        h.wait()
share = f" ({100 * kept_out / (checks * 4):.1f}%)" if checks else ""
print(f"ratio: false keep-outs {kept_out}/{checks * 4} nodes checked{share}, false straggler "
      f"verdicts {verdicts}/{timed} steps, links measured again {measured} time(s) in {jobs} "
      f"healthy jobs (target: no false verdict)")
