#!/usr/bin/env bash
# nccl-net-perf's output when a run fails: a close that hangs after every size was measured still prints the rows
# (the table, or "results" in --json), then the hang, with the hang's exit status; a failure part-way keeps the rows
# before it and names its size; and with --json every failure after
# the arguments parsed is one JSON object on stdout with an "error" (stdout was empty, and the rows were lost).
set -uo pipefail
# The crash below must kill the process with its signal, as it does without a sanitizer (see perf_misbehaving_test.sh).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
perf="$1"
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail, run, json_holds

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

# A close that returns an error after every size was measured (broken-close-send-fails): the rows, then the failure
# named as coming while closing, exit status 1 (NCCL checks closes: a failed one fails the communicator's destroy).
run "$perf" broken-close-send-fails -b 8 -e 64 -n 2 -w 0 --call-timeout 10
[ "$status" = 1 ] || fail "a close that returns an error gave exit status $status, expected 1"
grep -qE "^ +64 +[0-9.]+ +[0-9.]+$" <<<"$out" || fail "no row for 64 bytes on stdout before the failing close"
grep -qE "(measuring|peer) process, closing the connections: closeSend returned 3 \(ncclInternalError\)" <<<"$err" ||
  fail "the failing closeSend is not named, as coming while closing"

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

# A failure before the first row, without --json: nothing on stdout (no header of an empty table), the failure on
# stderr.
run "$perf" broken-wrong-sizes -b 8 -e 64 -n 2 -w 0 --call-timeout 10
[ "$status" = 1 ] && [ -z "$out" ] || fail "a failure at the first size: exit status $status and stdout '$out', expected 1 and nothing"

# A receive's test that completes it without writing its size: a 0-byte message passes (NCCL reads 0, right for it),
# a 1-byte one fails, said as unwritten rather than as a size (the tool's -1 is no plugin's).
run env NNS_PICKED_BUG=size-unwritten "$perf" broken-picked -b 0 -e 8 -n 2 -w 0 --call-timeout 10 --json
[ "$status" = 1 ] || fail "size-unwritten: exit status $status, expected 1"
json_holds '[r["bytes"] for r in d["results"]] == [0] and d["error"].endswith("process, at 1 bytes (latency): test completed a receive of 1 bytes without reporting its size (sizes[0] left unwritten: NCCL, which zeroes it first, would take 0)")' ||
  fail "size-unwritten: not the 0-byte row, then the 1-byte receive's size named as unwritten"

# A completion never reported (broken-lost-completion's 100th, here in the 50th round trip at 8 bytes): the run fails
# after --call-timeout plus a second, naming the wait, rather than testing the request for ever.
start=$SECONDS
run "$perf" broken-lost-completion -b 8 -e 8 -n 200 -w 0 --call-timeout 1
[ "$status" = 1 ] || fail "a lost completion: exit status $status, expected 1"
grep -qE "^nccl-net-perf: (measuring|peer) process, at 8 bytes \(latency\): a request did not complete within the timeout$" <<<"$err" ||
  fail "a lost completion: the wait that ran out is not named"
(( SECONDS - start <= 30 )) || fail "a lost completion took $((SECONDS - start)) s with --call-timeout 1"

# Every irecv answered NULL ("not now") with nothing in flight: refused until --call-timeout plus a second, said so.
run env NNS_PICKED_BUG=irecv-refused "$perf" broken-picked -b 8 -e 8 -n 2 -w 0 --call-timeout 1
[ "$status" = 1 ] || fail "every irecv refused: exit status $status, expected 1"
grep -qE "^nccl-net-perf: (measuring|peer) process, at 8 bytes \(latency\): irecv refused until the timeout$" <<<"$err" ||
  fail "every irecv refused: the refused post is not named"
# Both processes refused alike (their clocks started together, at the first size): when the tool saw both (the
# second within 100 ms of the first, usually), the measuring process is the one named, the peer's a note.
grep -q "also failed" <<<"$err" && ! grep -qE "^nccl-net-perf: measuring process, at 8 bytes \(latency\): irecv refused until the timeout$" <<<"$err" &&
  fail "every irecv refused, in both processes: the measuring process is not the one named"

# A plugin that ends its process with exit(0) half-way is no finished run: the exit and the call are named, status 3.
run env NNS_SHIM_EXIT_STATUS=0 "$perf" broken-exit-in-send-test -b 8 -e 8 -n 2 -w 0 --call-timeout 10
[ "$status" = 3 ] || fail "exit(0) in test: exit status $status, expected 3"
grep -qE "^nccl-net-perf: (measuring|peer) process, at 8 bytes \(latency\): the process ended \(exit status 0\) in test$" <<<"$err" ||
  fail "exit(0) in test: the exit and the call are not named"
# Where the other process was stopped (when it had not ended too) says how long it had been in its call only from 1 s
# on: it polls test, a call of microseconds.
grep -qE "^nccl-net-perf: (measuring|peer) process: stopped in [a-zA-Z]+, 0\.[0-9] s into it$" <<<"$err" &&
  fail "exit(0) in test: the other process's call is given a time under 1 s"

[ "$failures" -eq 0 ] && echo "rows kept through a failing close, and every failure one JSON object under --json"
exit $((failures > 0))
