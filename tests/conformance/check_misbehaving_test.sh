#!/usr/bin/env bash
# nccl-net-check against plugins that crash or hang before any rule can run (SIGSEGV in init, init never returns):
# exit status 2 within seconds, naming the call; and against one that crashes in getProperties of its second
# device: properties-sane fails naming the call, the other rules still run and pass. And a harness stopped by SIGTERM
# (a CI job's timeout) or SIGKILL in the middle of a hanging rule leaves no rule or peer process behind.
set -uo pipefail
# A sanitizer build would turn the plugins' SIGSEGV into its own report and an abort (SIGABRT): let the signal kill the
# child as it does without one, since what is checked is that the tool names the signal and the call.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
check="$1"; misbehaving="$2"
fail() { echo "FAILED: $*"; exit 1; }
run() { out=$("$@" 2>&1); status=$?; echo "$out"; echo "exit status $status"; }

run "$check" "$misbehaving/libnccl-net-broken-crash-in-init.so" --call-timeout 2
[ "$status" = 2 ] || fail "crash in init: exit status $status, expected 2 (does not load)"
grep -q "did not load:" <<<"$out" || fail "crash in init: no 'did not load'"
grep -q "crashed: SIGSEGV in init through ncclNet_v12 of " <<<"$out" || fail "crash in init: the call is not named"

start=$SECONDS
run "$check" "$misbehaving/libnccl-net-broken-hang-in-init.so" --call-timeout 2
[ "$status" = 2 ] || fail "hang in init: exit status $status, expected 2"
grep -q "hung: init through ncclNet_v12 of .* did not return within 2 s" <<<"$out" || fail "hang in init: not named"
(( SECONDS - start < 30 )) || fail "hang in init: the harness took $((SECONDS - start)) s"

run "$check" "$misbehaving/libnccl-net-broken-crash-in-properties.so" --call-timeout 2 --rule-timeout 30 \
  --rules properties-sane,zero-byte
[ "$status" = 1 ] || fail "crash in getProperties(1): exit status $status, expected 1"
grep -qE "^FAIL properties-sane +the plugin crashed the process \(signal 11, [^)]*\) in getProperties" <<<"$out" ||
  fail "crash in getProperties(1): properties-sane does not name the call"
grep -qE "^PASS zero-byte " <<<"$out" || fail "the other rule did not run on"
grep -q "^1 passed, 1 failed, 0 skipped" <<<"$out" || fail "no summary"
# Stopped mid-rule: accept blocks for good (the call timeout is far off); nothing of the run may be left.
# TMPDIR: the harness's copies of the plugin (nccl-net-check-XXXXXX) go under $work, so that the SIGKILL case, which
# leaves them, leaves nothing in /tmp; the SIGTERM case must remove them itself.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$misbehaving/../libnccl-net-broken-blocking-accept.so" "$work/"
for sig in TERM KILL; do
  TMPDIR="$work" "$check" "$work/libnccl-net-broken-blocking-accept.so" --rules accept-is-nonblocking \
    --call-timeout 600 --rule-timeout 600 >/dev/null 2>&1 &
  harness=$!
  sleep 2
  kill -$sig $harness
  wait $harness 2>/dev/null
  # They go at once; a sanitized build's processes may take a moment to end: 10 s at most.
  for _ in $(seq 100); do
    left=$(pgrep -f "$work/libnccl-net-broken-blocking-accept.so" || true)
    [ -z "$left" ] && break
    sleep 0.1
  done
  if [ -n "$left" ]; then
    kill -KILL $left 2>/dev/null
    fail "SIG$sig to the harness left its rule processes running: $left"
  fi
  if [ "$sig" = TERM ]; then
    copies=$(find "$work" -mindepth 1 -maxdepth 1 -name 'nccl-net-check-*')
    [ -z "$copies" ] || fail "SIGTERM to the harness left its copies of the plugin: $(find "$work" -path '*nccl-net-check-*')"
  fi
done
# A TMPDIR mounted noexec (hardened hosts): the harness's copies of the plugin do not load. every-version-agrees then
# runs on the rule's instance and says why (it failed the plugin, "failed to map segment"); the peer rules skip.
# Needs root for the mount (as CI has); said and left out where it is refused. The mount is made in a mount namespace
# of the harness's own (unshare), so it goes with the harness however the test ends (a ctest timeout's SIGKILL too).
noexec="$work/noexec"
mkdir -p "$noexec"
# shellcheck disable=SC2016  # expanded by the inner shell
run unshare --mount --propagation private sh -c \
  'mount -t tmpfs -o noexec,size=64m tmpfs "$1" 2>/dev/null || exit 97
   exec env TMPDIR="$1" "$2" "$3" --rules every-version-agrees --call-timeout 10' \
  sh "$noexec" "$check" "$misbehaving/../libnccl-net-socket.so"
if [ "$status" = 97 ] || ! command -v unshare >/dev/null; then
  echo "left out: a TMPDIR mounted noexec (unshare --mount or mount -t tmpfs was refused: not root?)"
else
  [ "$status" = 0 ] || fail "TMPDIR noexec: exit status $status, expected 0"
  grep -qE "^PASS every-version-agrees .*on the rule's instance of the plugin \(its fresh copy did not load: .*\)" \
    <<<"$out" || fail "TMPDIR noexec: every-version-agrees did not fall back to the rule's instance, saying why"
fi
echo "every crash and hang reported, the harness went on"
