#!/usr/bin/env bash
# nccl-net-bench's figures as its columns define them, through real processes over the minimal plugin: algbw is the
# size over the time, busbw is algbw times nccl-tests' factor for the collective (2(n-1)/n for allreduce, (n-1)/n for
# allgather and reducescatter, 1 for the others), and the time is one iteration's (-n N divides), of one rank (-a 1:
# the ranks' average, not their sum), so that N of them fit in the run's wall-clock time.
# Usage: bench_columns_test.sh BIN_DIR
set -uo pipefail
bin="$1"
status=0
fail() { echo "FAILED: $*"; status=1; }

# The ratio busbw/algbw on 4 ranks, for every collective; algbw against size/time (time in us, bandwidths in GB/s).
for case in allreduce:1.5 allgather:0.75 reducescatter:0.75 broadcast:1 reduce:1 sendrecv:1; do
  collective=${case%%:*}
  factor=${case#*:}
  out=$(timeout 60 "$bin/nccl-net-run" -n 4 --timeout 50 "$bin/nccl-net-bench" "$collective" -p minimal -b 1M -e 1M \
          -n 4 -w 1 -c 1 2>&1) || fail "$collective on 4 ranks exited $?: $out"
  row=$(grep -E '^ +1048576 ' <<<"$out")
  [ -n "$row" ] || { fail "$collective: no row of 1048576 B: $out"; continue; }
  awk -v f="$factor" -v c="$collective" '{
      size = $1; time = $6; algbw = $7; busbw = $8
      want = size / time / 1e3
      if (algbw < want * 0.98 - 0.002 || algbw > want * 1.02 + 0.002) { print "algbw " algbw " is not size/time " want; bad = 1 }
      if (busbw < algbw * f * 0.98 - 0.002 || busbw > algbw * f * 1.02 + 0.002) { print "busbw " busbw " is not " f " x algbw " algbw; bad = 1 }
    } END { exit bad }' <<<"$row" || fail "$collective's columns: $row"
done

# The reported time is one iteration's, of one rank: 2000 iterations of it (of any -a) fit in the wall-clock time of
# the whole run. An undivided total, or the ranks' times summed for -a 1, is several times larger.
for a in 0 1 2 3; do
  start=$(date +%s%N)
  out=$(timeout 60 "$bin/nccl-net-run" -n 4 --timeout 50 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 \
          -n 2000 -w 0 -c 0 -a "$a" 2>&1) || fail "-a $a exited $?: $out"
  end=$(date +%s%N)
  elapsed_us=$(( (end - start) / 1000 ))
  time_us=$(awk '/^ +8 +2 /{print $6}' <<<"$out")
  [ -n "$time_us" ] || { fail "-a $a: no row of 8 B: $out"; continue; }
  awk -v t="$time_us" -v e="$elapsed_us" 'BEGIN { exit !(t * 2000 <= e) }' ||
    fail "-a $a: 2000 x ${time_us} us is more than the run's ${elapsed_us} us"
done

[ "$status" -eq 0 ] && echo "nccl-net-bench columns: algbw, busbw and time as documented"
exit "$status"
