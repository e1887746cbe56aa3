#!/usr/bin/env bash
# All-reduce benchmark: libddp (Gloo) against torch.distributed's gloo (Debian's torch 1.13), both
# as 2 worker processes under ddprun on this machine, in one run. Medians; the last line states the
# ratio at 16 MiB and the gradient-sync overhead.
#   1. bus bandwidth of a float32 sum all-reduce, 1-256 MiB: busbw = bytes / time * 2(n-1)/n;
#   2. one step of ResNet-50-shaped gradients (161 tensors, 25.6M float32): ddp::GradientSync (caller
#      buffers and in place), torch DDP's backward on the same tensors, one fused all-reduce.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun allreduce_bench >/dev/null
DDPRUN=build/launcher/ddprun
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 scripts/bench/resnet50_shapes.py >"$work/resnet50.txt"
sizes="1 4 16 64 256"

for round in $(seq "$ROUNDS"); do
  $DDPRUN --standalone --nproc_per_node=2 --no_python build/scripts/bench/allreduce_bench \
    busbw $sizes 2>/dev/null >>"$work/ddp.txt"
  PYTHON_EXEC=/usr/bin/python3 $DDPRUN --standalone --nproc_per_node=2 \
    scripts/bench/torch_allreduce_bench.py busbw $sizes 2>/dev/null >>"$work/torch.txt"
  $DDPRUN --standalone --nproc_per_node=2 --no_python build/scripts/bench/allreduce_bench \
    gradsync "$work/resnet50.txt" 2>/dev/null >>"$work/ddp.txt"
  PYTHON_EXEC=/usr/bin/python3 $DDPRUN --standalone --nproc_per_node=2 \
    scripts/bench/torch_allreduce_bench.py ddp "$work/resnet50.txt" 2>/dev/null >>"$work/torch.txt"
done

python3 - "$work/ddp.txt" "$work/torch.txt" <<'PY'
import statistics, sys
def load(path):
    out = {}
    for line in open(path):
        f = line.split()
        key = (f[0], int(f[1])) if f[0] == "allreduce" else (f[0], 0)
        out.setdefault(key, []).append(float(f[-1]))
    return {k: statistics.median(v) for k, v in out.items()}
ddp, torch = load(sys.argv[1]), load(sys.argv[2])
n = 2
print(f"# all-reduce benchmark: libddp (Gloo) vs torch.distributed gloo (torch 1.13), {n} ranks")
print("\n## float32 sum all-reduce: bus bandwidth (GB/s, median)")
print(f"{'size':>8} {'torch':>8} {'ddp':>8} {'ratio':>7}")
ratio16 = None
for (kind, nbytes), t in sorted(torch.items()):
    if kind != "allreduce":
        continue
    bw = lambda s: nbytes / s * 2 * (n - 1) / n / 1e9
    r = bw(ddp[(kind, nbytes)]) / bw(t)
    if nbytes == 16 << 20:
        ratio16 = r
    print(f"{nbytes >> 20:>5} MiB {bw(t):>8.2f} {bw(ddp[(kind, nbytes)]):>8.2f} {r:>6.2f}x")
g, gc, f, d = ddp[("gradsync", 0)], ddp[("gradsync_copied", 0)], ddp[("fused", 0)], torch[("ddp", 0)]
print("\n## one step, ResNet-50-shaped gradients (161 tensors, 25.6M float32), median ms")
print(f"fused all-reduce (libddp)          {f * 1e3:8.1f}")
print(f"GradientSync, gradients in place   {g * 1e3:8.1f}   {g / f:.2f}x fused")
print(f"GradientSync, caller buffers       {gc * 1e3:8.1f}   {gc / f:.2f}x fused")
print(f"torch DDP backward (gloo)          {d * 1e3:8.1f}   {d / f:.2f}x fused")
print(f"\nallreduce: ddp/torch busbw at 16 MiB {ratio16:.2f}x; GradientSync (in place) "
      f"{(g / f - 1) * 100:+.0f}% vs fused all-reduce, torch DDP {(d / f - 1) * 100:+.0f}%")
PY
