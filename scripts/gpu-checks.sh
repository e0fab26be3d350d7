#!/usr/bin/env bash
# gpu-checks.sh [kernels] [tree] [load] [bench]: everything that needs a GPU, on the lent GPU machine (all four steps
# by default, in this order, or those named; a later call on the same machine, while it is still warm, can rerun
# some: the builds stay in $NNS_GPU_WORK, e.g. `bash scripts/gpu-checks.sh load`).
#
# On the device tool (one H200, 16 CPUs; see /work/.library/device/): first, here, `bash scripts/gpu-prepare.sh`
# (CLI11's headers and the prebuilt IB and UCX plugins into build/gpu-deps, which .gitignore's /build/ keeps out of
# the working tree that travels), then this one call, as is:
#   run(command="bash scripts/gpu-checks.sh", carry=["build/gpu-deps"], timeout_s=420)
# Expected about 4-5 minutes of command time (a minute or two more for the machine's start): the kernels' build
# ~10 s, their check ~15 s on 16 threads, their bench ~10 s, the GoogleTest CUDA tests ~10 s, the tree ~45 s
# (collectives/src/reduce_cpu.cc alone compiles for 30-45 s; 55-65 s with -j2 on the 2-CPU dev machine), load ~1
# min, 20 bench runs ~1-2 min (65 s on host buffers there). load runs before bench: it is short, and the only proof
# that NCCL loads the plugins, which a slow bench must not starve.
# Every step stops at a deadline ($NNS_GPU_DEADLINE, 300 s after the start: later steps and bench runs are skipped
# with a line saying so, and each command's own limit is cut to end within 60 s of it), so the script ends by about
# 360 s plus the tarball, inside timeout_s=420, which with the machine's start leaves the session's 15 minutes room
# for a second call. A bench run that times out stops the bench (the rest would likely wait the same way). Only
# the last 12,000 characters of the output and 8 files under
# $OUT come back: the console has one line per step or run, then the report (report.txt) last; $OUT gets
# report.txt, summary.txt, bench.txt (the kernel bandwidth table) and gpu-checks-logs.tar.gz (every log).
#
# Steps:
#   kernels  the CUDA kernels built standalone (net-api headers and collectives/cuda only; CMake, or nvcc command
#            lines without it: collectives/cuda/standalone/build-nvcc.sh) for this GPU's arch: nns-cuda-reduce-check
#            (every type x op against the CPU reference) and nns-cuda-reduce-bench (float32 and bfloat16 sum, and
#            the copy kernel, at 64, 256 and 1024 MiB as a fraction of cudaMemcpyAsync's device-to-device bandwidth).
#            Fails on any wrong element, on "SKIP: no CUDA device" (this script runs where a GPU is expected), and
#            when float32 or bfloat16 sum is under 80% of the copy at the largest size (1024 MiB: three 1 GiB buffers,
#            far beyond the H200's 60 MB of L2).
#   tree     the tree with CUDA (-DNNS_BUILD_TESTS=OFF: no GoogleTest there) for this arch only: nccl-net-bench,
#            nccl-net-run and the plugins it has the dependencies for (socket; ib and ucx only with their headers)
#   bench    nccl-net-bench -G 1 (GPU buffers, staged through pinned host slots by the socket plugin) under
#            nccl-net-run, 2 to 4 ranks sharing the GPU, -c 1 (every result checked against the serial reference;
#            any wrong element fails): 20 runs, most with -d all -o all (every type x every op in one launch):
#            allreduce at 2, 3 and 4 ranks, in place, each algorithm (ring, tree, doubling), on the progress thread
#            (NNS_PROGRESS_INLINE=0), up to 64 MiB; allgather, reducescatter, broadcast, reduce and sendrecv at 3
#            ranks (root 2), the first four in place at 2 ranks (root 1). 60 s per run at most. Two of the runs
#            go over the GPU Direct stand-in (tests/cuda/gdr_standin_plugin.cc, a test double of a NIC that takes
#            CUDA pointers, which the tree step builds with nvcc): device slots registered as CUDA memory, every
#            received piece flushed; they fail unless the engine says "GPU Direct RDMA enabled ... receives flushed"
#            and each rank's plugin flushed.
#   load     real NCCL (PyTorch's, from the nvidia-nccl-cu13 wheel) loads each plugin by path in a one-rank
#            communicator (scripts/nccl-load-check.py, through torch.distributed and through ctypes); plugins the
#            tree did not build are taken from $NNS_GPU_PLUGIN_DIR (default <repo>/build/gpu-deps/lib). socket must
#            pass; ib may only load (no RDMA device or libibverbs there); ucx is SKIP when its libraries (libucp,
#            libucs) are missing there, with the reason.
# Needs nvcc (PATH or /usr/local/cuda/bin); cmake (PATH, else pip's cmake module of $PYTHON) and ninja (else make)
# for the tree; CLI11's headers (CLI/CLI.hpp) for the tree: $NNS_CLI11_INCLUDE, <repo>/build/gpu-deps/include,
# /usr/include or /usr/local/include; python3 with PyTorch (CUDA) for load.
# Knobs: NNS_GPU_WORK (builds and logs, default /tmp/nns-gpu-checks), NNS_GPU_DEADLINE (seconds, default 300),
# NNS_GPU_BENCH_DEVICE_BUFFERS=0 (the bench step on host buffers: to try the run list on a machine without a GPU).
# Exit status 0 when every step run passed, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${NNS_GPU_WORK:-/tmp/nns-gpu-checks}
build=${NNS_CUDA_BUILD:-$work/kernels}
tree=${NNS_GPU_TREE_BUILD:-$work/tree}
logs=$work/logs
out=${OUT:-$work/out}
python=${PYTHON:-python3}
steps=${*:-kernels tree load bench}
deadline=${NNS_GPU_DEADLINE:-300}
grace=60
device_buffers=${NNS_GPU_BENCH_DEVICE_BUFFERS:-1}
rm -rf "$logs"
mkdir -p "$logs" "$out"
echo "no kernel bandwidth: the kernels step did not run its bench (summary.txt says why)" >"$out/bench.txt"
export PATH=$PATH:/usr/local/cuda/bin
status=0
summary=()
details=()  # files whose last lines go into the report: "title|file|lines"
jobs=$(nproc 2>/dev/null || echo 4)

