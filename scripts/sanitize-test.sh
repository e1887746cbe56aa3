#!/usr/bin/env bash
# The multi-node, elastic, launcher-kind and stop tests, `ddprun timeline` on real and bad event logs,
# the in-process rendezvous, session and TLS tests, and the unit tests of the checkpoint copies
# (regions, sources, the peer service and its strangers, the replicator, the signal listener) and
# three node losses with copies on a peer (one whose copies stalled among them),
# against ddprun and ddprund built with AddressSanitizer and UndefinedBehaviorSanitizer (g++, the
# compiler whose coroutine handling the lifetime rules in docs/design.md work around). Every process
# reports into one folder; any report fails the run, whatever exit status the test saw.
# Usage: sanitize-test.sh [build|test] (both when omitted). scripts/test.sh builds while CTest runs,
# at idle priority, and tests after the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${DDPRUN_SANITIZE_BUILD_DIR:-build-asan}
step=${1:-all}
case $step in build | test | all) ;; *) echo "usage: $0 [build|test]" >&2; exit 2 ;; esac

if [[ $step != test ]]; then
  # Unoptimised: UBSan's checks make g++ three times slower at -O2, and -O0 hides nothing from them.
  # A unity build, with line tables only (-g1: the reports' file and line), as scripts/test.sh's.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDDPRUN_BUILD_TESTS=ON \
    -DDDPRUN_SANITIZE=ON -DDDPRUN_WITH_CUDA=OFF -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DCMAKE_CXX_FLAGS_DEBUG=-g1 >/dev/null
  cmake --build "$build" -j "$(nproc)" --target ddprun ddprund rendezvous_elastic_test rendezvous_static_test rendezvous_local_test \
    rendezvous_exchange_test checkpoint_regions_test checkpoint_sources_test peer_copies_test \
    peer_copies_trust_test replicator_test signal_listener_test store_session_test store_tls_test \
    reap_killed_test
fi
[[ $step != build ]] || exit 0

reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1"
cd "$build"
# The unit tests run here by the first words of their names ("PREFIX: ..."), each of a binary the
# build above makes: a prefix that names no test (its binary not built) fails the run.
units=("rendezvous" "session" "tls" "checkpoint regions" "checkpoint agreement" "checkpoint persister"
  "checkpoint sources" "peer copies" "signal listener" "replicator" "reap killed")
for unit in "${units[@]}"; do
  if ! ctest -N -R "^$unit: " | grep 'Test *#' >/dev/null; then  # (not -q: ctest's SIGPIPE)
    echo "sanitize: no test named '$unit: ...' was built (add its binary to the build above)" >&2
    exit 1
  fi
done
unit_names=$(IFS='|'; echo "${units[*]}")
status=0
# Two tests a core: they mostly wait on heartbeats, processes and sockets (at one a core the 2-core
# machine was 56% busy and the run took 212 s; at two, 85-88% and 127-137 s, three runs passed).
ctest --output-on-failure -j "$((2 * $(nproc)))" --timeout 300 -E 'torch2|torch_ddp|ddp_across|training_job' \
  -R "^(multinode|elastic|elastic_etcd|etcd|head_node|slurm|mpirun|operations|auth)\.|^launcher\.a_stop_ends_every_wait|^($unit_names): |^launcher\.peer_checkpoint\.(a_replacement_node_resumes_from_its_peers_copy_bit_identical|a_second_node_lost_after_the_ring_changed_resumes_from_its_new_peers_copy|a_node_whose_copies_stalled_is_restored_at_its_safe_step)\$|^launcher\.checkpoint\.(a_job_started_again_from_nothing_resumes_from_checkpoint_dir|a_full_checkpoint_dir_costs_training_nothing|status_shows_each_ranks_checkpoints)\$|^launcher\.timeline\.(a_real_two_node_job_becomes_a_trace_on_one_clock|bad_input_is_named_and_the_rest_drawn)\$" ||
  status=$?
if compgen -G "$reports/*" >/dev/null; then
  for f in "$reports"/*; do
    echo "=== $f"
    head -n 80 "$f"
  done
  # Each report's kind and summary once more, last, where a log cut to its tail still shows them.
  for f in "$reports"/*; do
    echo "=== $(basename "$f"): $(grep -m 4 -E 'ERROR:|SUMMARY:|runtime error|leak of' "$f" | tr '\n' ' ')"
  done
  echo "sanitize: the sanitizers reported errors (above)" >&2
  exit 1
fi
[[ $status -eq 0 ]] || { echo "sanitize: tests failed" >&2; exit "$status"; }
echo "sanitize: no reports"
