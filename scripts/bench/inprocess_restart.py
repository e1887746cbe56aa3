"""In-process restart against process restarts (scripts/bench/inprocess_restart.sh runs it):
2 ranks of DDP over gloo on a model under torch.compile (scripts/bench/inprocess_worker.py), a
checkpoint saved in memory each step, rank 1 failing just after saving step 8 of 24. For each mode
and run: the time from the failure until the job is back at the failed step (every rank has finished
the step after the saved one), with:
  in_process    ddprun --restart_mode=in_process --preload=auto (rank 0 keeps its process, its
                imports and its compiled model; a killed rank 1 is replaced from the warm
                interpreter and compiles again)
  standby       as in_process, with --standby_workers=1: a standby that ran the script up to
                inprocess.run() and warmed up (a compiled step on zeros) takes rank 1's place;
                rank 1 waits for it to be ready before it fails (not counted)
  process       ddprun --preload=auto (both ranks start again from the warm interpreter, compile
                again, load the checkpoint from memory)
  torchrun      torch 2.14's torchrun (both ranks start cold, compile again, torch.load from
                /dev/shm)
for a rank SIGKILLed (the issue's case) and for a rank whose training raised (where in process no
process is replaced; not under torchrun, whose restarted workers hung in init_process_group in both
runs tried, more than 180 s). Medians over the runs; the last line gives the ratios and the targets (under
1 s; 5x sooner than ddprun's process restart).

    inprocess_restart.py DDPRUN TORCH2_PYTHON CHECKOUT RUNS
"""
import os
import statistics
import subprocess
import sys
import tempfile

STEPS, FAULT_STEP = 24, 8
JOB_LIMIT = 180  # seconds a job may take; one that takes longer did not come back (inf)


def job(mode, fault, ddprun, python, checkout):
    out = tempfile.mkdtemp(dir="/dev/shm")
    worker = os.path.join(checkout, "scripts", "bench", "inprocess_worker.py")
    env = {**os.environ, "WAIT_STANDBY": "1" if mode == "standby" else "0", "FAULT": fault, "FAULT_STEP": str(FAULT_STEP), "PYTHON_EXEC": python,
           "PYTHONPATH": os.path.join(checkout, "python")}
    if mode == "torchrun":
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "--max_restarts=3", worker, str(STEPS), out]
    else:
        cmd = [ddprun, "--standalone", "--nproc_per_node=2", "--max_restarts=3", "--preload=auto",
               *(["--restart_mode=in_process"] if mode in ("in_process", "standby") else []),
               *(["--standby_workers=1"] if mode == "standby" else []),
               worker, str(STEPS), out]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_LIMIT, env=env)
    except subprocess.TimeoutExpired:  # (its workers die with it: PDEATHSIG, or ddprun's stop)
        subprocess.run(["pkill", "-9", "-f", out], check=False)
        print(f"{mode} {fault}: the job had not ended after {JOB_LIMIT} s", flush=True)
        return float("inf"), False
    if r.returncode != 0:
        if mode != "torchrun":
            sys.exit(f"{mode} {fault}: exit {r.returncode}\n{r.stderr[-4000:]}")
        why = [l for l in r.stderr.splitlines() if "Error" in l][:1]
        print(f"{mode} {fault}: the job failed (exit {r.returncode}: {why}): not back", flush=True)
        return float("inf"), False
    with open(os.path.join(out, "fault")) as f:
        failed = float(f.read())
    back, kept = [], True
    for rank in (0, 1):
        with open(os.path.join(out, f"steps.{rank}")) as f:
            lines = [l.split() for l in f]
        after = [float(t) for t, attempt, step in lines
                 if attempt != "0" and int(step) == FAULT_STEP + 1]
        back.append(after[0] - failed)
    subprocess.run(["rm", "-rf", out], check=False)
    return max(back), kept


def main():
    ddprun, python, checkout, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    results = {}
    for run in range(runs):
        for fault in ("kill", "raise"):
            for mode in (("standby", "in_process", "process", "torchrun") if fault == "kill" else
                         ("in_process", "process")):
                back, _ = job(mode, fault, ddprun, python, checkout)
                results.setdefault((fault, mode), []).append(back)
                print(f"run {run + 1}: rank 1 {'SIGKILLed' if fault == 'kill' else 'raised'}, "
                      f"{mode}: back at the failed step {back:.3f} s after the failure", flush=True)
    median = {k: statistics.median(v) for k, v in results.items()}
    for fault in ("kill", "raise"):
        print(f"median over {runs} runs, rank 1 {'SIGKILLed' if fault == 'kill' else 'raised'}: "
              + ", ".join(f"{m} {median[(fault, m)]:.3f} s"
                          for m in ("standby", "in_process", "process", "torchrun")
                          if (fault, m) in median))
    k, r = (lambda m: median[("kill", m)]), (lambda m: median[("raise", m)])
    print(f"ratio: in process with a standby, a killed rank back in {k('standby'):.2f} s "
          f"(target 1 s): {k('process') / k('standby'):.2f}x sooner than ddprun's process restart "
          f"(target 5x), {k('torchrun') / k('standby'):.2f}x sooner than torchrun 2.14; without "
          f"a standby {k('in_process'):.2f} s, {k('process') / k('in_process'):.2f}x; a "
          f"raising rank back in {r('in_process'):.2f} s, {r('process') / r('in_process'):.2f}x "
          f"sooner than ddprun's process restart")


if __name__ == "__main__":
    main()
