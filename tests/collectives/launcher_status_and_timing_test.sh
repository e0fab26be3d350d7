#!/usr/bin/env bash
# launcher_status_and_timing_test.sh BIN_DIR: nccl-net-run's exit status for a rank that exits 1 (the commonest
# failure: it is a failure like any other), the signal it passes on (the one it was sent, not SIGTERM in its place),
# its grace period and its timeout kept to the second they name (not merely "within 10 s"), and a rank that left its
# own process group (for another in the launcher's session) still signalled itself.
# The launchers that get signals run without `timeout` around them (GNU timeout passes a signal on twice: to its
# child and to its process group); the test's TIMEOUT guards them.
set -uo pipefail
set -m  # background jobs keep SIGINT (without job control bash starts them with it ignored)
run="$1/nccl-net-run"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
fail() { echo "FAILED: $*"; status=1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# started FILE: waits (up to 10 s) until FILE exists.
started() {
  for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}

# A rank that exits 1 while the others end well: the job failed, with that status, and the rank is named.
out=$(timeout 20 "$run" -n 3 sh -c '[ "$NNS_RANK" = 1 ] && exit 1; exit 0' 2>&1)
code=$?
[ "$code" -eq 1 ] || fail "a rank exiting 1: launcher exit status $code, expected 1 ($out)"
grep -q "rank 1 failed (status 1)" <<<"$out" || fail "a rank exiting 1 was not named: $out"

# SIGINT to the launcher reaches the ranks as SIGINT (a rank's handler for Ctrl-C runs), and the launcher ends by it.
"$run" -n 2 sh -c "trap 'echo \"rank \$NNS_RANK got INT\"; exit 0' INT; trap 'echo \"rank \$NNS_RANK got TERM\"; exit 0' TERM;
  echo \$\$ > $dir/int.\$NNS_RANK; while :; do sleep 0.05; done" >"$dir/int.out" 2>&1 &
launcher=$!
started "$dir/int.0" && started "$dir/int.1" || fail "int: the ranks did not start"
kill -INT $launcher
wait $launcher
code=$?
[ "$code" -eq 130 ] || fail "int: launcher exit status $code, expected 130 ($(cat "$dir/int.out"))"
[ "$(grep -c "got INT" "$dir/int.out")" -eq 2 ] || fail "int: the ranks did not get SIGINT: $(cat "$dir/int.out")"

# --kill-after 1 with ranks that ignore SIGTERM: SIGKILL 1 s after the launcher's SIGTERM, not seconds later.
"$run" -n 2 --kill-after 1 sh -c "trap '' TERM; echo \$\$ > $dir/grace.\$NNS_RANK; exec sleep 60" 2>/dev/null &
launcher=$!
started "$dir/grace.0" && started "$dir/grace.1" || fail "grace: the ranks did not start"
t0=$(now_ms)
kill -TERM $launcher
wait $launcher
code=$?
elapsed=$(( $(now_ms) - t0 ))
[ "$code" -eq 143 ] || fail "grace: launcher exit status $code, expected 143"
[ "$elapsed" -ge 900 ] && [ "$elapsed" -le 3500 ] || fail "grace: --kill-after 1 took $elapsed ms, expected 900..3500"

# --timeout 2 with ranks that ignore SIGTERM: killed at 2 s, status 124.
t0=$(now_ms)
timeout 20 "$run" -n 2 --timeout 2 sh -c "trap '' TERM; exec sleep 60" 2>/dev/null
code=$?
elapsed=$(( $(now_ms) - t0 ))
[ "$code" -eq 124 ] || fail "timeout: launcher exit status $code, expected 124"
[ "$elapsed" -ge 1900 ] && [ "$elapsed" -le 3500 ] || fail "timeout: --timeout 2 took $elapsed ms, expected 1900..3500"

# A rank that moved to the launcher's process group (setpgid into another group of its session) leaves its own group
# empty: it is signalled itself, and ends with the job.
"$run" -n 1 --kill-after 1 perl -e "setpgrp(0, getpgrp(getppid())) or die 'setpgrp: ' . \$!;
  open(my \$f, '>', '$dir/moved') or die; print \$f \$\$; close(\$f); sleep 60" 2>"$dir/moved.err" &
launcher=$!
started "$dir/moved" || fail "moved: the rank did not start: $(cat "$dir/moved.err")"
kill -TERM $launcher
# Waited for 5 s at most: a rank left unsignalled holds the launcher for good.
for _ in $(seq 50); do
  [ -n "$(ps -o stat= -p $launcher 2>/dev/null | grep -v '^Z')" ] || break
  sleep 0.1
done
if [ -n "$(ps -o stat= -p $launcher 2>/dev/null | grep -v '^Z')" ]; then
  fail "moved: the launcher still runs 5 s after SIGTERM: $(cat "$dir/moved.err")"
  kill -KILL "$(cat "$dir/moved")" $launcher 2>/dev/null
fi
wait $launcher
code=$?
[ "$code" -eq 143 ] ||
  fail "moved: launcher exit status $code, expected 143: $(cat "$dir/moved.err")"
if [ -s "$dir/moved" ] && [ -n "$(ps -o stat= -p "$(cat "$dir/moved")" 2>/dev/null | grep -v '^Z')" ]; then
  fail "moved: the rank is still running"
  kill -KILL "$(cat "$dir/moved")" 2>/dev/null
fi

[ "$status" -eq 0 ] && echo "launcher status and timing: as documented"
exit "$status"
