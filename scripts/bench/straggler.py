"""The straggler benchmark's driver (scripts/bench/straggler.sh): a real DDP job, 3 nodes x 1 rank
in network namespaces (tests/launcher/straggler_test.py's cluster and workload), one node's worker
moved into a cgroup with a 40% CPU quota at step K. Runs, each RUNS times:
  healthy   ddprun (every ddprun run with --preload=auto), nobody slowed: the job's time and its
            median step
  report    ddprun (report): steps from the slowdown to the verdict, the job's time
  replace   ddprun --straggler_action=replace, a spare waiting: steps to the verdict, the time from
            the verdict to the resumed round's first step, its steps' speed, the job's time
  torchrun  torch 2.14's torchrun (c10d, node 0 hosting its store), slowed likewise: the job's time
and the check's overhead on the healthy job: median step with the check against
--straggler_threshold=0 (which runs first alternates from run to run), and, below what this
machine's noise lets a job's step show, the timing's own cost per step in a worker
(scripts/bench/step_times_cost.py: DDP on a tiny model, timed against not). Time lost to the slow
node
is a job's time less the healthy job's. The last line compares with the targets (the verdict
within 10 steps, back at full speed within 3 steps of it, overhead under 1%).
    straggler.py DDPRUN DDPRUND PYTHON REPO RUNS STEPS
"""
import os
import statistics
import subprocess
import sys
import tempfile

ddprun, ddprund, py, repo, runs, steps = sys.argv[1:7]
runs, steps = int(runs), int(steps)
sys.path.insert(0, os.path.join(repo, "tests", "launcher"))
import straggler_test as t  # noqa: E402 - the test's cluster, workload and readers
from job_logs import node_events  # noqa: E402

t.DDPRUN, t.DDPRUND, t.PY = ddprun, ddprund, py
K = t.K


def verdict_after(out, slowed):
    """Rank 0's steps between the slowdown and the verdict, and the verdict's time."""
    verdicts = [e for i in range(4) for e in node_events(out, i, "straggler")]
    if not verdicts:
        return None, None
    named = verdicts[0]["time_ms"] / 1000
    return len([s for s, when in t.step_times(out, 0) if slowed < when <= named]), named


def job_time(out, attempts):
    first = t.step_times(out, 0)[0][1]
    last = max(when for a in attempts for _, when in t.step_times(out, a))
    return last - first


def ddprun_run(name, extra=(), slow=True, spare=False):
    out = tempfile.mkdtemp()
    extra = ["--preload=auto", *extra]  # workers start warm, as a restart-sensitive job runs
    with t.Cluster() as c:
        for i in range(3):
            c.start(name, i, out, steps, nnodes="3:3" if spare else "3",
                    env={"MARK_AT": str(K)} if slow else None,
                    extra=[*extra, f"--event_log={out}/events.{i}.jsonl"])
        if spare:
            t.wait_for(lambda: os.path.exists(os.path.join(out, "steps.0")), "a step", 180)
            c.start(name, 3, out, steps, nnodes="3:3",
                    extra=[*extra, f"--event_log={out}/events.3.jsonl"])
        slowed = c.slow_down(out) if slow else None
        codes = {0: 0, 1: 0, 2: 4 if spare else 0}
        if spare:
            codes[3] = 0
        c.finish(name, codes)
    return out, slowed


def torchrun_run():
    out = tempfile.mkdtemp()
    with t.Cluster() as c:
        agents = []
        for i in range(3):
            # Node 0's agent hosts the store (inside a namespace it cannot tell that the address
            # is its own: is_host), each node names its address.
            cmd = ["nsenter", f"--net=/var/run/netns/{c.hosts[i]}", py, "-m",
                   "torch.distributed.run", "--nnodes=3", "--nproc_per_node=1",
                   "--rdzv_backend=c10d", f"--rdzv_endpoint={t.ADDRS[0]}:29511",
                   f"--rdzv_id=torchrun-{os.getpid()}", f"--local_addr={t.ADDRS[i]}",
                   f"--rdzv_conf=join_timeout=120,is_host={1 if i == 0 else 0}", t.WORKLOAD,
                   str(steps), out]
            agents.append(subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "MARK_AT": str(K), "GLOO_SOCKET_IFNAME": "eth0",
                     "PYTHONPATH": os.path.join(repo, "python")}))
        c.procs.extend(agents)
        c.slow_down(out)
        for a in agents:
            a.wait(timeout=600)
    return out


