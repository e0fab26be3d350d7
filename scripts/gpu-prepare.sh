#!/usr/bin/env bash
# gpu-prepare.sh [PLUGIN_DIR]: fills <repo>/build/gpu-deps here for scripts/gpu-checks.sh on the lent GPU machine,
# which has CUDA, PyTorch, CMake and ninja but no CLI11, no verbs or UCX headers, and no network:
#   build/gpu-deps/include/CLI/   CLI11's headers ($NNS_CLI11_INCLUDE, default /usr/include): the tree step's
#                                 nccl-net-bench and nccl-net-run need them
#   build/gpu-deps/lib/           libnccl-net-ib.so and libnccl-net-ucx.so prebuilt here (PLUGIN_DIR, default: the
#                                 lib/ of <repo>/build/release or <repo>/build/ci, the first that holds
#                                 tests/cuda/cuda_kernels_test and the ib plugin; scripts/main-job.sh's release build
#                                 holds neither), for the load step: the GPU machine cannot build them; UCX's own
#                                 libraries (libucp, libucs, libuct, libucm, and libnuma: about 2 MB), which the GPU
#                                 machine's image is not known to have; and libnccl-net-socket.so, which two of
#                                 cuda_kernels_test's tests load (NNS_TEST_PLUGIN_DIR points them here)
#   build/gpu-deps/bin/           cuda_kernels_test (the GoogleTest CUDA tests of the kernel layer and the pointer
#                                 classification; from PLUGIN_DIR/../tests/cuda, when built with CUDA): the tree step
#                                 builds no tests there (no GoogleTest), so the kernels step runs this one. Without it
#                                 this script fails: the device's minutes are too few to spend on a partial run
# .gitignore's /build/ keeps build/gpu-deps out of the working tree that travels: the device call names it in carry
# (the exact call is at the top of scripts/gpu-checks.sh and printed at the end here). Says, for each plugin, which
# shared libraries it needs and which of those the GPU machine may lack; rebuild the plugins first
# (cmake --build <build> --target nccl-net-ib nccl-net-ucx) when it says their sources are newer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/build/gpu-deps
if [ $# -gt 0 ]; then
  plugins=$1
else
  plugins=$root/build/ci/lib
  for build in "$root/build/release" "$root/build/ci"; do
    if [ -x "$build/tests/cuda/cuda_kernels_test" ] && [ -f "$build/lib/libnccl-net-ib.so" ]; then
      plugins=$build/lib
      break
    fi
  done
fi
cli11=${NNS_CLI11_INCLUDE:-/usr/include}
# Libraries every Linux machine with a C++ runtime has (the GPU machine's image is a newer glibc and libstdc++ than
# the ones the plugins were built against, which they accept).
base='^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so'

rm -rf "$deps"
mkdir -p "$deps/include" "$deps/lib" "$deps/bin"
if [ ! -f "$cli11/CLI/CLI.hpp" ]; then
  echo "gpu-prepare: no $cli11/CLI/CLI.hpp (apt-get install libcli11-dev, or set NNS_CLI11_INCLUDE)" >&2
  exit 1
fi
cp -r "$cli11/CLI" "$deps/include/"
echo "gpu-prepare: CLI11 headers from $cli11/CLI ($(grep -m 1 -o 'CLI11_VERSION "[^"]*"' "$cli11/CLI/Version.hpp" \
  2>/dev/null || echo 'version ?'))"

for name in ib ucx; do
  so=$plugins/libnccl-net-$name.so
  if [ ! -f "$so" ]; then
    echo "gpu-prepare: $name: no $so (not built here): the load step reports it SKIP (not built)"
    continue
  fi
  cp "$so" "$deps/lib/"
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  extra=$(grep -vE "$base" <<<"$needed" | paste -sd' ' - || true)
  glibc=$(objdump -T "$so" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  glibcxx=$(objdump -T "$so" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n 1)
  echo "gpu-prepare: $name: $so ($(date -r "$so" '+%Y-%m-%d %H:%M'), $(stat -c %s "$so") bytes): needs" \
    "$(paste -sd' ' - <<<"$needed") (up to $glibc, $glibcxx)"
  if [ -n "$extra" ]; then
    here=$(for lib in $extra; do ldconfig -p | grep -q "^[[:space:]]*$lib " && echo "$lib: here" ||
      echo "$lib: NOT here"; done | paste -sd, - | sed "s/,/, /g")
    echo "gpu-prepare: $name: beyond the C/C++ runtime it links $extra ($here); the GPU machine's image is not" \
      "known to have them: they are copied beside it (below), and the load step puts that folder on" \
      "LD_LIBRARY_PATH (a library still missing there makes $name SKIP with its name, not a failure)"
  fi
  if [ "$name" = ib ]; then
    echo "gpu-prepare: ib: dlopen()s libibverbs.so.1 when NCCL initializes it (no NEEDED entry), which the GPU" \
      "machine likely lacks, as it lacks an RDMA device: NCCL then loads nns-ib but cannot use it (LOADED, not a" \
      "failure)"
  fi
  newer=$(find "$root/plugins/$name" "$root/core" "$root/net-api" -newer "$so" -type f \
    \( -name '*.cc' -o -name '*.hpp' -o -name '*.h' -o -name CMakeLists.txt \) 2>/dev/null | head -n 3)
  if [ -n "$newer" ]; then
    echo "gpu-prepare: $name: WARNING: sources it may use are newer than it (rebuild it first):" \
      "$(paste -sd' ' - <<<"$newer")"
  fi
done

# UCX's libraries beside the plugin (the load step puts build/gpu-deps/lib on LD_LIBRARY_PATH): without them nns-ucx
# was SKIP there. Its transport modules (ucx/libuct_*.so: ib, rdmacm, cma) stay behind: tcp, self and shared memory
# are in libuct itself, and the GPU machine has no RDMA device.
if [ -f "$deps/lib/libnccl-net-ucx.so" ]; then
  copied=()
  for lib in $(ldd "$deps/lib/libnccl-net-ucx.so" | awk '$3 ~ /^\// {print $1 " " $3}' | grep -vE "$base" |
    awk '{print $2}'); do
    cp -L "$lib" "$deps/lib/" && copied+=("$(basename "$lib")")
  done
  echo "gpu-prepare: ucx: its libraries copied beside it: ${copied[*]:-none}"
fi
# The CUDA tests of the kernel layer, built here with CUDA: linked statically but for libcudart (found through
# /usr/local/cuda there).
tests_binary=$(dirname "$plugins")/tests/cuda/cuda_kernels_test
if [ ! -x "$tests_binary" ]; then
  echo "gpu-prepare: no $tests_binary: build it first (CUDACXX=/usr/local/cuda/bin/nvcc cmake --preset ci &&" \
    "cmake --build build/ci --target cuda_kernels_test nccl-net-socket nccl-net-ib nccl-net-ucx)" >&2
  exit 1
fi
cp "$tests_binary" "$deps/bin/"
echo "gpu-prepare: cuda_kernels_test from $tests_binary ($(date -r "$tests_binary" '+%Y-%m-%d %H:%M'))"
if [ ! -f "$plugins/libnccl-net-socket.so" ]; then
  echo "gpu-prepare: no $plugins/libnccl-net-socket.so, which cuda_kernels_test loads" >&2
  exit 1
fi
cp "$plugins/libnccl-net-socket.so" "$deps/lib/"

if ! git -C "$root" check-ignore -q "$deps/include/CLI/CLI.hpp"; then
  echo "gpu-prepare: WARNING: build/gpu-deps is not ignored by git: it would travel twice (tree and carry)" >&2
fi
echo "gpu-prepare: $deps: $(du -sh "$deps" | cut -f 1) (carry's limit: 64 MiB with the working tree)"
echo 'gpu-prepare: device call: run(command="bash scripts/gpu-checks.sh", carry=["build/gpu-deps"], timeout_s=420)'
