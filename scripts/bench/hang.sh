#!/usr/bin/env bash
# Hang benchmark, on a real job: DDP over gloo, 2 ranks, steps of about 100 ms that each print a line
# (tests/launcher/workloads/hang_ddp.py, no heartbeat code); in the first attempt rank 1 blocks in
# stuck_in_data_loading() at step 10 (under auto at step 30, once auto's 20-interval warm-up is
# behind it). From the moment it blocks: to the hang being declared (the
# agent's `hang` event; every rank's stack follows within the dump's 2 s) and to the restarted
# group's first finished step, median of RUNS, under
# ddprun --hang_timeout=5, ddprun --hang_timeout=auto, and torch 2.14's torchrun (which does not
# detect it: reported as not detected within CAP seconds, then killed). Then what one heartbeat
# costs the worker: libddp's ddp::heartbeat() and the wheel's ddprun.heartbeat.beat() under torch
# 2.14's Python. The last line states the figures against the targets.
#   scripts/bench/hang.sh    (RUNS=3, CAP=30)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
CAP=${CAP:-30}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun heartbeat_probe >/dev/null
exec /usr/bin/python3 - "$PWD" "$RUNS" "$CAP" <<'PY'
import json, os, statistics, subprocess, sys, tempfile, time
repo, runs, cap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ddprun = f"{repo}/build/launcher/ddprun"
py2 = f"{repo}/scripts/torch2/python"
job = f"{repo}/tests/launcher/workloads/hang_ddp.py"

def one(command, env_extra):
    out = tempfile.mkdtemp()
    log = os.path.join(out, "events.jsonl")
    env = {**os.environ, "OUT_DIR": out, **env_extra}
    p = subprocess.Popen([*command(log), job], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        p.wait(timeout=cap + 60)
    except subprocess.TimeoutExpired:
        pass
    blocked = float(open(os.path.join(out, "blocked")).read())
    hang = [e for e in map(json.loads, open(log)) if e["event"] == "hang"] if os.path.exists(log) else []
    firsts = [float(open(os.path.join(out, f)).read()) for f in os.listdir(out) if f.startswith("first_step.")]
    return (hang[0]["time_ms"] / 1000 - blocked if hang else None,
            max(firsts) - blocked if len(firsts) == 2 else None)

def ddprun_runs(mode, workload_env):
    cmd = lambda log: [ddprun, "--standalone", "--nproc_per_node=2", "--max_restarts=1",
                       f"--hang_timeout={mode}", f"--event_log={log}"]
    results = [one(cmd, {"PYTHON_EXEC": py2, **workload_env}) for _ in range(runs)]
    detect = statistics.median(r[0] for r in results)
    first = statistics.median(r[1] for r in results)
    print(f"ddprun --hang_timeout={mode}: declared {detect:.2f} s, restarted group's first step "
          f"{first:.2f} s after the rank blocked (median of {runs})", flush=True)
    return detect, first

def torchrun_run():
    out = tempfile.mkdtemp()
    env = {**os.environ, "OUT_DIR": out}
    p = subprocess.Popen([py2, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "--max-restarts=1", job], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(out, "blocked")) and time.time() < deadline:
        time.sleep(0.1)
    blocked = float(open(os.path.join(out, "blocked")).read())
    try:
        p.wait(timeout=max(0.0, blocked + cap - time.time()))
        ended = time.time() - blocked
    except subprocess.TimeoutExpired:
        ended = None
    os.killpg(p.pid, 9)
    p.wait()
    restarted = any(f.startswith("first_step.") for f in os.listdir(out))
    return ended, restarted

fixed = ddprun_runs("5", {})
auto = ddprun_runs("auto", {"HANG_DDP_STEPS": "40", "HANG_DDP_BLOCK_AT": "30"})
ended, restarted = torchrun_run()
torch_text = (f"not detected within {cap:.0f} s" if ended is None and not restarted
              else f"ended after {ended:.1f} s, restarted: {restarted}")
print(f"torchrun 2.14: {torch_text}", flush=True)

with tempfile.NamedTemporaryFile() as hb:
    hb.write(b"\0" * 8)
    hb.flush()
    env = {**os.environ, "DDPRUN_HEARTBEAT_FILE": hb.name}
    cpp = statistics.median(float(subprocess.run([f"{repo}/build/tests/heartbeat_probe", "cost",
                                                   "100000000"], env=env, capture_output=True,
                                                  text=True, check=True).stdout) for _ in range(3))
    timing = ("import timeit; from ddprun import heartbeat; heartbeat.beat(); "
              "print(min(timeit.repeat(heartbeat.beat, number=1000000, repeat=5)) * 1000)")
    python = float(subprocess.run([py2, "-c", timing], capture_output=True, text=True, check=True,
                                  env={**env, "PYTHONPATH": f"{repo}/python"}).stdout)
print(f"one heartbeat: ddp::heartbeat() {cpp:.1f} ns, ddprun.heartbeat.beat() {python:.0f} ns", flush=True)
print(f"hang: declared {fixed[0]:.1f} s and restarted to the first step {fixed[1]:.1f} s after the "
      f"hang with --hang_timeout=5 (target 5+2 s, stacks included), declared {auto[0]:.1f} s "
      f"with auto (target its 10 s floor + 2 s); torchrun 2.14 {torch_text}; a heartbeat costs {cpp:.1f} ns (C++) "
      f"and {python:.0f} ns (Python), target under 1000 ns")
PY
