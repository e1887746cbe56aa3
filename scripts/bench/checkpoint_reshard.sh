#!/usr/bin/env bash
# A sharded job that loses a node with no spare resumes at the smaller world size, resharded from
# memory, against stock torch.distributed.checkpoint from a local folder: FSDP2 (fully_shard on CPU
# over gloo, torch 2.14; tests/launcher/workloads/checkpoint_fsdp.py with layers of WIDTH x WIDTH),
# 3 nodes x 2 ranks, each node in a network namespace of its own on one bridge.
#   ddprun:    dcp.save into memory (MemoryStorageWriter) every step; after step 1 a node is
#              SIGKILLed, and the 2 left resume from step 1 with MemoryStorageReader, the agents
#              having gathered every saved rank's slot on each node
#   reference: the same job saving step 1 with stock dcp.save and FileSystemWriter into a local
#              folder, then started at 2 nodes and loading it with stock FileSystemReader
# Reported: each rank's dcp.load (median), the agents' gathering (bytes, seconds), and the ratio of
# the stock load to ddprun's, without and with the gathering (target: at least 5x).
#   scripts/bench/checkpoint_reshard.sh    (WIDTH=4096: about 256 MiB of state per rank)
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/install-deps.sh
bash scripts/torch2-root.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target ddprun ddprund >/dev/null
export FSDP_WIDTH=${WIDTH:-4096} OMP_NUM_THREADS=1
exec /usr/bin/python3 scripts/bench/checkpoint_reshard.py build/launcher/ddprun \
  build/rendezvous/store/ddprund "$PWD/scripts/torch2/python" \
  "$PWD/tests/launcher/workloads/checkpoint_fsdp.py"
