#!/usr/bin/env bash
# Restart benchmark, on a real job: torch 2.14 DDP over gloo (tests/launcher/workloads/
# ddp_restart.py), 2 ranks and then 8 ranks on this machine; in the first attempt rank 1 exits 1
# after its 5th step, --max-restarts=1. Under torch 2.14's torchrun, ddprun (cold starts) and
# ddprun --preload=auto: from the failure to the restarted group's first finished step (with the
# stages: workers begun, `import torch` done, process group and DDP ready), and from the launch
# to the first attempt's first step; medians of RUNS. The last line states the ratios against the
# targets (restart to the first step 10x faster than torchrun, the first launch of 8 ranks 3x).
#   scripts/bench/restart_real.sh    (RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
exec /usr/bin/python3 - "$PWD" "$RUNS" <<'PY'
import glob, os, statistics, subprocess, sys, tempfile, time
repo, runs = sys.argv[1], int(sys.argv[2])
# Seconds. torchrun 2.14's restarted group sometimes never gets past init_process_group here, or
# fails: such runs are counted and left out of the medians.
CAP = 120
ddprun = f"{repo}/build/launcher/ddprun"
py2 = f"{repo}/scripts/torch2/python"
job = f"{repo}/tests/launcher/workloads/ddp_restart.py"
LAUNCHERS = {
    "torchrun 2.14": [py2, "-m", "torch.distributed.run"],
    "ddprun": [ddprun],
    "ddprun --preload=auto": [ddprun, "--preload=auto"],
}

def latest(out, stage, attempt):
    files = glob.glob(os.path.join(out, f"{stage}.{attempt}.*"))
    return max(float(open(f).read()) for f in files)

def one(launcher, nproc):
    """One run's figures, or None when it failed or did not finish within CAP seconds (then
    killed)."""
    out = tempfile.mkdtemp()
    env = {**os.environ, "OUT_DIR": out, "PYTHON_EXEC": py2}
    start = time.time()
    p = subprocess.Popen([*launcher, "--standalone", f"--nproc_per_node={nproc}",
                          "--max-restarts=1", job], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=CAP)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.communicate()
        return None
    if p.returncode != 0:
        print(f"  (a run of {launcher[-1]} with {nproc} ranks failed: {err.strip().splitlines()[-1:]})",
              flush=True)
        return None
    assert all(open(f).read() == "True" for f in glob.glob(os.path.join(out, "identical.1.*")))
    failed = float(open(os.path.join(out, "failed")).read())
    return {"begun": latest(out, "begin", 1) - failed,
            "imported": latest(out, "imported", 1) - failed,
            "ready": latest(out, "ready", 1) - failed,
            "restart": latest(out, "first_step", 1) - failed,
            "launch": latest(out, "first_step", 0) - start}

results = {}
for nproc in (2, 8):
    for name, launcher in LAUNCHERS.items():
        samples, hung = [], 0
        while len(samples) < runs and hung < runs:
            s = one(launcher, nproc)
            if s is None:
                hung += 1  # hung or failed
            else:
                samples.append(s)
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        results[(name, nproc)] = med
        note = f"; {hung} more run(s) failed, or hung and were killed after {CAP} s" if hung else ""
        print(f"{nproc} ranks, {name:22s}: failure -> workers begun {1000 * med['begun']:6.0f} ms, "
              f"import torch done {1000 * med['imported']:6.0f} ms, process group + DDP ready "
              f"{1000 * med['ready']:6.0f} ms, first step {1000 * med['restart']:6.0f} ms; "
              f"launch -> first step {1000 * med['launch']:6.0f} ms (median of {len(samples)}{note})",
              flush=True)

def ratio(nproc, what, name):
    return results[("torchrun 2.14", nproc)][what] / results[(name, nproc)][what]

warm = "ddprun --preload=auto"
print(f"restart to the first step: --preload=auto {ratio(2, 'restart', warm):.1f}x faster than "
      f"torchrun 2.14 with 2 ranks, {ratio(8, 'restart', warm):.1f}x with 8 (cold ddprun "
      f"{ratio(2, 'restart', 'ddprun'):.2f}x, {ratio(8, 'restart', 'ddprun'):.2f}x; target 10x); "
      f"launch to the first step of 8 ranks {ratio(8, 'launch', warm):.1f}x faster (target 3x)")
PY
