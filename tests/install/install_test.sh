#!/usr/bin/env bash
# Installs the SDK into a temporary prefix, then builds the example plugin out of tree three times: with find_package
# (CMake), as a copy of examples/minimal-plugin on its own, and with pkg-config, and checks each result exports exactly ncclNetPlugin_v6..v12. Then the installed tools
# as a vendor uses them: nccl-net-info finds the installed socket plugin by name (nccl-net-bench's default) and the
# out-of-tree plugin by path, and nccl-net-check runs rules against the out-of-tree plugin. And the collective engine's
# C API (nns/nns.h, libnns.so): a C program built against it both ways runs one rank.
set -euo pipefail
build_dir="$1"; source_dir="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
example="$source_dir/examples/minimal-plugin/minimal_plugin.cc"
check_exports="$source_dir/tests/example-plugin/check_exports.sh"
nns_c="$source_dir/tests/install/nns_one_rank.c"

cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/nccl_net/net.h"
test -f "$work/prefix/include/nccl_net/sdk/plugin.hpp"
test -f "$work/prefix/include/nns/nns.h" || { echo "not installed: include/nns/nns.h"; exit 1; }
[ -n "$(find "$work/prefix" -name libnns.so)" ] || { echo "not installed: libnns.so"; exit 1; }

echo "--- find_package(nccl_net_sdk)"
cmake -S "$source_dir/tests/install/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DEXAMPLE_SOURCE="$example" -DNNS_C_SOURCE="$nns_c" > "$work/configure.log"
cmake --build "$work/cmake-build" > "$work/build.log"
"$check_exports" "$work/cmake-build/libnccl-net-minimal.so"

echo "--- the installed copy of examples/minimal-plugin (share/nccl_net_sdk), built on its own (its CMakeLists.txt's standalone branch)"
cp -r "$work/prefix/share/nccl_net_sdk/examples/minimal-plugin" "$work/minimal-copy"
cmake -S "$work/minimal-copy" -B "$work/minimal-copy/build" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/copy-configure.log"
cmake --build "$work/minimal-copy/build" > "$work/copy-build.log"
"$check_exports" "$work/minimal-copy/build/libnccl-net-minimal.so"
test -x "$work/minimal-copy/build/minimal-plugin-demo"

echo "--- pkg-config nccl-net-sdk"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib/x86_64-linux-gnu/pkgconfig"
cflags=$(pkg-config --cflags nccl-net-sdk)
libs=$(pkg-config --libs nccl-net-sdk)
echo "cflags: $cflags"
echo "libs: $libs"
g++ -std=c++17 -fPIC -shared $cflags "$example" -o "$work/libnccl-net-minimal.so" $libs -lrt
"$check_exports" "$work/libnccl-net-minimal.so"
# A strict vendor build through pkg-config's flags: the SDK's headers and its log macros (a message with no arguments
# among them) give no warning under -Wpedantic and -Wconversion (with a plain -I they gave hundreds).
printf '%s\n' '#include <nccl_net/sdk.hpp>' 'void strictLog() {' '  NCCL_NET_WARN("no arguments");' \
  '  NCCL_NET_INFO(NCCL_NET, "one argument: %d", 1);' '  NCCL_NET_TRACE(NCCL_NET, "no arguments");' '}' \
  > "$work/strict.cc"
for compiler in g++ clang++; do
  command -v "$compiler" >/dev/null || continue
  "$compiler" -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Werror $cflags \
    "$work/strict.cc"
done

# A plugin in C99 against the ABI headers alone, through the same flags: no C++-only flag among them (gcc -Werror
# refused -fvisibility-inlines-hidden for C), and NCCL_NET_EXPORT keeps its table visible under -fvisibility=hidden.
printf '%s\n' '#include <nccl_net/export.h>' '#include <nccl_net/net_v8.h>' \
  'static ncclResult_t cInit(ncclDebugLogger_t logger) { (void)logger; return ncclSuccess; }' \
  'NCCL_NET_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {.name = "cplugin", .init = cInit};' \
  '/* A library that is also a tuner keeps the tuner symbol NCCL looks for there (a stand-in for its table, only the' \
  '   symbol is checked); any other symbol stays hidden, marked or not. */' \
  'NCCL_NET_EXPORT const int ncclTunerPlugin_v4 = 4;' 'NCCL_NET_EXPORT int cpluginHelperCount = 0;' > "$work/cplugin.c"
