#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: installs, builds (release) and runs a 4-rank allreduce benchmark over
# the socket plugin on loopback, printing the nccl-tests-style table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)" --target nccl-net-run nccl-net-bench nccl-net-socket
NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} build/release/bin/nccl-net-run -n 4 --timeout 600 \
  build/release/bin/nccl-net-bench allreduce -b 8 -e 64M -f 4 -n 20 -w 5 -c 1
