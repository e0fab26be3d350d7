#!/usr/bin/env bash
# nccl-net-info on a folder holding a working plugin beside plugins that crash (SIGSEGV in init, in getProperties of
# their second device) or hang (init never returns): every library is listed with its verdict, the crash or hang
# named with the call, the hanging one cut off after --call-timeout; the chosen plugin's devices are listed up to the
# one whose getProperties crashed; a crash in the candidate list ends it as it would end NCCL. --json stays valid.
set -euo pipefail
# A sanitizer build would turn the plugins' SIGSEGV into its own report and an abort (SIGABRT): let the signal kill the
# child as it does without one, since what is checked is that the tool names the signal and the call.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
info="$1"; lib="$2"; misbehaving="$3"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$lib/libnccl-net-minimal.so" "$work/libnccl-net-working.so"
for bug in crash-in-init hang-in-init crash-in-properties; do cp "$misbehaving/libnccl-net-broken-$bug.so" "$work/"; done
fail() { echo "FAILED: $*"; exit 1; }

start=$SECONDS
set +e
out=$("$info" -L "$work" --call-timeout 2 -p "$work/libnccl-net-working.so" 2>&1)
status=$?
set -e
echo "$out"
[ "$status" = 0 ] || fail "exit status $status with a working plugin chosen"
(( SECONDS - start < 30 )) || fail "took $((SECONDS - start)) s: the hanging plugin was not cut off"
expect() { grep -A2 -F "$1" <<<"$out" | grep -qE -- "$2" || fail "for $1: no line matching '$2'"; }
expect libnccl-net-working.so "loads through ncclNet_v12"
expect libnccl-net-broken-crash-in-init.so "crashed: SIGSEGV in init through ncclNet_v12 of .*broken-crash-in-init.so"
expect libnccl-net-broken-hang-in-init.so "hung: init through ncclNet_v12 of .* did not return within 2 s"
expect libnccl-net-broken-crash-in-properties.so "loads through ncclNet_v12"
grep -q "CHOSEN through ncclNet_v12" <<<"$out" || fail "the working plugin is not chosen"

# The chosen plugin crashes listing its second device: the first is listed, the crash named.
set +e
out=$("$info" -L "$work" --call-timeout 2 -p broken-crash-in-properties 2>&1)
status=$?
set -e
echo "$out"
[ "$status" = 0 ] || fail "exit status $status: the plugin loads, only its second device crashes"
grep -q "crashed: SIGSEGV in getProperties(1)" <<<"$out" || fail "the getProperties(1) crash is not named"
grep -qE "^  0   shm0 " <<<"$out" || fail "device 0 is not listed"

# A list whose first entry crashes in init: NCCL would die there, so the entry after it is not tried.
set +e
out=$("$info" -L "$work" --call-timeout 2 -p broken-crash-in-init,working 2>&1)
status=$?
set -e
echo "$out"
[ "$status" = 1 ] || fail "exit status $status: nothing NCCL would get to loads"
grep -q "crashed: SIGSEGV in init through ncclNet_v12 of .*: NCCL would crash here too" <<<"$out" ||
  fail "the crashing candidate is not named"
grep -q "not tried: NCCL would not get past broken-crash-in-init" <<<"$out" || fail "the later entry is not listed"
# ... listed as the loader lists a candidate: the files it tried, the one it opened and what that exports.
grep -qE "^    tried  $work/libnccl-net-broken-crash-in-init.so$" <<<"$out" || fail "the crashing candidate's tries"
grep -qE "^    opened $work/libnccl-net-broken-crash-in-init.so, exports ncclNet v12$" <<<"$out" ||
  fail "the crashing candidate's opened library is not listed"

# A device that cannot be described: the rejection keeps what the plugin logged while listing its devices, as it
# does for init (it was on stderr only, and --json's rejectReason lost it).
set +e
out=$("$info" -L "$misbehaving" --call-timeout 2 -p broken-properties-refused 2>/dev/null)
set -e
grep -q "rejected: getProperties(0) returned ncclInternalError (it logged: NET/broken-properties-refused : port 1 of device 0 has no link)" <<<"$out" ||
  fail "the getProperties rejection does not say what the plugin logged: $out"

# A FIFO named like a plugin: dlopen's open would wait for a writer (NCCL's would). The loader refuses what is not a
# regular file before dlopen, so the FIFO is named as what it is and nothing hangs.
fifo=$(mktemp -d)
mkfifo "$fifo/libnccl-net-fifo.so"
set +e
out=$(timeout 20 "$info" -L "$fifo" --call-timeout 5 -p fifo 2>&1)
status=$?
set -e
rm -r "$fifo"
echo "$out"
[ "$status" = 1 ] || fail "exit status $status with a FIFO as the only candidate"
grep -qF "$fifo/libnccl-net-fifo.so: a FIFO, not a library: not opened, as its open would wait for a writer" <<<"$out" ||
  fail "the FIFO is not named as one"
grep -q "hung" <<<"$out" && fail "the FIFO was opened (the probe hung on it)"

# --json: valid, every library present with its verdict, the crash flagged.
"$info" --json -L "$work" --call-timeout 2 -p broken-crash-in-properties | python3 -c '
import json, sys
d = json.load(sys.stdin)
verdicts = {f["path"].rsplit("/", 1)[1]: f for f in d["found"]}
assert len(verdicts) == 4, list(verdicts)
assert verdicts["libnccl-net-broken-crash-in-init.so"]["crashed"], verdicts
assert verdicts["libnccl-net-broken-hang-in-init.so"]["hung"], verdicts
assert d["chosen"]["name"] == "broken-crash-in-properties", d["chosen"]
assert [dev["name"] for dev in d["devices"]] == ["shm0"], d["devices"]
assert d["deviceError"] == "crashed: SIGSEGV in getProperties(1)", d["deviceError"]
print("json ok")'
echo "every crash and hang named, every library listed"
