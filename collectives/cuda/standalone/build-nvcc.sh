#!/usr/bin/env bash
# build-nvcc.sh BUILD_DIR [ARCH]: the standalone build (nns-cuda-reduce-check, nns-cuda-reduce-bench) with plain nvcc
# and c++ command lines, for a machine without CMake or ninja (scripts/gpu-checks.sh falls back to it). ARCH: one
# compute capability without the dot (default 90): its machine code plus its PTX. Same sources and flags as
# CMakeLists.txt here (targets.cmake): C++17 for the .cu file, C++20 for the rest, -O3, cudart linked statically.
set -euo pipefail
build=${1:?usage: build-nvcc.sh BUILD_DIR [ARCH]}
arch=${2:-90}
cuda_dir=${NNS_CUDA_BUILD_NVCC_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
nvcc=$cuda_dir/bin/nvcc
cxx=${CXX:-c++}
here=$(cd "$(dirname "$0")" && pwd)
cuda=$here/..
includes=(-I"$cuda/include" -I"$cuda/check" -I"$cuda/../include" -I"$here/../../../net-api/include"
  -I"$cuda_dir/include")
libdir=$cuda_dir/lib64
[ -d "$libdir" ] || libdir=$cuda_dir/targets/x86_64-linux/lib
mkdir -p "$build"
set -x
"$nvcc" -O3 -std=c++17 -gencode "arch=compute_$arch,code=[sm_$arch,compute_$arch]" -Xptxas=-warn-spills \
  -Xcompiler=-Wall,-Wextra "${includes[@]}" -c "$cuda/src/reduce.cu" -o "$build/reduce.o" &
"$cxx" -O3 -std=c++20 -Wall -Wextra "${includes[@]}" -c "$cuda/check/reduce_check.cc" -o "$build/reduce_check.o" &
"$cxx" -O3 -std=c++20 -Wall -Wextra "${includes[@]}" -c "$cuda/check/check_main.cc" -o "$build/check_main.o" &
"$cxx" -O3 -std=c++20 -Wall -Wextra "${includes[@]}" -c "$cuda/bench/reduce_bench.cc" -o "$build/reduce_bench.o" &
for job in $(jobs -p); do wait "$job"; done
"$cxx" -o "$build/nns-cuda-reduce-check" "$build/check_main.o" "$build/reduce_check.o" "$build/reduce.o" \
  -L"$libdir" -lcudart_static -ldl -lrt -pthread
"$cxx" -o "$build/nns-cuda-reduce-bench" "$build/reduce_bench.o" "$build/reduce.o" -L"$libdir" -lcudart_static -ldl \
  -lrt -pthread
