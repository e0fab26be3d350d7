#!/usr/bin/env bash
# Every collective x type x op x rank count x in/out-of-place, odd element counts, checked against the serial reference inside
# nccl-net-bench (-c 1; exit status 3 on any wrong element), through real processes and a real plugin.
# Usage: matrix_test.sh BIN_DIR PLUGIN COLLECTIVE [RANK_COUNTS] [extra nccl-net-bench arguments...]
set -euo pipefail
bin="$1"; plugin="$2"; collective="$3"; rank_counts="${4:-1 2 3 5 8}"
shift $(( $# < 4 ? $# : 4 ))
types="int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double fp8e4m3 fp8e5m2"
ops="sum prod max min avg"
places="0 1"
case "$collective" in allgather|broadcast|sendrecv) ops="sum" ;; esac
case "$collective" in sendrecv) places="0" ;; esac
runs=0
for ranks in $rank_counts; do
  for type in $types; do
    for op in $ops; do
      for inplace in $places; do
        # 1001 elements' worth of bytes of the widest type: odd, not a multiple of any rank count or vector width.
        "$bin/nccl-net-run" -n "$ranks" --timeout 60 "$bin/nccl-net-bench" "$collective" -p "$plugin" \
          -b 8008 -e 8008 -n 1 -w 0 -c 1 -I "$inplace" -d "$type" -o "$op" -r $((ranks - 1)) "$@" > /dev/null \
          || { status=$?
               # nccl-net-bench -G 1 exits 4 without a CUDA device: the whole matrix is skipped, not failed.
               if [ "$status" -eq 4 ]; then echo "SKIP: no CUDA device"; exit 4; fi
               echo "FAILED: $collective $type $op on $ranks ranks, in place $inplace, $* (status $status)"; exit 1; }
        runs=$((runs + 1))
      done
    done
  done
done
echo "$collective $*: $runs combinations correct"
