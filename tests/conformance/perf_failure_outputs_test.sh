#!/usr/bin/env bash
# nccl-net-perf's output when a run fails: a close that hangs after every size was measured still prints the rows
# (the table, or "results" in --json), then the hang, with the hang's exit status; a failure part-way keeps the rows
# before it and names its size; and with --json every failure after
# the arguments parsed is one JSON object on stdout with an "error" (stdout was empty, and the rows were lost).
set -uo pipefail
# The crash below must kill the process with its signal, as it does without a sanitizer (see perf_misbehaving_test.sh).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
perf="$1"
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# Runs the command with stdout in $out and stderr in $err, its status in $status.
run() {
  local errFile
  errFile=$(mktemp)
  out=$(timeout 60 "$@" 2>"$errFile")
  status=$?
  err=$(cat "$errFile")
  rm -f "$errFile"
  echo "\$ $* -> exit status $status"
  echo "$out"
  echo "$err"
}
# $1: a Python expression over d (the JSON object on stdout) that must hold.
json_holds() {
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert eval(sys.argv[2]), d
' "$out" "$1" 2>&1
}

# closeListen never returns (broken-blocking-close-listen): the four rows, then the hang.
run "$perf" broken-blocking-close-listen -b 8 -e 64 -n 2 -w 0 --call-timeout 2
[ "$status" = 4 ] || fail "a close that hangs after the measurement gave exit status $status, expected 4"
for bytes in 8 16 32 64; do
  grep -qE "^ +$bytes +[0-9.]+ +[0-9.]+$" <<<"$out" || fail "no row for $bytes bytes on stdout before the hang"
done
grep -q "every size was measured (the rows above), then the run failed:" <<<"$err" || fail "the failure is not said to come after the measurement"
grep -qE "(measuring|peer) process, closing the connections: hung: closeListen did not return within 2 s" <<<"$err" ||
  fail "the hang in closeListen is not named, as coming while closing"

run "$perf" broken-blocking-close-listen -b 8 -e 64 -n 2 -w 0 --call-timeout 2 --json
[ "$status" = 4 ] || fail "--json: a close that hangs gave exit status $status, expected 4"
json_holds '[r["bytes"] for r in d["results"]] == [8, 16, 32, 64] and "hung: closeListen" in d["error"] and d["exitStatus"] == 4' ||
  fail "--json: the rows and the hang are not both in the JSON object"
# The sweep as asked, so that the run can be repeated from its JSON alone.
json_holds '(d["minBytes"], d["maxBytes"], d["factor"], d["iterations"], d["warmup"], d["callTimeout"]) == (8, 64, 2, 2, 0, 2)' ||
  fail "--json: the sweep's settings (-b -e -f -n -w --call-timeout) are not in the JSON object"

# A failure part-way (test reports 1 byte short from 2 bytes on): the rows before it are kept, and the failure names
# the size and the phase it came in.
run "$perf" broken-wrong-sizes -b 0 -e 64 -n 2 -w 0 --call-timeout 10
[ "$status" = 1 ] || fail "wrong sizes from 2 bytes: exit status $status, expected 1"
for bytes in 0 1; do
  grep -qE "^ +$bytes +[0-9.]+ +[0-9.]+$" <<<"$out" || fail "no row for $bytes bytes, measured before the failure"
done
grep -qE "^ +2 +" <<<"$out" && fail "a row for 2 bytes, where the run failed"
grep -q "the sizes up to 1 bytes were measured (the rows above), then the run failed:" <<<"$err" ||
  fail "the failure is not said to come after the sizes measured"
grep -qE "(measuring|peer) process, at 2 bytes \(latency\): test reported 1 bytes for a receive of 2 bytes" <<<"$err" ||
  fail "the failure does not name its size and phase"
run "$perf" broken-wrong-sizes -b 0 -e 64 -n 2 -w 0 --call-timeout 10 --json
json_holds '[r["bytes"] for r in d["results"]] == [0, 1] and "at 2 bytes (latency): test reported 1 bytes" in d["error"]' ||
  fail "--json: the rows before the failure, or its size, are not in the JSON object"

# Failures with no row measured: still one JSON object, with the error.
run "$perf" no-such-plugin --json
[ "$status" = 2 ] || fail "--json, no such plugin: exit status $status, expected 2"
json_holds 'd["error"] == "plugin did not load" and d["candidates"][0]["requested"] == "no-such-plugin" and "could not open" in d["candidates"][0]["rejectReason"] and d["results"] == []' ||
  fail "--json, no such plugin: no JSON object with the error and the candidate"

run "$perf" minimal -b 64 -e 8 --json
[ "$status" = 2 ] || fail "--json, -b above -e: exit status $status, expected 2"
json_holds 'd["error"] == "-b 64 is above -e 8"' || fail "--json, -b above -e: no JSON object with the error"

run "$perf" broken-wrong-sizes -b 8 -e 64 -n 2 -w 0 --call-timeout 10 --json
[ "$status" = 1 ] || fail "--json, wrong sizes: exit status $status, expected 1"
json_holds '"test reported 7 bytes for a receive of 8 bytes" in d["error"] and d["exitStatus"] == 1' ||
  fail "--json, wrong sizes: no JSON object with the error"

run "$perf" broken-crash-in-test -e 64 --call-timeout 2 --json
[ "$status" = 3 ] || fail "--json, a crash in test: exit status $status, expected 3"
json_holds '"crashed: SIGSEGV in test" in d["error"] and len(d["notes"]) >= 1' ||
  fail "--json, a crash in test: no JSON object naming the crash and the other process"

[ "$failures" -eq 0 ] && echo "rows kept through a failing close, and every failure one JSON object under --json"
exit $((failures > 0))