say() { echo "gpu-checks: [$(printf '%3d' "$SECONDS")s] $*"; }
note() {  # step, result, detail
  summary+=("$1: $2${3:+ ($3)}")
  say "$1: $2${3:+ ($3)}"
  [ "$2" = PASS ] || status=1
}
wants() { [[ " $steps " == *" $1 "* ]]; }
have() { command -v "$1" >/dev/null 2>&1; }
past_deadline() { [ "$SECONDS" -ge "$deadline" ]; }
# left N: N seconds, or fewer so that a command started now ends within $grace seconds of the deadline (10 at least).
left() {
  local want=$1 remaining=$((deadline + grace - SECONDS))
  [ "$remaining" -lt "$want" ] && want=$remaining
  [ "$want" -lt 10 ] && want=10
  echo "$want"
}
# The first line of a log that says what went wrong (else its last line), cut to fit a summary line.
first_error() {
  { grep -m 1 -iE "error|fatal|not found|No such|SKIP|FAIL" "$1" || grep -v '^[[:space:]]*$' "$1" | tail -n 1; } \
    2>/dev/null | cut -c 1-200
}

# pip's cmake and ninja put their programs beside the interpreter or in the modules' own folders.
for tool in cmake ninja; do
  have "$tool" && continue
  dir=$("$python" -c "import $tool, os; print(getattr($tool, 'CMAKE_BIN_DIR', None) or getattr($tool, 'BIN_DIR'))" \
    2>/dev/null) && [ -x "$dir/$tool" ] && PATH=$PATH:$dir
done
generator=(-G Ninja)
have ninja || generator=(-G "Unix Makefiles")

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,compute_cap --format=csv,noheader 2>&1 |
  head -n 1)
