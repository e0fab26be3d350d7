#!/usr/bin/env bash
# nccl-net-perf against plugins that hang or crash, while loading (init never returns, SIGSEGV in init) and while
# measuring (a connect that blocks until the peer accepts, so both processes block in it; SIGSEGV in test): with
# --call-timeout 2 each run ends within seconds, with its documented exit status (2 did not load, 3 crashed, 4 hung),
# a line naming the call and the process (measuring or peer), and no process of the run left behind.
set -uo pipefail
# A sanitizer build would turn the plugins' SIGSEGV into its own report and an exit: let the signal kill the process
# as it does without one, since what is checked is that the tool names the signal and the call.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
perf="$1"; lib="$2"; misbehaving="$3"
# Private copies, so that a process left behind is found by its path and no other test's process is.
work=$(mktemp -d)
leftovers() { pgrep -f "$work/" || true; }
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  local left
  mapfile -t left < <(leftovers)
  if [ "${#left[@]}" -gt 0 ]; then kill -KILL "${left[@]}" 2>/dev/null; fi
  rm -rf "$work"
}
trap cleanup EXIT
for plugin in "$misbehaving/libnccl-net-broken-hang-in-init.so" "$misbehaving/libnccl-net-broken-crash-in-init.so" \
              "$lib/libnccl-net-broken-blocking-connect.so" "$lib/libnccl-net-broken-crash-in-test.so"; do
  cp "$plugin" "$work/" || { echo "FAILED: $plugin is not built"; exit 1; }
done
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# $1 expected status, $2 text the output must hold (grep -E), the rest: the command. A run that does not end within
# 30 s is cut off by timeout (status 124): the hang this test is about.
expect() {
  local want="$1" text="$2"
  shift 2
  local start=$SECONDS
  out=$(timeout 30 "$@" 2>&1)
  status=$?
  local took=$((SECONDS - start))
  echo "\$ $* -> exit status $status after $took s"
  echo "$out"
  [ "$status" = "$want" ] || fail "'$*' gave exit status $status, expected $want"
  grep -qE -- "$text" <<<"$out" || fail "'$*': no line matching '$text'"
  # --call-timeout 2: a hang while loading costs 2 s in the workers and 2 s more to name the call.
  (( took <= 15 )) || fail "'$*' took $took s with --call-timeout 2"
  local left
  left=$(leftovers)
  [ -z "$left" ] || fail "'$*' left processes behind: $(ps -o pid=,args= -p "${left//$'\n'/,}")"
}
process="(measuring|peer) process"

expect 2 "hung: init through ncclNet_v12 of $work/libnccl-net-broken-hang-in-init.so did not return within 2 s.*in the $process" \
  "$perf" "$work/libnccl-net-broken-hang-in-init.so" --call-timeout 2
grep -q "plugin did not load:" <<<"$out" || fail "hang in init: no 'plugin did not load:'"

expect 2 "crashed: SIGSEGV in init through ncclNet_v12 of $work/libnccl-net-broken-crash-in-init.so, in the $process" \
  "$perf" "$work/libnccl-net-broken-crash-in-init.so" --call-timeout 2
grep -q "plugin did not load:" <<<"$out" || fail "crash in init: no 'plugin did not load:'"

# Both processes connect before they accept: with a connect that blocks until the peer accepts, both block in it.
expect 4 "nccl-net-perf: $process: hung: connect did not return within 2 s" \
  "$perf" "$work/libnccl-net-broken-blocking-connect.so" -e 64 --call-timeout 2
for side in measuring peer; do
  grep -qE "nccl-net-perf: $side process: (hung: connect|stopped in connect)" <<<"$out" ||
    fail "blocking connect: the $side process's call is not named"
done

expect 3 "nccl-net-perf: $process, at 8 bytes \\(latency\\): crashed: SIGSEGV in test" \
  "$perf" "$work/libnccl-net-broken-crash-in-test.so" -e 64 --call-timeout 2

# The tool killed (SIGKILL: no handler runs) while both workers block in a plugin call: the workers end with it, not
# left connecting for ever.
"$perf" "$work/libnccl-net-broken-blocking-connect.so" -e 64 --call-timeout 60 >/dev/null 2>&1 &
tool=$!
for _ in $(seq 100); do  # both workers started: the tool and its 2 workers run the copy's path
  [ "$(leftovers | wc -l)" -ge 3 ] && break
  sleep 0.1
done
[ "$(leftovers | wc -l)" -ge 3 ] || fail "the tool's 2 workers did not start within 10 s"
{ kill -KILL "$tool" && wait "$tool"; } 2>/dev/null  # (bash's "Killed" notice too)
for _ in $(seq 100); do
  [ -z "$(leftovers)" ] && break
  sleep 0.1
done
left=$(leftovers)
[ -z "$left" ] || fail "the tool killed, its workers went on: $(ps -o pid=,args= -p "${left//$'\n'/,}")"

[ "$failures" -eq 0 ] && echo "every hang and crash named with its call and process, within seconds, nothing left behind"
exit $((failures > 0))
