#!/usr/bin/env bash
# gpu-checks.sh: everything that needs a GPU, on the lent GPU machine, in steps (all by default, or those named):
#   kernels  the CUDA kernels built standalone (net-api headers and collectives/cuda only): correctness check, bench
#   tree     the tree with CUDA (-DNNS_BUILD_TESTS=OFF: no GoogleTest there): nccl-net-bench, nccl-net-run, plugins
#   bench    nccl-net-bench -G 1 (GPU buffers, staged through pinned host slots by the socket plugin) under
#            nccl-net-run, 2 and 4 ranks sharing the GPU: allreduce with every data type, every op, in place, each
#            algorithm, and every operation through the progress thread (NNS_PROGRESS_INLINE=0); then allgather,
#            reducescatter, broadcast, reduce and sendrecv at 2 and 3 ranks, in place too; any wrong element fails
#   load     real NCCL (PyTorch's, from the nvidia-nccl wheel) loads each built plugin by path in a one-rank
#            communicator (scripts/nccl-load-check.py, through torch.distributed and through ctypes); plugins the tree
#            did not build are taken from $NNS_GPU_PLUGIN_DIR (default <repo>/build/gpu-deps/lib) when there
# Needs cmake, ninja, nvcc; the tree also needs CLI11's headers (CLI/CLI.hpp; a CMake package is not needed): from
# $NNS_CLI11_INCLUDE, <repo>/build/gpu-deps/include, /usr/include or /usr/local/include. The load step needs python3
# with PyTorch (CUDA). Outputs go to $OUT when set, else <build>/out; one line per step and a last PASS/FAIL line;
# exit status 0 when every step run passed, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NNS_CUDA_BUILD:-/tmp/nns-cuda-standalone}
tree=${NNS_GPU_TREE_BUILD:-/tmp/nns-gpu-tree}
out=${OUT:-$build/out}
python=${PYTHON:-python3}
steps=${*:-kernels tree bench load}
mkdir -p "$out"
export PATH=$PATH:/usr/local/cuda/bin
status=0
summary=()
note() {  # step, result, detail
  summary+=("$1: $2${3:+ ($3)}")
  echo "gpu-checks: $1: $2${3:+ ($3)}"
  [ "$2" = PASS ] || status=1
}
wants() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode --format=csv | tee "$out/gpu.txt" ||
  true
nvcc --version | tail -n 2 | tee -a "$out/gpu.txt"
# Only the arch of this GPU (plus its PTX): the tree's default build makes the sm_80/sm_90 fat binary.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')
arch=${arch:-90}
# Ranks sharing one GPU need a compute mode that lets several processes in (Default).
if grep -qi "exclusive\|prohibited" "$out/gpu.txt"; then
  echo "gpu-checks: the GPU's compute mode does not let several processes share it: the bench step will fail"
fi

if wants kernels; then
  if cmake -S "$root/collectives/cuda/standalone" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$out/build.log" 2>&1 &&
    cmake --build "$build" -j"$(nproc)" >>"$out/build.log" 2>&1; then
    kernels=PASS
    timeout 180 "$build/nns-cuda-reduce-check" >"$out/check.txt" 2>&1 || kernels=FAIL
    grep -v '^PASS' "$out/check.txt" | tail -n 20
    timeout 90 "$build/nns-cuda-reduce-bench" 2>&1 | tee "$out/bench.txt" || kernels=FAIL
    note kernels "$kernels" "$(tail -n 1 "$out/check.txt")"
  else
    tail -n 40 "$out/build.log"
    note kernels FAIL "standalone build failed: build.log"
  fi
fi

if wants tree; then
  # CLI11 as an imported target over the headers alone: the GPU machine has the headers carried over, no package.
  cli11=
  for dir in ${NNS_CLI11_INCLUDE:-} "$root/build/gpu-deps/include" /usr/include /usr/local/include; do
    if [ -f "$dir/CLI/CLI.hpp" ]; then
      cli11=$dir
      break
    fi
  done
  mkdir -p "$tree/cli11-config"
  if [ -n "$cli11" ]; then
    cat >"$tree/cli11-config/CLI11Config.cmake" <<EOF
# Written by scripts/gpu-checks.sh: CLI11 is header-only; the GPU machine has its headers without a CMake package.
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$cli11")
endif()
set(CLI11_FOUND TRUE)
EOF
  fi
  cuda_compiler=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  targets=(nccl-net-bench nccl-net-run nccl-net-socket nccl-net-ib nccl-net-ucx)
  if [ -z "$cli11" ]; then
    note tree FAIL "no CLI/CLI.hpp: set NNS_CLI11_INCLUDE (nccl-net-bench and nccl-net-run need CLI11)"
  elif ! cmake -S "$root" -B "$tree" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNNS_BUILD_TESTS=OFF -DNNS_WITH_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$cuda_compiler" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCLI11_DIR="$tree/cli11-config" \
    >"$out/tree-configure.log" 2>&1; then
    tail -n 40 "$out/tree-configure.log"
    note tree FAIL "configure failed: tree-configure.log"
  else
    present=()
    for target in "${targets[@]}"; do
      if ninja -C "$tree" -t query "$target" >/dev/null 2>&1; then present+=("$target"); fi
    done
    grep "nccl-net-sdk:" "$out/tree-configure.log"
    if ! cmake --build "$tree" -j"$(nproc)" --target "${present[@]}" >"$out/tree-build.log" 2>&1; then
      tail -n 40 "$out/tree-build.log"
      note tree FAIL "build failed: tree-build.log"
    elif [ ! -x "$tree/bin/nccl-net-bench" ] || [ ! -x "$tree/bin/nccl-net-run" ]; then
      note tree FAIL "nccl-net-bench or nccl-net-run not built (CLI11 not found?): tree-configure.log"
    else
      note tree PASS "built: ${present[*]}"
    fi
  fi
