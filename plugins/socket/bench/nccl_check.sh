#!/usr/bin/env bash
# nccl_check.sh: on a machine with a GPU, CUDA and NCCL, builds the plugin with g++ alone and runs a checked 2-rank
# all-reduce through real NCCL with it, then the same through NCCL's internal "Socket" transport for comparison.
# Usage: plugins/socket/bench/nccl_check.sh [OUT_DIR] [MAX_BYTES] [ITERATIONS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:-/tmp/nns-socket-nccl}
max=${2:-67108864}
iterations=${3:-10}
cuda=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out"
g++ -std=c++17 -O2 -shared -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -Inet-api/include \
  plugins/socket/socket_plugin.cc plugins/socket/socket_transport.cc -o "$out/libnccl-net-socket.so" -pthread \
  -Wl,--version-script=net-api/share/plugin-exports.map -Wl,--no-undefined
g++ -std=c++17 -O2 -I"$cuda/include" plugins/socket/bench/nccl_allreduce_check.cc -o "$out/nccl_allreduce_check" \
  -L"$cuda/lib64" -lcudart -lnccl
# shellcheck disable=SC2054  # the comma is inside one value (NCCL_DEBUG_SUBSYS's list), not between elements
common=(NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)
echo "=== nns-socket through NCCL $(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2.* 2>/dev/null | sed 's/.*so\.//')"
env "${common[@]}" NCCL_NET_PLUGIN="$out/libnccl-net-socket.so" NCCL_NET=nns-socket \
  "$out/nccl_allreduce_check" "$max" "$iterations" > "$out/nns-socket.log" 2>&1 || { tail -40 "$out/nns-socket.log"; exit 1; }
grep -E "NET/Plugin|Using network|NET/nns-socket" "$out/nns-socket.log" | sed 's/^[^ ]* *[0-9]*:[0-9]* *\[[0-9]*\] *//' | sort -u | head -20
grep -E "^ +[0-9]+ |PASS|FAIL" "$out/nns-socket.log"
echo "=== NCCL's internal Socket transport, same machine, same run"
env "${common[@]}" NCCL_NET_PLUGIN=none NCCL_NET=Socket \
  "$out/nccl_allreduce_check" "$max" "$iterations" > "$out/internal-socket.log" 2>&1 || { tail -40 "$out/internal-socket.log"; exit 1; }
grep -E "Using network|^ +[0-9]+ |PASS|FAIL" "$out/internal-socket.log"