gcc -std=c99 -Wall -Wextra -pedantic -Werror -fPIC -shared $cflags "$work/cplugin.c" -o "$work/libnccl-net-cplugin.so" \
  $libs
exported=$(nm -D --defined-only "$work/libnccl-net-cplugin.so" | awk '{print $3}' | grep -v '^_' | tr '\n' ' ')
[ "$exported" = "ncclNetPlugin_v8 ncclTunerPlugin_v4 " ] || { echo "FAILED: the C plugin exports '$exported'"; exit 1; }

# The C API, one rank (NNS_RANK=0 NNS_WORLD_SIZE=1 needs no root address), built both ways: the CMake target
# nccl_net_sdk::nns above, and pkg-config's nns here. Each runs with the installed libraries only (the socket plugin,
# the default, is found in the prefix's lib beside libnns.so or through LD_LIBRARY_PATH).
echo "--- the C API (nns/nns.h, libnns.so)"
nns_cflags=$(pkg-config --cflags nns)
nns_libs=$(pkg-config --libs nns)
echo "cflags: $nns_cflags"
echo "libs: $nns_libs"
gcc -std=c99 -Wall -Werror $nns_cflags "$nns_c" -o "$work/nns-one-rank" $nns_libs
nns_libdir=$(pkg-config --variable=libdir nns)
# A sanitizer build's libnns.so needs its runtime loaded first, and a plain C program does not link it: preload it.
preload=$(ldd "$nns_libdir/libnns.so" | awk '$1 ~ /^lib(asan|tsan)\.so/ {print $3}' | paste -sd: -)
for program in "$work/cmake-build/nns-one-rank" "$work/nns-one-rank"; do
  env -u NCCL_NET_PLUGIN -u NNS_ROOT_ADDR NNS_RANK=0 NNS_WORLD_SIZE=1 LD_LIBRARY_PATH="$nns_libdir" \
    ${preload:+LD_PRELOAD="$preload"} \
    timeout 60 "$program" > "$work/nns-one-rank.log" 2>&1 || { echo "$program failed:"; cat "$work/nns-one-rank.log"; exit 1; }
  cat "$work/nns-one-rank.log"
  grep -q "rank 0 of 1, allreduce and send/recv to itself right" "$work/nns-one-rank.log"
done

echo "--- the installed tools"
prefix="$work/prefix"
for tool in nccl-net-info nccl-net-check nccl-net-perf nccl-net-bench nccl-net-run nccl-net-topo; do
  test -x "$prefix/bin/$tool" || { echo "not installed: bin/$tool"; exit 1; }
done
# By name, as NCCL_NET_PLUGIN=socket and nccl-net-bench's default: the tools look in ../lib beside themselves.
env -u NCCL_NET_PLUGIN -u LD_LIBRARY_PATH "$prefix/bin/nccl-net-info" -p socket > "$work/info-socket.log" 2>&1 || true
if ! grep -q "CHOSEN" "$work/info-socket.log"; then
  echo "the installed nccl-net-info does not find the socket plugin by name:"; cat "$work/info-socket.log"; exit 1
fi
plugin="$work/cmake-build/libnccl-net-minimal.so"
"$prefix/bin/nccl-net-info" -p "$plugin" > "$work/info-path.log" 2>&1
grep -q "exports ncclNet v12 v11 v10 v9 v8 v7 v6" "$work/info-path.log" || { cat "$work/info-path.log"; exit 1; }
"$prefix/bin/nccl-net-check" "$plugin" --rules properties-sane,test-reports-sizes,every-version-agrees \
  --call-timeout 5 --rule-timeout 30
