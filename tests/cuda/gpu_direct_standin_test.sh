#!/usr/bin/env bash
# The engine's GPU Direct path through the stand-in NIC (gdr_standin_plugin.cc, a test double): GPU buffers, device
# slots registered as CUDA memory, every received piece flushed. Checks that nccl-net-bench's results are right, that
# the engine chose GPU Direct with flushes ("GPU Direct RDMA enabled ... receives flushed (the device sets
# forceFlush)") and that the plugin flushed at least once per rank. Exits 4 without a CUDA device (skipped).
# Usage: gpu_direct_standin_test.sh BIN_DIR PLUGIN [RANKS] [extra nccl-net-bench arguments...]
set -uo pipefail
bin="$1"; plugin="$2"; ranks="${3:-2}"
shift $(( $# < 3 ? $# : 3 ))
status=0
out=$(NNS_DEBUG=INFO "$bin/nccl-net-run" -n "$ranks" --timeout 120 "$bin/nccl-net-bench" allreduce -p "$plugin" -G 1 \
  -b 4 -e 4M -f 16 -n 1 -w 0 -c 1 -d all -o all "$@" 2>&1) || status=$?
if [ "$status" -eq 4 ]; then echo "SKIP: no CUDA device"; exit 4; fi
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' <<<"$out" || true)
wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && $9 != "0"' <<<"$out" | wc -l)
problems=()
[ "$status" -eq 0 ] || problems+=("exit status $status")
[ "$rows" -gt 0 ] || problems+=("no result rows")
[ "$wrong" -eq 0 ] || problems+=("$wrong rows with wrong elements")
grep -q 'GPU Direct RDMA enabled.*receives flushed (the device sets forceFlush)' <<<"$out" ||
  problems+=("no 'GPU Direct RDMA enabled ... receives flushed (the device sets forceFlush)' line")
flushing=$(grep -cE '[1-9][0-9]* flushes, [0-9]+ receives into GPU memory' <<<"$out" || true)
[ "$flushing" -ge "$ranks" ] || problems+=("$flushing of $ranks ranks' plugins said they flushed")
if [ ${#problems[@]} -ne 0 ]; then
  printf 'FAILED: %s\n' "${problems[@]}"
  grep -vE '^ +[0-9]+ +[0-9]+ ' <<<"$out" | tail -25
  exit 1
fi
grep -E 'GPU Direct RDMA|flushes, ' <<<"$out" | sort | uniq -c | head -5
echo "allreduce over $plugin, $ranks ranks, GPU buffers: $rows rows correct, every receive flushed"
