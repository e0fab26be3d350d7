#!/usr/bin/env bash
# Installs the SDK into a temporary prefix, then builds the example plugin out of tree twice: with find_package
# (CMake) and with pkg-config, and checks each result exports exactly ncclNetPlugin_v6..v12.
set -euo pipefail
build_dir="$1"; source_dir="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
example="$source_dir/examples/minimal-plugin/minimal_plugin.cc"
check_exports="$source_dir/tests/example-plugin/check_exports.sh"

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/nccl_net/net.h"
test -f "$work/prefix/include/nccl_net/sdk/plugin.hpp"

echo "--- find_package(nccl_net_sdk)"
cmake -S "$source_dir/tests/install/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DEXAMPLE_SOURCE="$example" > "$work/configure.log"
cmake --build "$work/cmake-build" > "$work/build.log"
"$check_exports" "$work/cmake-build/libnccl-net-minimal.so"

echo "--- pkg-config nccl-net-sdk"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
cflags=$(pkg-config --cflags nccl-net-sdk)
libs=$(pkg-config --libs nccl-net-sdk)
echo "cflags: $cflags"
echo "libs: $libs"
g++ -std=c++17 -fPIC -shared $cflags "$example" -o "$work/libnccl-net-minimal.so" $libs -lrt
"$check_exports" "$work/libnccl-net-minimal.so"
