#!/usr/bin/env bash
# What losing a whole node costs a real job, with checkpoints copied to a peer node against
# torchrun's way: a DDP job of 2 nodes x 2 ranks (scripts/bench/checkpoint_e2e_worker.py, torch
# 2.14), each node in a network namespace of its own on one bridge (veth links; the job's ddprund in
# another). A node (its agent and every worker: all its namespace's processes) is SIGKILLed at a
# random step; a spare node, waiting since the job began to train (SPARE=0: a replacement node
# started at the loss), takes its place. ddprun's workers start from a warm interpreter
# (--preload=auto; PRELOAD=0: cold, as torchrun's) and restart as processes, torchrun's way
# (RESTART=in_process: the surviving node's ranks keep their processes, model and optimizer, and
# only the lost node's ranks start anew; the worker runs its training under ddprun.inprocess.run;
# with STANDBY=N too, --standby_workers=N: the spare's standbys warm up while it waits).
#   ddprun:   ddprun.checkpoint.save every step, copied to the peer node in the background
#   torchrun: torch 2.14's torchrun (c10d, its store in node 0's agent), rank 0 torch.save()s to a shared
#             folder every K steps (K as in checkpoint_e2e.sh: saving costs 5% of the step time)
# For each: the steps redone and the time from the loss until the job is back at the step where it
# failed (ddprun's loss LOSS_RUNS times, 3: medians; torchrun's once); ddprun's restore transfer
# against a plain TCP transfer over the same link just before it (the median of three); and the
# job's speed with no checkpoints, with a save every step
# (--no_checkpoint_peer_copies) and with a save every step copied to the peer, the three taking
# turns SPEED_RUNS times (3; medians). The last
# line gives the ratios (targets: at most one step redone, the transfer within 2x of the link, at
# least 10x sooner than torchrun, the copies keeping at least 90% of the speed). TOKEN=1: ddprun's
# job has a token of its own, so that every copy between its agents carries its MAC.
#   scripts/bench/checkpoint_node_loss.sh    (WIDTH=2048: 256 MiB of state per rank; 4096: 1 GiB,
#                                             which needs about 24 GiB of memory; SEED; SPARE;
#                                             PRELOAD; RESTART; STANDBY; TOKEN;
#                                             SPEED_RUNS; LOSS_RUNS)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
export WIDTH=${WIDTH:-2048} OMP_NUM_THREADS=1
exec /usr/bin/python3 scripts/bench/checkpoint_node_loss.py build/launcher/ddprun \
  build/rendezvous/store/ddprund "$PWD/scripts/torch2/python" "$PWD/scripts/bench/checkpoint_e2e_worker.py"
