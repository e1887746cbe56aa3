#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, builds, runs the libFuzzer target
# for a bounded time, then every CTest test (Catch2 unit tests, real-process and real-PyTorch interop,
# the latter with torch 1.13 and, labelled torch2, torch 2.14), then the multi-node tests on a
# sanitizer build (scripts/sanitize-test.sh). A warning from g++ 12 or clang 14 (-Wall -Wextra) fails
# it too. Every stage runs, and says how it ended and how long it took, even when an earlier one
# failed (a red CTest must not hide the sanitizers' verdict); the script exits non-zero at the end
# if any stage failed. Only the install and the build stop it at once: nothing after them could run.
# What needs only a compiler (clang's warnings, the fuzz build and its fuzzing, the sanitizer build)
# runs while CTest does, at idle priority: the CTest tests mostly wait on processes and sockets, and a
# SCHED_IDLE process gets a core only when no test wants one. It still slows the tests' own CPU work
# on a VM of 2 cores: a kernel of 0.159 s took 0.18-0.30 s of CPU, 0.20-0.34 s of wall time, beside
# two idle-priority compiles. Tests that compare speeds leave room for that.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's outcome and time, printed as it ends and again at the end.
stages=()
failed=0
stage_start=$SECONDS
stage_done() {  # NAME STATUS [SECONDS, for a stage that ran beside another]
  local outcome=passed took=${3:-$((SECONDS - stage_start))}
  if [[ $2 -ne 0 ]]; then
    outcome="FAILED (exit status $2)"
    failed=1
  fi
  stages+=("$(printf '%-46s %5d s  %s' "$1" "$took" "$outcome")")
  echo "test: $1 $outcome, took $took s"
  [[ $# -gt 2 ]] || stage_start=$SECONDS
}
print_stages() {
  printf 'test: %s\n' "${stages[@]}"
}
trap print_stages EXIT

bash scripts/install-deps.sh
stage_done "installing packages" 0
scratch=$(mktemp -d)
trap 'print_stages; rm -rf "$scratch"' EXIT

# The torch 2.14 root (minutes on a fresh machine, nothing after) is built while the compiler runs.
bash scripts/torch2-root.sh >"$scratch/torch2-root.log" 2>&1 &
torch2_root=$!

jobs=$(nproc)
build=${DDPRUN_BUILD_DIR:-build}
# A unity build (16 sources a unit): each unit parses Asio, spdlog, fmt and json once for 16 sources,
# which took a fresh build on 2 cores from 742 s to 470 s (CPU 1393 s to 870 s). A source that
# builds only beside another (a missing include) is found by a plain build, as developers run.
# Debug information: line tables only (-g1), which a backtrace and a debugger's stepping need; the
# full -g cost a fifth of the compiler's time (an agent unit: 33.2 s against 26.4).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_BUILD_TESTS=ON \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
# The project builds without a warning under -Wall -Wextra: a new one fails the run.
cmake --build "$build" -j "$jobs" 2>&1 | tee "$scratch/build.log"
status=0
if grep -q 'warning:' "$scratch/build.log"; then
  grep 'warning:' "$scratch/build.log" | sort -u >&2
  echo "test: the build printed warnings" >&2
  status=1
fi
stage_done "the build (g++)" "$status"

# Beside CTest, at idle priority: each stage writes its log and "STATUS SECONDS" into $scratch.
clangs_warnings() {
  python3 scripts/clang-warnings.py "$build"
}
# The frame parser, and what a store with a secret reads before authentication, under libFuzzer
# with ASan and UBSan (clang-only, so they have their own build).
fuzzing() {
  local fuzz_build=${build}-fuzz status=0 fuzzer corpus i pids=()
  cmake -S . -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_FUZZ=ON \
    -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
  cmake --build "$fuzz_build" -j "$jobs" >/dev/null
  # The two fuzzers side by side (each uses one core), each for a bounded wall-clock time.
  local fuzzers=(wire_parser_fuzz auth_handshake_fuzz)
  for fuzzer in "${fuzzers[@]}"; do
    corpus=$scratch/corpus-$fuzzer
    mkdir "$corpus"
    echo "fuzz: $fuzzer for ${DDPRUN_FUZZ_SECONDS:-30} s"
    "$fuzz_build/tests/fuzz/$fuzzer" -max_total_time="${DDPRUN_FUZZ_SECONDS:-30}" \
      "$corpus" >"$corpus/fuzz.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!fuzzers[@]}"; do
    corpus=$scratch/corpus-${fuzzers[$i]}
    if ! wait "${pids[$i]}"; then
      tail -n 60 "$corpus/fuzz.log"
      echo "fuzz: ${fuzzers[$i]} FAILED"
      status=1
    else
      grep -E '^Done' "$corpus/fuzz.log"
    fi
  done
  return $status
}
sanitizer_build() {
  DDPRUN_SANITIZE_BUILD_DIR=${build}-asan bash scripts/sanitize-test.sh build
}
beside_ctest=(clangs_warnings fuzzing sanitizer_build)
idle=(chrt --idle 0)
"${idle[@]}" true 2>/dev/null || idle=(nice -n 19)
(
  for stage in "${beside_ctest[@]}"; do
    start=$SECONDS
    status=0
    "${idle[@]}" bash -c "set -euo pipefail; $(declare -p build jobs scratch); $(declare -f "$stage"); $stage" \
      >"$scratch/$stage.log" 2>&1 || status=$?
    echo "$status $((SECONDS - start))" >"$scratch/$stage.status"
  done
) &
beside=$!

status=0
if ! wait "$torch2_root"; then
  cat "$scratch/torch2-root.log" >&2
  echo "test: the torch 2.14 root could not be built (the torch2 tests fail without it)" >&2
  status=1
fi
stage_done "waiting for the torch 2.14 root" "$status"

# The tests' temporary files (their own, the workers', the launch logs in Python's temporary
# folder) go into the scratch folder, removed at the end: a run left about 2,300 entries in /tmp.
test_tmp="$scratch/tmp"
mkdir "$test_tmp"
status=0
(cd "$build" && TMPDIR="$test_tmp" ctest --output-on-failure -j "$jobs" --timeout 300) ||
  status=$?
# A failed test's output comes where it ended, mid-log; its end again here, below the summary.
if [[ $status -ne 0 ]]; then
  /usr/bin/python3 scripts/ctest_failures.py "$build" || echo "test: ctest_failures.py failed" >&2
fi
stage_done "every CTest test" "$status"

# What ran beside CTest: each stage's outcome and its own time (the wait for it is the next line's).
wait "$beside"
names=("clang's warnings" "the fuzz build and fuzzing" "the sanitizer build")
for i in "${!beside_ctest[@]}"; do
  read -r status took <"$scratch/${beside_ctest[$i]}.status"
  if [[ $status -ne 0 || ${beside_ctest[$i]} == fuzzing ]]; then
    tail -n 200 "$scratch/${beside_ctest[$i]}.log"
  fi
  stage_done "${names[$i]} (beside CTest)" "$status" "$took"
done
stage_done "waiting for the stages beside CTest" 0

# The multi-node and elastic tests again, on the build with ASan and UBSan.
status=0
TMPDIR="$test_tmp" DDPRUN_SANITIZE_BUILD_DIR=${build}-asan bash scripts/sanitize-test.sh test ||
  status=$?
stage_done "the sanitizer tests" "$status"

if [[ $failed -ne 0 ]]; then
  echo "test: FAILED: a stage above failed" >&2
  exit 1
fi
echo "test: every stage passed"