def median_step(out, attempt=0, first=2):
    return statistics.median(t.durations(t.step_times(out, attempt))[first:])


healthy, report, replace, torchrun, on, off = [], [], [], [], [], []
for run in range(runs):
    out, _ = ddprun_run("healthy", slow=False)
    healthy.append((job_time(out, [0]), median_step(out)))
    out, slowed = ddprun_run("report")
    after, _ = verdict_after(out, slowed)
    report.append((after, job_time(out, [0])))
    out, slowed = ddprun_run("replace", ["--straggler_action=replace"], spare=True)
    after, named = verdict_after(out, slowed)
    resumed = t.step_times(out, 1)
    back = resumed[0][1] - named if named else None
    replace.append((after, back, job_time(out, [0, 1]), median_step(out, 1, 0)))
    out = torchrun_run()
    torchrun.append(job_time(out, [0]))
    order = (("0.2", on), ("0", off))
    for threshold, into in order if run % 2 == 0 else order[::-1]:  # neither always first
        out, _ = ddprun_run(f"overhead{threshold}", [f"--straggler_threshold={threshold}"],
                            slow=False)
        into.append(median_step(out))
    print(f"run {run + 1}: healthy {healthy[-1][0]:.1f} s ({healthy[-1][1] * 1000:.0f} ms a step); "
          f"report: named after {report[-1][0]} steps, {report[-1][1]:.1f} s; replace: named after "
          f"{replace[-1][0]} steps, resumed {replace[-1][1]:.2f} s later, {replace[-1][2]:.1f} s, "
          f"{replace[-1][3] * 1000:.0f} ms a step after; torchrun {torchrun[-1]:.1f} s; "
          f"step with the check {on[-1] * 1000:.1f} ms, without {off[-1] * 1000:.1f} ms",
          flush=True)

med = statistics.median
healthy_time, healthy_step = med(h[0] for h in healthy), med(h[1] for h in healthy)
report_after = med(r[0] for r in report if r[0] is not None)
replace_after = med(r[0] for r in replace if r[0] is not None)
resume_s = med(r[1] for r in replace if r[1] is not None)
lost = {"report": med(r[1] for r in report) - healthy_time,
        "replace": med(r[2] for r in replace) - healthy_time,
        "torchrun": med(torchrun) - healthy_time}
overhead = med(on) / med(off) - 1
cost_us, plain_us, timed_us = (float(v) for v in subprocess.run(
    [py, os.path.join(repo, "scripts", "bench", "step_times_cost.py"), os.path.join(repo, "python"),
     "6", "2000"], capture_output=True, text=True, check=True).stdout.split())
print(f"{steps} steps, node 2 slowed from step {K} (a 40% CPU quota), median of {runs}: "
      f"healthy job {healthy_time:.1f} s at {healthy_step * 1000:.0f} ms a step")
print(f"time lost to the slow node: ddprun report {lost['report']:.1f} s, ddprun replace "
      f"{lost['replace']:.1f} s, torchrun 2.14 {lost['torchrun']:.1f} s (never names it)")
print(f"the check's overhead in the job: {overhead * 100:+.1f}% (per run "
      f"{', '.join(f'{a / b * 100 - 100:+.1f}%' for a, b in zip(on, off))}); the timing's own cost "
      f"in a worker {cost_us:.0f} us a step (a tiny DDP step {plain_us:.0f} us untimed, "
      f"{timed_us:.0f} us timed) = {cost_us / 1e4 / healthy_step:.2f}% of this job's step")
print(f"replace: after the verdict the resumed round's first step came in {resume_s:.2f} s "
      f"= {resume_s / healthy_step:.1f} healthy steps; its steps "
      f"{med(r[3] for r in replace) * 1000:.0f} ms")
print(f"ratio: verdict after {report_after:g} (report) / {replace_after:g} (replace) steps "
      f"(target 10); back at full speed {resume_s / healthy_step:.1f} steps after it (target 3); "
      f"time lost with replace "
      f"{lost['replace'] / lost['torchrun'] if lost['torchrun'] > 0 else 0:.2f}x torchrun's; overhead {overhead * 100:+.1f}% in the job, "
      f"{cost_us / 1e4 / healthy_step:.2f}% from the timing's cost per step (target under 1%)")