have nvidia-smi || gpu="no nvidia-smi on PATH"
nvcc_version=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "no nvcc")
{
  nvidia-smi 2>&1
  echo "nvcc: $nvcc_version; cmake: $(cmake --version 2>/dev/null | head -n 1 || echo none);" \
    "ninja: $(ninja --version 2>/dev/null || echo none); $python: $("$python" --version 2>&1)"
} >"$logs/gpu.txt"
say "GPU: $gpu; nvcc $nvcc_version; $(have cmake && echo cmake || echo 'no cmake'), $(have ninja && echo ninja ||
  echo 'no ninja'); steps: $steps; deadline ${deadline}s"
# Only the arch of this GPU (plus its PTX): the tree's default build makes the sm_80/sm_90 fat binary.
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '. ')
[[ "$arch" =~ ^[0-9]+$ ]] || arch=90
# Ranks sharing one GPU need a compute mode that lets several processes in (Default).
if [[ "$gpu" == *[Ee]xclusive* || "$gpu" == *[Pp]rohibited* ]]; then
  say "the GPU's compute mode does not let several processes share it: the bench step will fail"
fi

kernels_step() {
  local log=$logs/kernels-build.log how rc last verdict result=PASS problems=()
  if have cmake; then
    how=cmake
    timeout "$(left 120)" cmake -S "$root/collectives/cuda/standalone" -B "$build" "${generator[@]}" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$log" 2>&1 &&
      timeout "$(left 240)" cmake --build "$build" -j"$jobs" >>"$log" 2>&1
  else
    how="nvcc command lines (no cmake)"
    timeout "$(left 240)" bash "$root/collectives/cuda/standalone/build-nvcc.sh" "$build" "$arch" >"$log" 2>&1
  fi
  rc=$?
  if [ "$rc" != 0 ] && [ "$how" = cmake ]; then  # CMake's CUDA support failing here need not stop the kernels
    how="nvcc command lines (cmake failed, exit $rc: kernels-build.log)"
    timeout "$(left 240)" bash "$root/collectives/cuda/standalone/build-nvcc.sh" "$build/nvcc" "$arch" \
      >"$logs/kernels-build-nvcc.log" 2>&1 && build=$build/nvcc
    rc=$?
    log=$logs/kernels-build-nvcc.log
  fi
  if [ "$rc" != 0 ]; then
    details+=("kernels: standalone build ($how), exit $rc|$log|15")
    note kernels FAIL "standalone build failed ($how): $(first_error "$log")"
    return
  fi
  say "kernels: built with $how for sm_$arch"
  # The check: every group PASS and its last line "PASS: N checks, 0 failing groups"; SKIP (no device) fails here.
  timeout "$(left 150)" "$build/nns-cuda-reduce-check" >"$logs/kernels-check.txt" 2>&1
  rc=$?
  last=$(tail -n 1 "$logs/kernels-check.txt" | cut -c 1-200)
  if [ "$rc" != 0 ] || ! [[ "$last" == PASS:* ]]; then
    result=FAIL
    problems+=("check: ${last:-no output} (exit $rc$([ "$rc" = 124 ] && echo ', timed out'))")
    details+=("kernels: nns-cuda-reduce-check, lines other than PASS|$logs/kernels-check.txt|-12")
  fi
  say "kernels: check: ${last:-no output} (exit $rc)"
  if [[ "$last" == SKIP* ]]; then  # the bench would say the same
    echo "no kernel bandwidth: nns-cuda-reduce-check said $last" >"$out/bench.txt"
    note kernels FAIL "$last"
    return
  fi
  timeout "$(left 120)" "$build/nns-cuda-reduce-bench" >"$logs/kernels-bench.txt" 2>&1
  rc=$?
  cp "$logs/kernels-bench.txt" "$out/bench.txt"
  # Rows: type, size, "MiB", ms, GB/s, copy GB/s, fraction%. The target: float32 and bfloat16 sum >= 80% of the copy
  # at the largest size.
  verdict=$(awk -v min=80 '
    $3 == "MiB" && $7 ~ /%$/ { size = $2 + 0; if (size > max) max = size; fraction[$1 " " size] = $7 + 0 }
    END {
      if (max == 0) { print "FAIL: no bandwidth rows"; exit }
      result = "PASS"; text = ""
      split("float32 bfloat16", types, " ")
      for (i = 1; i <= 2; i++) {
        key = types[i] " " max
        if (!(key in fraction)) { result = "FAIL"; text = text " " types[i] " missing"; continue }
        if (fraction[key] < min) result = "FAIL"
        text = text sprintf(" %s %.1f%%", types[i], fraction[key])
      }
      printf "%s: sum at %d MiB:%s of the copy (target >= %d%%)\n", result, max, text, min
    }' "$logs/kernels-bench.txt")
  if [ "$rc" != 0 ] || grep -q "^SKIP" "$logs/kernels-bench.txt"; then
    verdict="FAIL: bench exit $rc: $(first_error "$logs/kernels-bench.txt")"
  fi
  echo "$verdict" >>"$out/bench.txt"
  [[ "$verdict" == PASS* ]] || {
    result=FAIL
    problems+=("bench: $verdict")
  }
  say "kernels: bench: $verdict"
  # The GoogleTest CUDA tests of the kernel layer and the pointer classification, built with CUDA on the CPU machine
  # and carried (gpu-prepare.sh): the tree here builds no tests. A skip fails here too (there is a device).
  local gtest=${NNS_GPU_GTEST:-$root/build/gpu-deps/bin/cuda_kernels_test} tests=""
  if [ -x "$gtest" ]; then
    # CudaReduce and CudaDivide are nns-cuda-reduce-check's work above on one thread (about 100 s): left out. Two
    # tests load the socket plugin, carried beside the others (NNS_TEST_PLUGIN_DIR: the binary names this machine's
    # build tree).
    NNS_TEST_PLUGIN_DIR=$root/build/gpu-deps/lib \
      LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      timeout -k 10 "$(left 120)" "$gtest" --gtest_filter='-*CudaReduce.*:*CudaDivide.*' \
      >"$logs/kernels-gtest.txt" 2>&1
    rc=$?
    tests=$(grep -E '^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test' "$logs/kernels-gtest.txt" | tr -s ' ' | paste -sd' ' -)
    if [ "$rc" != 0 ] || grep -qE '^\[ +(FAILED|SKIPPED) +\] [0-9]+ test' "$logs/kernels-gtest.txt" || [ -z "$tests" ]; then
      result=FAIL
      problems+=("cuda_kernels_test: exit $rc: ${tests:-$(first_error "$logs/kernels-gtest.txt")}")
      details+=("kernels: cuda_kernels_test, exit $rc|$logs/kernels-gtest.txt|12")
    fi
    say "kernels: cuda_kernels_test: ${tests:-no summary} (exit $rc)"
    tests="; cuda_kernels_test: $tests"
  else
    say "kernels: no $gtest (gpu-prepare.sh copies it from a build with CUDA): no GoogleTest run"
    tests="; no cuda_kernels_test carried"
  fi
  if [ "$result" = PASS ]; then
    note kernels PASS "$(tail -n 1 "$logs/kernels-check.txt"); ${verdict#PASS: }$tests"
  else
    note kernels FAIL "$(printf '%s; ' "${problems[@]}")"
  fi
}

tree_step() {
  # CLI11 as an imported target over the headers alone: the GPU machine has the headers carried over, no package.
  local cli11='' dir target present=() rc targets=(nccl-net-bench nccl-net-run nccl-net-socket nccl-net-ib nccl-net-ucx)
  for dir in ${NNS_CLI11_INCLUDE:-} "$root/build/gpu-deps/include" /usr/include /usr/local/include; do
    if [ -f "$dir/CLI/CLI.hpp" ]; then
      cli11=$dir
      break
    fi
  done
  if ! have cmake; then
    note tree FAIL "no cmake (on PATH or as $python's cmake module): the tree needs it"
    return
  fi
  if [ -z "$cli11" ]; then
    note tree FAIL "no CLI/CLI.hpp: run scripts/gpu-prepare.sh here and carry build/gpu-deps, or set NNS_CLI11_INCLUDE"
    return
  fi
  mkdir -p "$tree/cli11-config"
  cat >"$tree/cli11-config/CLI11Config.cmake" <<EOF
# Written by scripts/gpu-checks.sh: CLI11 is header-only; the GPU machine has its headers without a CMake package.
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$cli11")
endif()
set(CLI11_FOUND TRUE)
EOF
  if ! timeout "$(left 120)" cmake -S "$root" -B "$tree" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DNNS_BUILD_TESTS=OFF -DNNS_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCLI11_DIR="$tree/cli11-config" >"$logs/tree-configure.log" 2>&1; then
    details+=("tree: configure|$logs/tree-configure.log|15")
    note tree FAIL "configure failed: $(first_error "$logs/tree-configure.log")"
    return
  fi
  for target in "${targets[@]}"; do
    if [ -f "$tree/build.ninja" ]; then
      ninja -C "$tree" -t query "$target" >/dev/null 2>&1 && present+=("$target")
    elif grep -q "^$target:" "$tree/Makefile" 2>/dev/null; then
      present+=("$target")
    fi
  done
  timeout "$(left 300)" cmake --build "$tree" -j"$jobs" --target "${present[@]}" >"$logs/tree-build.log" 2>&1
  rc=$?
  # The GPU Direct stand-in (a test double, tests/cuda), which a tree without tests lacks: the example plugin and
  # the SDK's headers, CUDA's runtime linked statically, exporting only the plugin tables.
  if [ "$rc" = 0 ]; then
    timeout "$(left 120)" nvcc -std=c++20 -O2 -shared -Xcompiler -fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden \
      -I"$root/net-api/include" -I"$root/examples/minimal-plugin" "$root/tests/cuda/gdr_standin_plugin.cc" \
      -Xlinker "--version-script=$root/net-api/share/plugin-exports.map" -lrt \
      -o "$tree/lib/libnccl-net-gdr-standin.so" >>"$logs/tree-build.log" 2>&1 || rc=$?
  fi
  if [ "$rc" != 0 ]; then
    [ "$rc" = 124 ] && sleep 1  # ninja, signalled through timeout's group, may still be writing its log
    details+=("tree: build, exit $rc|$logs/tree-build.log|15")
    note tree FAIL "build failed (exit $rc$([ "$rc" = 124 ] && echo ', timed out')):" \
      "$(first_error "$logs/tree-build.log")"
  elif [ ! -x "$tree/bin/nccl-net-bench" ] || [ ! -x "$tree/bin/nccl-net-run" ]; then
    note tree FAIL "nccl-net-bench or nccl-net-run not built (CLI11 not found?): tree-configure.log"
  else
    note tree PASS "built for sm_$arch: ${present[*]} nccl-net-gdr-standin"
  fi
}

bench_failed=()
bench_skipped=0
bench_runs=0
bench_no_device=
bench_timed_out=
bench_plugin=socket  # -p of the runs (a name or a path)
bench_expect=()      # extended regular expressions each run's output must match
# bench_run LABEL RANKS ENV COLLECTIVE ARGS...: one nccl-net-run launch of nccl-net-bench; ENV: "NAME=VALUE ..." or
# "". Fails on a non-zero exit (3: a wrong element), no result rows, a row with wrong elements, a missing
# "# buffers in GPU memory" header, or output that misses one of bench_expect.
bench_run() {
  local label=$1 ranks=$2 environment=$3 collective=$4 log=$logs/bench-$1.txt rc limit rows wrong start=$SECONDS
  shift 4
  if [ -n "$bench_no_device" ] || [ -n "$bench_timed_out" ] || past_deadline; then
    bench_skipped=$((bench_skipped + 1))
    return
  fi
  bench_runs=$((bench_runs + 1))
  limit=$(left 60)
  # shellcheck disable=SC2086 # ENV is a list of NAME=VALUE words
  env $environment NCCL_SOCKET_IFNAME=lo timeout $((limit + 5)) "$tree/bin/nccl-net-run" -n "$ranks" \
    --timeout "$limit" "$tree/bin/nccl-net-bench" "$collective" -p "$bench_plugin" -G "$device_buffers" -c 1 "$@" \
    >"$log" 2>&1
  rc=$?
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$log")
  wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && $9 != "0"' "$log" | wc -l)
  local header="# buffers in GPU memory" pattern missing=
  [ "$device_buffers" = 1 ] || header="# buffers in host memory"
  for pattern in "${bench_expect[@]}"; do
    grep -qE "$pattern" "$log" || missing="${missing:+$missing; }no line matching '$pattern'"
  done
  if [ "$rc" = 0 ] && [ "$wrong" = 0 ] && [ "$rows" -gt 0 ] && grep -q "^$header" "$log" && [ -z "$missing" ]; then
    say "bench $label: ok ($ranks ranks, $rows rows, $((SECONDS - start)) s)"
    return
  fi
  bench_failed+=("$label")
  say "bench $label: FAILED (exit $rc$([ "$rc" = 124 ] && echo ', timed out'), $rows rows, $wrong with wrong" \
    "elements${missing:+; $missing}): $(first_error "$log")"
  details+=("bench $label ($ranks ranks, $environment $collective $*), exit $rc|$log|8")
  # nccl-net-bench -G 1 exits 4 without a CUDA device: the other runs would say the same.
  if [ "$rc" = 4 ] || grep -q "no CUDA device" "$log"; then bench_no_device=$label; fi
  # A run that timed out (timeout's 124, or 137 once it killed) would likely be followed by more: each costs a
  # minute of the device's time. nccl-net-run returns a failed rank's status instead of 124 when one rank failed
  # and another hung until the limit, so the time it took counts too.
  if [ "$rc" = 124 ] || [ "$rc" = 137 ] || [ $((SECONDS - start)) -ge "$limit" ]; then bench_timed_out=$label; fi
}

bench_step() {
  if [ ! -x "$tree/bin/nccl-net-bench" ] || [ ! -x "$tree/bin/nccl-net-run" ]; then
    note bench FAIL "no nccl-net-bench in $tree/bin: the tree step did not build it"
    return
  fi
  # One timed iteration and the checked one per row: correctness is the point here, not the time.
  local all=(-d all -o all) small=(-b 4 -e 4M -f 16 -n 1 -w 0) large=(-b 16 -e 16M -f 16 -n 1 -w 0)
  local blocks=(-b 96 -e 8M -f 16 -n 1 -w 0) collective
  # The first run says where the slots are and why (NNS_DEBUG=INFO), and covers sizes up to 64 MiB.
  bench_run n2-float-sum-to-64M 2 NNS_DEBUG=INFO allreduce -d float -o sum -b 4 -e 64M -f 4 -n 5 -w 1
  bench_run n2-all 2 "" allreduce "${all[@]}" "${small[@]}"
  # The GPU Direct path, through the stand-in NIC (a test double that reads and writes GPU memory through host
  # shadows: tests/cuda/gdr_standin_plugin.cc; built by the tree step): device slots registered as CUDA memory, every
  # received piece flushed (a piece read unflushed is read before its copy lands: wrong elements), then with the
  # users' buffers registered too (-R 1).
  if [ -f "$tree/lib/libnccl-net-gdr-standin.so" ]; then
    bench_plugin=$tree/lib/libnccl-net-gdr-standin.so
    [ "$device_buffers" = 1 ] && bench_expect=('GPU Direct RDMA enabled.*receives flushed \(the device sets forceFlush\)'
      '[1-9][0-9]* flushes, [1-9][0-9]* receives into GPU memory')
    bench_run n2-gpu-direct-all 2 NNS_DEBUG=INFO allreduce "${all[@]}" "${small[@]}"
    bench_run n3-gpu-direct-registered 3 NNS_DEBUG=INFO allreduce -A ring -d float -o sum -R 1 "${large[@]}"
    bench_plugin=socket
    bench_expect=()
  else
    bench_failed+=("gpu-direct (no libnccl-net-gdr-standin.so: tree-build.log)")
  fi
  bench_run n3-all 3 "" allreduce "${all[@]}" "${small[@]}"
  bench_run n4-all 4 "" allreduce "${all[@]}" "${small[@]}"
  bench_run n2-all-inplace 2 "" allreduce "${all[@]}" -I 1 "${small[@]}"
  bench_run n3-ring-all-types 3 "" allreduce -A ring -d all -o sum "${large[@]}"
  bench_run n4-tree-float-inplace 4 "" allreduce -A tree -d float -o all -I 1 "${large[@]}"
  bench_run n3-doubling-bfloat16 3 "" allreduce -A doubling -d bfloat16 -o all "${large[@]}"
  bench_run n4-all-progress-thread 4 NNS_PROGRESS_INLINE=0 allreduce "${all[@]}" "${small[@]}"
  # The other collectives on GPU buffers: their copies between device buffers and slots, and the kernels that
  # reduce at a block (reducescatter) or at the root (reduce), which allreduce alone never runs. The last rank is
  # the root, so a root other than 0 is covered; 3 ranks, so allgather's and reducescatter's blocks are not halves.
  for collective in allgather reducescatter broadcast reduce sendrecv; do
    bench_run "n3-$collective" 3 "" "$collective" "${all[@]}" -r 2 "${blocks[@]}"
  done
  for collective in allgather reducescatter broadcast reduce; do  # sendrecv has no in-place form
    bench_run "n2-$collective-inplace" 2 "" "$collective" "${all[@]}" -I 1 -r 1 "${blocks[@]}"
  done
  local total=$((bench_runs + bench_skipped)) why=
  if [ -n "$bench_no_device" ]; then
    why="no CUDA device (bench $bench_no_device): $bench_skipped more runs not started"
  elif [ -n "$bench_timed_out" ]; then
    why="bench $bench_timed_out timed out: $bench_skipped more runs not started"
  elif [ "$bench_skipped" != 0 ]; then
    why="$bench_skipped runs skipped: past the ${deadline}s deadline"
  fi
  if [ ${#bench_failed[@]} = 0 ] && [ "$bench_skipped" = 0 ]; then
    note bench PASS "$bench_runs runs, no wrong element"
  else
    local failed="${#bench_failed[@]} of the $bench_runs runs started (of $total) failed"
    [ ${#bench_failed[@]} = 0 ] || failed="$failed: ${bench_failed[*]}"
    note bench FAIL "$failed${why:+; $why}"
  fi
}

load_step() {
  # Plugins the tree could not build here (no verbs or UCX headers) may come prebuilt: $NNS_GPU_PLUGIN_DIR or
  # <repo>/build/gpu-deps/lib, after the tree's own.
  local plugin_dirs="$tree/lib:${NNS_GPU_PLUGIN_DIR:-$root/build/gpu-deps/lib}" via rc results log
  for via in torch ctypes; do
    if past_deadline; then
      note "load ($via)" SKIP "past the ${deadline}s deadline"
      continue
    fi
    log=$logs/nccl-load-$via.txt
    PYTHONUNBUFFERED=1 timeout "$(left 200)" "$python" "$root/scripts/nccl-load-check.py" --lib-dir "$plugin_dirs" \
      --via "$via" --log-dir "$logs" --timeout "$(left 60)" >"$log" 2>&1
    rc=$?
    results=$(grep -E '^(PASS|LOADED|SKIP|FAIL) ' "$log" | cut -d: -f1 | paste -sd, -)
    if [ "$rc" = 0 ]; then
      note "load ($via)" PASS "$results"
    else
      [ -n "$results" ] || details+=("load ($via): nccl-load-check.py, exit $rc|$log|8")
      note "load ($via)" FAIL "exit $rc${results:+: $results}$([ -z "$results" ] && echo ": $(first_error "$log")")"
    fi
  done
}

for step in kernels tree load bench; do
  wants $step || continue
  if past_deadline && [ $step != load ]; then  # load says so per route
    note $step SKIP "past the ${deadline}s deadline"
    continue
  fi
  case $step in kernels) kernels_step ;; tree) tree_step ;; bench) bench_step ;; load) load_step ;; esac
done

# The report: what failed (last lines of its log), the kernel bandwidth table, how NCCL loaded each plugin, the
# summary; at most about 10,500 characters, so that it all comes back in the output's last 12,000.
verdict="gpu-checks: $([ $status = 0 ] && echo PASS || echo FAIL) ($SECONDS s; logs: gpu-checks-logs.tar.gz)"
{
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) &&
    { git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit (modified)"; }
  echo "==== gpu-checks report: $(date -u '+%Y-%m-%d %H:%M UTC'), commit ${commit:-? (no git here)}; GPU: $gpu;" \
    "nvcc $nvcc_version"
  for entry in "${details[@]}"; do
    IFS='|' read -r title file lines <<<"$entry"
    echo "---- $title: $(basename "$file")"
    if [ "$lines" -lt 0 ]; then  # only the lines that are not PASS
      grep -vE '^(PASS|#)' "$file" | head -n "${lines#-}"
    else
      tail -n "$lines" "$file"
    fi 2>/dev/null | cut -c 1-200
  done | head -c 5000
  if grep -q '^# buffers' "$logs/bench-n2-float-sum-to-64M.txt" 2>/dev/null; then
    echo "---- bench: where the slots are (nccl-net-bench's header, NNS_DEBUG=INFO), the largest allreduce row"
    { grep -m 4 -E '^# (nccl-net-bench|buffers)|GPU Direct RDMA' "$logs/bench-n2-float-sum-to-64M.txt"
      grep -E '^ +[0-9]+ +[0-9]+ ' "$logs/bench-n2-float-sum-to-64M.txt" | tail -n 1; } | cut -c 1-200
  fi
  if [ -s "$logs/bench-n2-gpu-direct-all.txt" ]; then
    echo "---- bench over the GPU Direct stand-in: the engine's choice and the plugin's flushes (NNS_DEBUG=INFO)"
    grep -m 4 -E 'GPU Direct RDMA|flushes, ' "$logs/bench-n2-gpu-direct-all.txt" | cut -c 1-200
  fi
  if [ -s "$logs/kernels-bench.txt" ]; then
    echo "---- kernel bandwidth (nns-cuda-reduce-bench; also bench.txt)"
    head -n 30 "$out/bench.txt" | cut -c 1-200
  fi
  for via in torch ctypes; do
    [ -s "$logs/nccl-load-$via.txt" ] || continue
    echo "---- load ($via): NCCL's lines that name the plugin, then the verdict per plugin"
    # nccl-load-check.py prints each plugin's interesting lines (indented) before its verdict line.
    awk '
      /^    / { kept[n++] = $0; next }
      /^(PASS|LOADED|SKIP|FAIL) [a-z]+:/ {
        for (i = 0; i < n; i++)
          if (kept[i] ~ /NCCL version|NET\/Plugin: Loaded net plugin|Assigned NET plugin|Using network/ ||
              kept[i] ~ /^    (torch|libnccl) /) {
            line = kept[i]; sub(/^ +[^ ]+ \[[0-9]+\] NCCL INFO /, "  NCCL INFO ", line); print substr(line, 1, 200)
          }
        print substr($0, 1, 300); n = 0; next
      }
      /^nccl-load-check/ { print substr($0, 1, 300) }' "$logs/nccl-load-$via.txt" | head -n 30
  done
  echo "---- summary"
  printf '%s\n' "${summary[@]}" | cut -c 1-400
} | head -c 10500 >"$out/report.txt"
echo "$verdict" >>"$out/report.txt"
printf '%s\n' "${summary[@]}" "$verdict" >"$out/summary.txt"
tar -czf "$out/gpu-checks-logs.tar.gz" -C "$logs" . 2>/dev/null || echo "gpu-checks: could not write the tarball"
echo
cat "$out/report.txt"
exit $status
