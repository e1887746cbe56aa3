#!/usr/bin/env bash
# In-memory checkpoint benchmark: 2 ranks under ddprun, torch 2.14 workers, about 1 GiB of state
# per rank (scripts/bench/checkpoint_worker.py). Per rank, medians of RUNS after a warm-up: the floor
# (every tensor copied into host memory already touched), ddprun.checkpoint.save as the worker sees
# it, dcp.save through checkpoint.MemoryStorageWriter and dcp.async_save's call through it,
# torch.save to a local file and into
# /dev/shm, dcp.save with FileSystemWriter; then a SIGKILL
# and the restarted worker's load() against the floor. The last line gives the ratios against the
# targets (save at most 1.3x the floor, restore at most 1.5x).
#   scripts/bench/checkpoint.sh    (RUNS=3)
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-3}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PYTHON_EXEC=$PWD/scripts/torch2/python build/launcher/ddprun --standalone --nproc_per_node=2 \
  --max_restarts=1 scripts/bench/checkpoint_worker.py "$out" "$RUNS" >/dev/null 2>"$out/log" ||
  { cat "$out/log" >&2; exit 1; }
/usr/bin/python3 - "$out" <<'PY'
import os, sys
out = sys.argv[1]
def of(way):
    return [float(open(os.path.join(out, f"{way}.{r}")).read()) for r in (0, 1)]
ways = [("floor", "copy into touched memory"), ("ddprun", "ddprun.checkpoint.save"),
        ("ddprun_dcp", "dcp.save, MemoryStorageWriter"),
        ("ddprun_dcp_async", "dcp.async_save, its call"),
        ("torch_file", "torch.save, local file"), ("torch_shm", "torch.save, /dev/shm"),
        ("dcp", "dcp.save, FileSystemWriter"), ("floor_restore", "floor, after the restart"),
        ("restore", "load(into=) after a SIGKILL"), ("restore_new", "load() after a SIGKILL")]
print("## 1 GiB of state per rank, 2 ranks, torch 2.14 (seconds, median per rank)")
print(f"{'':30} {'rank 0':>8} {'rank 1':>8} {'vs floor':>9}")
floor = max(of("floor"))
for way, name in ways:
    if not os.path.exists(os.path.join(out, f"{way}.0")):
        print(f"{name:30} missing: the workers' log ends\n" +
              "".join(open(os.path.join(out, "log")).readlines()[-20:]))
        continue
    t = of(way)
    base = max(of("floor_restore")) if way.startswith("restore") else floor
    print(f"{name:30} {t[0]:8.3f} {t[1]:8.3f} {max(t) / base:8.2f}x")
same = all(open(os.path.join(out, f"same.{r}")).read() == "True" for r in (0, 1))
save, restore = max(of("ddprun")) / floor, max(of("restore")) / max(of("floor_restore"))
dcp_mem = max(of("ddprun_dcp")) / floor if os.path.exists(os.path.join(out, "ddprun_dcp.0")) else 0
print(f"checkpoint: save {save:.2f}x the floor (target 1.3x; through DCP {dcp_mem:.2f}x), "
      f"torch.save to a local file "
      f"{max(of('torch_file')) / max(of('ddprun')):.1f}x slower than it, dcp.save "
      f"{max(of('dcp')) / max(of('ddprun')):.1f}x slower; restore after a SIGKILL {restore:.2f}x "
      f"the floor into the worker's tensors (target 1.5x), "
      f"{max(of('restore_new')) / max(of('floor_restore')):.2f}x into new ones; restored "
      f"bit-identical: {same}")
PY
