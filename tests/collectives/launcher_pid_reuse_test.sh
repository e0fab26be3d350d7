#!/usr/bin/env bash
# launcher_pid_reuse_test.sh BIN_DIR: nccl-net-run signals no process group once it has found a rank's group empty
# and forgotten it: that id is free, and an unrelated process may lead a group by it. It was still signalled (SIGTERM,
# then SIGKILL) when the ranks ended or were stopped, and the unrelated group died with the job. Runs in a PID
# namespace of its own, where the next pid can be chosen (/proc/sys/kernel/ns_last_pid); skipped (4) without one.
set -u
run="$1/nccl-net-run"
if [ "${2:-}" != inside ]; then
  for flags in "" "--user --map-root-user"; do
    # shellcheck disable=SC2086  # the flags are words
    if unshare $flags --pid --fork --mount-proc sh -c 'echo 50 > /proc/sys/kernel/ns_last_pid' 2>/dev/null; then
      exec timeout 60 unshare $flags --pid --fork --mount-proc "$0" "$1" inside
    fi
  done
  echo "SKIP: no PID namespace whose next pid can be set (unshare --pid, ns_last_pid)"
  exit 4
fi
dir=$(mktemp -d)
unrelated=
trap '[ -n "$unrelated" ] && { kill -KILL $unrelated && wait $unrelated; } 2>/dev/null; rm -rf "$dir"' EXIT
# Rank 1 ends at once, its group with it; rank 0 ends 2 s later, and the launcher then looks for what the ranks left.
$run -n 2 --kill-after 1 sh -c "echo \$\$ > $dir/rank.\$NNS_RANK.pid; [ \$NNS_RANK = 1 ] && exit 0; sleep 2" \
  2>"$dir/launcher.err" &
launcher=$!
for _ in $(seq 100); do
  [ -s "$dir/rank.1.pid" ] && ! kill -0 "$(cat "$dir/rank.1.pid")" 2>/dev/null && break
  sleep 0.02
done
sleep 0.3 # the launcher reaps rank 1 and finds its group empty
rank1=$(cat "$dir/rank.1.pid")
# The next process gets rank 1's pid, and leads a group by it (setsid).
echo $((rank1 - 1)) >/proc/sys/kernel/ns_last_pid
setsid sleep 30 &
unrelated=$!
if [ "$unrelated" != "$rank1" ]; then
  echo "FAILED: the unrelated process got pid $unrelated, not rank 1's $rank1 (the test could not reuse it)"
  exit 1
fi
wait $launcher
status=$?
sleep 0.2
failures=0
[ $status -eq 0 ] || {
  echo "FAILED: launcher exit status $status, expected 0: $(cat "$dir/launcher.err")"
  failures=1
}
if ! kill -0 $unrelated 2>/dev/null || [[ "$(ps -o stat= -p $unrelated)" == Z* ]]; then
  echo "FAILED: the unrelated process group $unrelated (rank 1's old pid) was signalled: $(cat "$dir/launcher.err")"
  failures=1
fi
[ $failures -eq 0 ] && echo "PASS: a rank's forgotten process group id, reused by an unrelated group, is not signalled"
exit $failures
