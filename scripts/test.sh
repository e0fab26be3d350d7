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
# Tests are light on CPU but some spawn several processes; two at a time fits a 2-core machine.
# --no-tests=error: a selection that matches nothing (a -R filter after tests were renamed) fails instead of passing.
ctest --preset "$preset" -j 2 --timeout 600 --no-tests=error ${NNS_CTEST_ARGS:-}
