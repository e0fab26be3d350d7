#!/usr/bin/env bash
# Every collective x type x op x rank count x in/out-of-place, odd element counts, checked against the serial reference inside
# nccl-net-bench (-c 1; exit status 3 on any wrong element), through real processes and a real plugin. One launch per
# rank count and form runs every type and op in turn (nccl-net-bench -d all -o all, as nccl-tests'), so the matrix
# costs two process launches per rank count, not 120 (under ASan the launches were most of CI's time).
# Usage: matrix_test.sh BIN_DIR PLUGIN COLLECTIVE [RANK_COUNTS] [extra nccl-net-bench arguments...]
set -euo pipefail
bin="$1"; plugin="$2"; collective="$3"; rank_counts="${4:-1 2 3 5 8}"
shift $(( $# < 4 ? $# : 4 ))
places="0 1"
case "$collective" in sendrecv) places="0" ;; esac
combinations=0
for ranks in $rank_counts; do
  for inplace in $places; do
    # 1001 elements' worth of bytes of the widest type: odd, not a multiple of any rank count or vector width
    # ($NNS_MATRIX_BYTES: another size, such as 10001 elements' worth for buffers registered per call).
    status=0
    bytes="${NNS_MATRIX_BYTES:-8008}"
    out=$("$bin/nccl-net-run" -n "$ranks" --timeout 120 "$bin/nccl-net-bench" "$collective" -p "$plugin" \
      -b "$bytes" -e "$bytes" -n 1 -w 0 -c 1 -I "$inplace" -d all -o all -r $((ranks - 1)) "$@" 2>&1) || status=$?
    # nccl-net-bench -G 1 exits 4 without a CUDA device: the whole matrix is skipped, not failed.
    if [ "$status" -eq 4 ]; then echo "SKIP: no CUDA device"; exit 4; fi
    # The rows: size count type redop root time algbw busbw #wrong.
    rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' <<<"$out" || true)
    wrong=$(awk '/^ +[0-9]+ +[0-9]+ / && $9 != "0" {print "  " $3 " " $4 ": " $9 " wrong"}' <<<"$out")
    # A communicator that could not close its connections cleanly (a plugin refusing a close, such as the strict
    # shim's with memory still registered on the comm) fails the run, though every result was right.
    if [ "$status" -eq 0 ] && grep -q "failed while closing" <<<"$out"; then status=5; fi
    if [ "$status" -ne 0 ] || [ -n "$wrong" ] || [ "$rows" -eq 0 ]; then
      echo "FAILED: $collective on $ranks ranks, in place $inplace, $* (status $status, $rows rows)"
      [ -n "$wrong" ] && echo "$wrong"
      echo "$out" | grep -vE '^ +[0-9]+ +[0-9]+ ' | tail -20
      exit 1
    fi
    combinations=$((combinations + rows))
  done
done
echo "$collective $*: $combinations combinations correct"
