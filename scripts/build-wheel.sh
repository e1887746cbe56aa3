#!/usr/bin/env bash
# Builds dist/ddprun-<version>-py3-none-manylinux_2_<N>_x86_64.whl from this machine's Debian
# packages only (python3-build, setuptools, wheel; no package index): the ddprun and ddprund of the
# build folder, stripped, behind entry points that run them with the installing environment's
# Python (python/ddprun, packaged by packaging/wheel). Checks that the programs need nothing but glibc, tags the wheel with
# the newest glibc symbol version they use, and, where the torch 2.14 root has auditwheel, has it
# confirm the tag. Prints the wheel's path and size.
#
#   DDPRUN_BUILD_DIR   the CMake build folder (default build)
#   DDPRUN_WHEEL_DIR   where the wheel goes (default dist)
#   DDPRUN_WHEEL_PREBUILT=1  package the programs the build folder holds, building nothing (the
#                      suite's test: a build there would relink them under the other tests' feet)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
build=${DDPRUN_BUILD_DIR:-build}
out=$(mkdir -p "${DDPRUN_WHEEL_DIR:-dist}" && cd "${DDPRUN_WHEEL_DIR:-dist}" && pwd)
if [[ ${DDPRUN_WHEEL_PREBUILT:-} == 1 ]]; then
  for program in "$build/launcher/ddprun" "$build/rendezvous/store/ddprund"; do
    [[ -x $program ]] || { echo "build-wheel: no $program to package" >&2; exit 1; }
  done
else
  [[ -f $build/CMakeCache.txt ]] ||
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" --target ddprun ddprund >/dev/null
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r packaging/wheel/. "$stage/"
cp -r python/ddprun "$stage/ddprun"
rm -rf "$stage/ddprun/__pycache__"
mkdir -p "$stage/ddprun/bin"
strip --strip-unneeded -o "$stage/ddprun/bin/ddprun" "$build/launcher/ddprun"
strip --strip-unneeded -o "$stage/ddprun/bin/ddprund" "$build/rendezvous/store/ddprund"

newest=0
for program in "$stage"/ddprun/bin/*; do
  # glibc's own libraries and the kernel's vDSO, nothing else.
  others=$(ldd "$program" | grep -v -E '^\s*(linux-vdso\.so|/lib64/ld-linux-x86-64\.so)' |
    grep -v -E '^\s*lib(c|m|pthread|dl|rt)\.so\.[0-9]+ ' || true)
  if [[ -n $others ]]; then
    echo "build-wheel: $(basename "$program") needs more than glibc:" >&2
    echo "$others" >&2
    exit 1
  fi
  minor=$(objdump -T "$program" | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1)
  ((minor > newest)) && newest=$minor
done
tag=manylinux_2_${newest}_x86_64
version=$(sed -n 's/^project(ddprun VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)

DDPRUN_VERSION=$version DDPRUN_PLATFORM_TAG=$tag /usr/bin/python3 -m build --wheel \
  --no-isolation --outdir "$stage/dist" "$stage" >"$stage/build.log" 2>&1 ||
  { cat "$stage/build.log" >&2; exit 1; }
wheel=$out/ddprun-$version-py3-none-$tag.whl
mv "$stage/dist/$(basename "$wheel")" "$wheel"

root=${DDPRUN_TORCH2_ROOT:-/var/cache/ddprun/torch2-forky}
if [[ -d $root/usr/lib/python3/dist-packages/auditwheel ]]; then
  # Inside the root the checkout is bound at its own path; the wheel is copied there for the look.
  look=$(mktemp -d -p "$PWD" .wheel-look.XXXXXX)
  trap 'rm -rf "$stage" "$look"' EXIT
  cp "$wheel" "$look/"
  report=$(scripts/torch2/python -m auditwheel show "$look/$(basename "$wheel")")
  echo "$report" | tr '\n' ' ' | grep -q "is consistent with the following platform tag: \"$tag\"" ||
    { echo "build-wheel: auditwheel disagrees with $tag:" >&2; echo "$report" >&2; exit 1; }
  echo "build-wheel: auditwheel: consistent with $tag" >&2
else
  echo "build-wheel: auditwheel not in the torch 2.14 root; the tag rests on ldd and objdump" >&2
fi
echo "$wheel $(stat -c %s "$wheel") bytes"
