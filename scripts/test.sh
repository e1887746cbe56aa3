#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what is missing, builds, runs the libFuzzer target
# for a bounded time, then every CTest test (Catch2 unit tests, real-process and real-PyTorch interop,
# the latter with torch 1.13 and, labelled torch2, torch 2.14), then the multi-node tests on a
# sanitizer build (scripts/sanitize-test.sh). A warning from g++ 12 or clang 14 (-Wall -Wextra) fails
# it too. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's time, printed as it ends and again at the end (what a run's time is spent on).
stages=()
stage_start=$SECONDS
stage_done() {
  stages+=("$(printf '%-34s %5d s' "$1" $((SECONDS - stage_start)))")
  echo "test: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
print_stages() {
  printf 'test: %s\n' "${stages[@]}"
}

bash scripts/install-deps.sh
stage_done "installing packages"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The torch 2.14 root (minutes on a fresh machine, nothing after) is built while the compiler runs.
bash scripts/torch2-root.sh >"$scratch/torch2-root.log" 2>&1 &
torch2_root=$!

jobs=$(nproc)
build=${DDPRUN_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_BUILD_TESTS=ON
# The project builds without a warning under -Wall -Wextra: a new one fails the run.
cmake --build "$build" -j "$jobs" 2>&1 | tee "$scratch/build.log"
if grep -q 'warning:' "$scratch/build.log"; then
  grep 'warning:' "$scratch/build.log" | sort -u >&2
  echo "test: the build printed warnings" >&2
  exit 1
fi
stage_done "the build (g++)"
# And under clang 14's front end, with the same flags (about 2 minutes on 2 cores).
python3 scripts/clang-warnings.py "$build"
stage_done "clang's warnings"

# The frame parser, and what a store with a secret reads before authentication, under libFuzzer
# with ASan and UBSan (clang-only, so they have their own build).
fuzz_build=${build}-fuzz
cmake -S . -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_FUZZ=ON \
  -DCMAKE_CXX_COMPILER=clang++-14 >/dev/null
cmake --build "$fuzz_build" -j "$jobs"
for fuzzer in wire_parser_fuzz auth_handshake_fuzz; do
  corpus=$scratch/corpus-$fuzzer
  mkdir "$corpus"
  echo "fuzz: $fuzzer for ${DDPRUN_FUZZ_SECONDS:-30} s"
  if ! "$fuzz_build/tests/fuzz/$fuzzer" -max_total_time="${DDPRUN_FUZZ_SECONDS:-30}" \
    "$corpus" >"$corpus/fuzz.log" 2>&1; then
    tail -n 60 "$corpus/fuzz.log"
    echo "fuzz: $fuzzer FAILED" >&2
    exit 1
  fi
  grep -E '^Done' "$corpus/fuzz.log"
done
stage_done "the fuzz build and fuzzing"

if ! wait "$torch2_root"; then
  cat "$scratch/torch2-root.log" >&2
  echo "test: the torch 2.14 root could not be built" >&2
  exit 1
fi

stage_done "waiting for the torch 2.14 root"

(cd "$build" && ctest --output-on-failure -j "$jobs" --timeout 300)
stage_done "every CTest test"

# The multi-node and elastic tests again, on a build with ASan and UBSan.
DDPRUN_SANITIZE_BUILD_DIR=${build}-asan bash scripts/sanitize-test.sh
stage_done "the sanitizer build and its tests"
print_stages
