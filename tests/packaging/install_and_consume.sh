#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds an out-of-tree program against it twice
# (CMake package and pkg-config) and runs each under ddprun with 2 ranks.
#   install_and_consume.sh BUILD_DIR DDPRUN
set -euo pipefail
build=$1
ddprun=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -f "$tmp/prefix/include/ddp/gradient_sync.hpp"
test -f "$tmp/prefix/lib/cmake/ddprun/ddprunConfig.cmake"

cmake -S "$here/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$ddprun" --standalone --nproc_per_node=2 --no_python "$tmp/consumer/consumer"

PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" g++ -o "$tmp/consumer_pc" "$here/consumer/main.cpp" \
  $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs ddp)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$ddprun" --standalone --nproc_per_node=2 --no_python "$tmp/consumer_pc"
echo "installed SDK: CMake package and pkg-config consumers built and ran: passed"
