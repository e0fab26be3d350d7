#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine, builds one CMake preset and runs every test of it. Usage: scripts/test.sh [PRESET]
# PRESET defaults to "ci" (release, warnings are errors); "ci-asan" is the ASan+UBSan build, "tsan" the TSan one,
# "ci-clang" the release build by clang.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-ci}"

bash scripts/install-deps.sh
# nvcc is not on Debian's PATH: point CMake at the toolkit when it is installed, so the CUDA kernels, the GPU
# buffer path and their tests are built (and skip at run time without a GPU).
if [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDACXX=/usr/local/cuda/bin/nvcc; fi
cmake --preset "$preset"
cmake --build --preset "$preset" -j "$(nproc)"

# $NNS_BESIDE_TESTS: a command run while the tests run, at the lowest CPU priority (nice 19: it gets little more than
# the CPU time the tests leave, which is much: they wait on sockets, peers and timeouts). CI lints this way. Its
# output follows the tests' summary, and its failure fails this script. Not SCHED_IDLE, which starves a task harder:
# one holding something a test waits for would stall it longer (a stall of 5.7 s hit one CI test once; it did not
# come back in 127 reruns, and its cause is not known).
beside_pid=""
if [ -n "${NNS_BESIDE_TESTS:-}" ]; then
  beside_log="$(mktemp)"
  nice -n 19 bash -c "$NNS_BESIDE_TESTS" >"$beside_log" 2>&1 &
  beside_pid=$!
fi

# Tests are light on CPU but some spawn several processes; two at a time fits a 2-core machine.
# --no-tests=error: a selection that matches nothing (a -R filter after tests were renamed) fails instead of passing.
status=0
ctest --preset "$preset" -j 2 --timeout 600 --no-tests=error ${NNS_CTEST_ARGS:-} || status=$?

if [ -n "$beside_pid" ]; then
  beside_status=0
  wait "$beside_pid" || beside_status=$?
  echo
  echo "=== beside the tests: $NNS_BESIDE_TESTS (exit status $beside_status)"
  cat "$beside_log"
  rm -f "$beside_log"
  [ "$beside_status" = 0 ] || status=1
fi
exit "$status"
