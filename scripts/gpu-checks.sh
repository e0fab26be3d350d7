#!/usr/bin/env bash
# gpu-checks.sh: on a GPU machine, build the CUDA kernels standalone, run their correctness check and bandwidth bench.
# Needs only cmake, ninja and nvcc (no GoogleTest, no network). Outputs go to $OUT when set, else to build dir.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NNS_CUDA_BUILD:-/tmp/nns-cuda-standalone}
out=${OUT:-$build/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt" || true
nvcc --version | tail -n 2 | tee -a "$out/gpu.txt"
# Only the arch of this GPU (plus its PTX): the tree's build makes the sm_80/sm_90 fat binary.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')
cmake -S "$root/collectives/cuda/standalone" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" >"$out/build.log" 2>&1
cmake --build "$build" -j"$(nproc)" >>"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
status=0
timeout 180 "$build/nns-cuda-reduce-check" 2>&1 | tee "$out/check.txt" || status=1
timeout 90 "$build/nns-cuda-reduce-bench" 2>&1 | tee "$out/bench.txt" || status=1
echo "gpu-checks: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
