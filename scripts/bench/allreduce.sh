#!/usr/bin/env bash
# All-reduce benchmark: libddp (Gloo) against torch.distributed's gloo of torch 2.14 (Debian forky's,
# through scripts/torch2/python; the headline) and torch 1.13 (Debian bookworm's), all as 2 worker
# processes under ddprun on this machine, in one run. Medians; the last line states the ratio against
# torch 2.14 at 16 MiB and the gradient-sync overhead.
#   1. bus bandwidth of a float32 sum all-reduce, 1-256 MiB: busbw = bytes / time * 2(n-1)/n;
#   2. one step of ResNet-50-shaped gradients (161 tensors, 25.6M float32): ddp::GradientSync (caller
#      buffers and in place), torch DDP's backward on the same tensors, one fused all-reduce.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
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
  for t in "torch1.13 /usr/bin/python3" "torch2.14 $PWD/scripts/torch2/python"; do
    read -r name py <<<"$t"
    PYTHON_EXEC=$py $DDPRUN --standalone --nproc_per_node=2 \
      scripts/bench/torch_allreduce_bench.py busbw $sizes 2>/dev/null >>"$work/$name.txt"
  done
  $DDPRUN --standalone --nproc_per_node=2 --no_python build/scripts/bench/allreduce_bench \
    gradsync "$work/resnet50.txt" 2>/dev/null >>"$work/ddp.txt"
  for t in "torch1.13 /usr/bin/python3" "torch2.14 $PWD/scripts/torch2/python"; do
    read -r name py <<<"$t"
    PYTHON_EXEC=$py $DDPRUN --standalone --nproc_per_node=2 \
      scripts/bench/torch_allreduce_bench.py ddp "$work/resnet50.txt" 2>/dev/null >>"$work/$name.txt"
  done
done

python3 - "$work/ddp.txt" "$work/torch2.14.txt" "$work/torch1.13.txt" <<'PY'
import statistics, sys
def load(path):
    out = {}
    for line in open(path):
        f = line.split()
        key = (f[0], int(f[1])) if f[0] == "allreduce" else (f[0], 0)
        out.setdefault(key, []).append(float(f[-1]))
    return {k: statistics.median(v) for k, v in out.items()}
ddp, torch2, torch1 = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
n = 2
print(f"# all-reduce benchmark: libddp (Gloo) vs torch.distributed gloo (torch 2.14 and 1.13), {n} ranks")
print("\n## float32 sum all-reduce: bus bandwidth (GB/s, median)")
print(f"{'size':>8} {'torch 2.14':>10} {'torch 1.13':>11} {'ddp':>8} {'vs 2.14':>7} {'vs 1.13':>8}")
ratio16 = None
for (kind, nbytes), t in sorted(torch2.items()):
    if kind != "allreduce":
        continue
    bw = lambda s: nbytes / s * 2 * (n - 1) / n / 1e9
    d = bw(ddp[(kind, nbytes)])
    r2, r1 = d / bw(t), d / bw(torch1[(kind, nbytes)])
    if nbytes == 16 << 20:
        ratio16 = r2
    print(f"{nbytes >> 20:>5} MiB {bw(t):>10.2f} {bw(torch1[(kind, nbytes)]):>11.2f} {d:>8.2f} "
          f"{r2:>6.2f}x {r1:>7.2f}x")
g, gc, f = ddp[("gradsync", 0)], ddp[("gradsync_copied", 0)], ddp[("fused", 0)]
d2, d1 = torch2[("ddp", 0)], torch1[("ddp", 0)]
print("\n## one step, ResNet-50-shaped gradients (161 tensors, 25.6M float32), median ms")
print(f"fused all-reduce (libddp)          {f * 1e3:8.1f}")
print(f"GradientSync, gradients in place   {g * 1e3:8.1f}   {g / f:.2f}x fused")
print(f"GradientSync, caller buffers       {gc * 1e3:8.1f}   {gc / f:.2f}x fused")
print(f"torch 2.14 DDP backward (gloo)      {d2 * 1e3:8.1f}   {d2 / f:.2f}x fused")
print(f"torch 1.13 DDP backward (gloo)     {d1 * 1e3:8.1f}   {d1 / f:.2f}x fused")
print(f"\nallreduce: ddp/torch 2.14 busbw at 16 MiB {ratio16:.2f}x; GradientSync (in place) "
      f"{(g / f - 1) * 100:+.0f}% vs fused all-reduce, torch 2.14 DDP {(d2 / f - 1) * 100:+.0f}%")
PY