fi

if wants bench; then
  if [ ! -x "$tree/bin/nccl-net-bench" ] || [ ! -x "$tree/bin/nccl-net-run" ]; then
    note bench FAIL "no nccl-net-bench in $tree/bin: run the tree step first"
  else
    bench_failed=()
    bench_runs=0
    run_collective() {  # label, ranks, collective, bench arguments...
      local label=$1 ranks=$2 collective=$3
      shift 3
      bench_runs=$((bench_runs + 1))
      NCCL_SOCKET_IFNAME=lo timeout 300 "$tree/bin/nccl-net-run" -n "$ranks" --timeout 240 \
        "$tree/bin/nccl-net-bench" "$collective" -p socket -G 1 -c 1 "$@" >"$out/bench-$label.txt" 2>&1
      local rc=$?
      if [ $rc != 0 ] || ! grep -q "^# buffers in GPU memory" "$out/bench-$label.txt"; then
        bench_failed+=("$label (exit $rc)")
        echo "---- bench $label failed (exit $rc):"
        tail -n 15 "$out/bench-$label.txt"
      fi
    }
    run_bench() {  # label, ranks, allreduce arguments...
      local label=$1 ranks=$2
      shift 2
      run_collective "$label" "$ranks" allreduce "$@"
    }
    # The first run says where the slots are and why (NNS_DEBUG=INFO), and covers the sizes up to 64 MiB.
    NNS_DEBUG=INFO run_bench n2-float-to-64M 2 -b 8 -e 64M -f 4 -n 5 -w 1
    sed -n '1,4p' "$out/bench-n2-float-to-64M.txt"
    for ranks in 2 4; do
      for type in int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double fp8e4m3 fp8e5m2; do
        run_bench "n$ranks-$type" "$ranks" -d "$type" -b 4 -e 4M -f 8 -n 2 -w 1
      done
      for op in prod max min avg; do
        run_bench "n$ranks-float-$op" "$ranks" -d float -o "$op" -b 4 -e 4M -f 8 -n 2 -w 1
      done
      run_bench "n$ranks-float-inplace" "$ranks" -d float -I 1 -b 4 -e 16M -f 8 -n 2 -w 1
      for algo in ring tree doubling; do
        run_bench "n$ranks-float-$algo" "$ranks" -d float -A "$algo" -b 4 -e 16M -f 8 -n 2 -w 1
      done
      NNS_PROGRESS_INLINE=0 run_bench "n$ranks-bfloat16-avg-progress-thread" "$ranks" -d bfloat16 -o avg -b 4 \
        -e 16M -f 8 -n 2 -w 1
    done
    run_bench n3-half-avg 3 -d half -o avg -b 4 -e 4M -f 8 -n 2 -w 1
    # The other collectives on GPU buffers: their copies between device buffers and slots, and the kernels that
    # reduce at a block (reducescatter) or at the root (reduce), which allreduce alone never runs. The last rank is
    # the root, so a root other than 0 is covered; 3 ranks, so allgather's and reducescatter's blocks are not halves.
    for ranks in 2 3; do
      for collective in allgather reducescatter broadcast reduce sendrecv; do
        run_collective "n$ranks-$collective" "$ranks" "$collective" -d float -r $((ranks - 1)) -b 96 -e 4M -f 8 \
          -n 2 -w 1
      done
    done
    for collective in allgather reducescatter broadcast reduce; do  # sendrecv has no in-place form
      run_collective "n3-$collective-inplace" 3 "$collective" -d float -I 1 -r 2 -b 96 -e 4M -f 8 -n 2 -w 1
    done
    run_collective n3-reducescatter-bfloat16-avg 3 reducescatter -d bfloat16 -o avg -b 96 -e 4M -f 8 -n 2 -w 1
    run_collective n3-reduce-half-max 3 reduce -d half -o max -r 1 -b 96 -e 4M -f 8 -n 2 -w 1
    if [ ${#bench_failed[@]} = 0 ]; then
      note bench PASS "$bench_runs runs, no wrong element"
    else
      note bench FAIL "${#bench_failed[@]} of $bench_runs runs failed: ${bench_failed[*]}"
    fi
  fi
fi

if wants load; then
  # Plugins the tree could not build here (no verbs or UCX headers) may come prebuilt: $NNS_GPU_PLUGIN_DIR or
  # <repo>/build/gpu-deps/lib, after the tree's own.
  plugin_dirs="$tree/lib:${NNS_GPU_PLUGIN_DIR:-$root/build/gpu-deps/lib}"
  for via in torch ctypes; do
    "$python" "$root/scripts/nccl-load-check.py" --lib-dir "$plugin_dirs" --via "$via" --log-dir "$out" \
      2>&1 | tee "$out/nccl-load-$via.txt"
    rc=${PIPESTATUS[0]}
    note "load ($via)" "$([ "$rc" = 0 ] && echo PASS || echo FAIL)" "$(grep -E '^(PASS|LOADED|SKIP|FAIL) ' \
      "$out/nccl-load-$via.txt" | cut -d: -f1 | paste -sd, -)"
  done
fi

printf '%s\n' "${summary[@]}" >"$out/summary.txt"
echo "gpu-checks: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
