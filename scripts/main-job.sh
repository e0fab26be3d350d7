#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs, builds (release) and runs the example plugin's two-process
# bandwidth demo, printing a table. (Replaced by the multi-rank collective benchmark once the engine lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)" --target minimal-plugin-demo nccl-net-minimal
build/release/bin/minimal-plugin-demo build/release/lib/libnccl-net-minimal.so
