#!/usr/bin/env bash
# The vendor tools' exit statuses and refusals: a bad argument is exit status 2 with the option named (not CLI11's
# own 105/109), a --junit file that cannot be written is refused before any rule runs, --json stays one valid JSON
# object when the plugin does not load, and nccl-net-perf refuses values that would only fail later (a negative
# device, more receives in flight than NCCL posts, a size test() cannot report, buffers larger than the host).
set -uo pipefail
bin="$1"
failures=0
expect() {  # $1 expected status, $2 text the output must hold, the rest: the command
  local want="$1" text="$2"
  shift 2
  out=$(timeout 60 "$@" 2>&1)
  status=$?
  if [ "$status" != "$want" ] || ! grep -qE -- "$text" <<<"$out"; then
    echo "FAILED: '$*' gave status $status (expected $want) and: $out (expected '$text')"
    failures=$((failures + 1))
  fi
}
expect 2 "not expected: --bogus" "$bin/nccl-net-check" minimal --bogus
expect 2 "not in range" "$bin/nccl-net-check" minimal --call-timeout -1
expect 2 "not expected: --bogus" "$bin/nccl-net-info" --bogus
expect 2 "not in range" "$bin/nccl-net-info" --call-timeout 0
expect 0 "Usage" "$bin/nccl-net-check" --help
expect 2 "no rule named 'zero-bytes'" "$bin/nccl-net-check" minimal --skip zero-bytes
# No plugin named: $NCCL_NET_PLUGIN's, as the other tools take it; neither is a refusal that says so.
expect 0 "^1 passed, 0 failed, 0 skipped" env NCCL_NET_PLUGIN=minimal "$bin/nccl-net-check" --rules zero-byte
expect 2 "no plugin given: name one .* or set NCCL_NET_PLUGIN" env -u NCCL_NET_PLUGIN "$bin/nccl-net-check" --rules zero-byte
# nccl-net-info -p '' is NCCL_NET_PLUGIN set but empty (no external plugin), not unset.
expect 1 "NCCL_NET_PLUGIN: \\(set but empty: no external plugin" env -u NCCL_NET_PLUGIN "$bin/nccl-net-info" -p ''
# "none" names no external plugin: every tool says so (nccl-net-check, perf and topo printed no reason at all).
none="names no external plugin, so NCCL would run on its internal nets alone"
expect 2 "none: the plugin setting \"none\" $none" "$bin/nccl-net-check" none --rules zero-byte
expect 2 "none: NCCL_NET_PLUGIN=none $none" env NCCL_NET_PLUGIN=none "$bin/nccl-net-perf" -b 8 -e 8
[ -x "$bin/nccl-net-topo" ] && expect 1 "--plugin none: no net plugin loaded: the plugin setting \"none\" $none" \
  "$bin/nccl-net-topo" -p none --no-paths --no-search
# --skip applies after --rules: of the two rules named, only the one not skipped runs.
expect 0 "^1 passed, 0 failed, 0 skipped" \
  "$bin/nccl-net-check" minimal --rules properties-sane,zero-byte --skip properties-sane
# ... and a selection that leaves nothing is refused: "0 passed, 0 failed" with exit 0 was a green run of nothing.
expect 2 "--rules and --skip leave no rule to run" "$bin/nccl-net-check" minimal --rules zero-byte --skip zero-byte
expect 2 "--junit /nonexistent-dir/x.xml: cannot write there" \
  "$bin/nccl-net-check" minimal --rules zero-byte --junit /nonexistent-dir/x.xml
expect 2 "not expected: --bogus" "$bin/nccl-net-perf" minimal --bogus
# Every tool names the SDK release it came with.
for tool in nccl-net-check nccl-net-info nccl-net-perf nccl-net-bench nccl-net-run nccl-net-topo; do
  [ -x "$bin/$tool" ] && expect 0 "^nccl-net-sdk [0-9]+\\.[0-9]+\\.[0-9]+$" "$bin/$tool" --version
done
# -L takes one directory: a plugin named after it is the plugin, not a second directory.
lib=$(cd "$bin/../lib" && pwd)
expect 0 "^1 passed, 0 failed, 0 skipped" "$bin/nccl-net-check" -L "$lib" minimal --rules zero-byte
expect 0 "lat\\(us\\)" "$bin/nccl-net-perf" -L "$lib" minimal -b 8 -e 8 -n 2 -w 1
# A -L folder that does not exist is warned of by every tool that takes -L (only nccl-net-info did); the run goes
# on with the others.
missing="warning: search directory /nonexistent-nns-dir: No such file or directory"
expect 0 "$missing" "$bin/nccl-net-check" -L /nonexistent-nns-dir -L "$lib" minimal --rules zero-byte
expect 0 "$missing" "$bin/nccl-net-perf" -L /nonexistent-nns-dir -L "$lib" minimal -b 8 -e 8 -n 1 -w 0
# nccl-net-topo keeps the plugin loaded on purpose and runs hwloc, whose unloaded components leave allocations
# LeakSanitizer cannot attribute: leak checking is off for this one run in an ASan build (as tests/topology does).
[ -x "$bin/nccl-net-topo" ] &&
  expect 0 "$missing" env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    "$bin/nccl-net-topo" -L /nonexistent-nns-dir -L "$lib" -p minimal --no-paths --no-search
expect 2 "--dev: Value -1 not in range 0" "$bin/nccl-net-perf" minimal -d -1
expect 2 "--window: Value 33 not in range 1 to 32" "$bin/nccl-net-perf" minimal -W 33
expect 2 "--maxbytes: Value 2147483648 not in range" "$bin/nccl-net-perf" minimal -e 2G
expect 2 "needs [0-9.]+ GiB of buffers in each of the two processes" \
  "$bin/nccl-net-perf" minimal -b 1G -e 2147483647 -W 32 -m 64
expect 2 "--bind-to: bogus not in" "$bin/nccl-net-perf" minimal --bind-to bogus
# The ends of each range: -m 65 is past NCCL's 64 grouped receives, -W 0 keeps no receive in flight, and a call may
# take an hour at most.
expect 2 "--multi-recv: Value 65 not in range 1 to 64" "$bin/nccl-net-perf" minimal -m 65
expect 2 "--window: Value 0 not in range 1 to 32" "$bin/nccl-net-perf" minimal -W 0
expect 2 "--call-timeout: Value 3601 not in range 1 to 3600" "$bin/nccl-net-perf" minimal --call-timeout 3601
# The buffers counted: -W x -m of -e bytes in each of the two processes (a host with 256 GiB available runs it).
if [ "$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)" -lt $((256 << 20)) ]; then
  expect 2 "^nccl-net-perf: -e 2147483647 with -W 1 and -m 64 needs 128.0 GiB of buffers in each of the two processes, 256.0 GiB in all; this host has [0-9.]+ GiB available" \
    "$bin/nccl-net-perf" minimal -b 8 -e 2147483647 -W 1 -m 64
fi
# Two processes' buffers, not one: about 0.75 of the memory available in each is refused. (Were it taken, the minimal
# plugin's maxRecvs of 1 would refuse -m 2 before any buffer is allocated.)
available_kib=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
each=$((available_kib * 3 / 4 / 2 / 32))  # KiB per buffer of -W 32 -m 2
if [ "$each" -ge 1 ] && [ "$each" -le $((2147483647 >> 10)) ]; then
  expect 2 "needs [0-9.]+ GiB of buffers in each of the two processes" \
    "$bin/nccl-net-perf" minimal -b 8 -e "${each}K" -W 32 -m 2
fi
# What the device allows, from its properties: a device the plugin has, -e up to its maxP2pBytes (small-messages:
# 4096), -m up to its maxRecvs (minimal: 1). Both processes refuse it; the measuring one is named, the peer's
# refusal a note when it came in time.
expect 0 '"bytes": 4096' "$bin/nccl-net-perf" small-messages -b 4096 -e 4096 -n 2 -w 0 --json
expect 1 "^nccl-net-perf: (measuring|peer) process: -e 4097 exceeds the device's maxP2pBytes 4096 \\(NCCL never sends more in one message\\)" \
  "$bin/nccl-net-perf" small-messages -b 4096 -e 4097
expect 1 "^nccl-net-perf: (measuring|peer) process: -m 2 exceeds the device's maxRecvs 1$" "$bin/nccl-net-perf" minimal -m 2 -e 8
expect 1 "^nccl-net-perf: (measuring|peer) process: device 1 absent$" "$bin/nccl-net-perf" minimal -d 1 -e 8
# Both failed alike: when the peer's refusal is noted too ("also failed", when it reaches the tool's process within
# 100 ms of the first: not always on a busy host, so up to 3 runs), the measuring process is the one named.
for _ in 1 2 3; do
  out=$(timeout 60 "$bin/nccl-net-perf" minimal -d 1 -e 8 2>&1)
  grep -q "also failed" <<<"$out" || continue
  if [ "$out" != $'nccl-net-perf: measuring process: device 1 absent\nnccl-net-perf: peer process: also failed: device 1 absent' ]; then
    echo "FAILED: nccl-net-perf minimal -d 1: both processes failed, and not the measuring process first: $out"
    failures=$((failures + 1))
  fi
  break
done
# The header says where the two processes run: bound on 2 or more CPUs, unbound (and why) on one or with none.
expect 0 "# processes: (measuring process on CPUs [0-9,-]+, peer on CPUs [0-9,-]+|not bound)" \
  "$bin/nccl-net-perf" minimal -b 8 -e 8 -n 2 -w 0
expect 0 "# processes: not bound \\(--bind-to none\\)" "$bin/nccl-net-perf" minimal -b 8 -e 8 -n 2 -w 0 --bind-to none
expect 0 "# processes: not bound \\(2 processes on 1 CPU\\)" taskset -c 0 "$bin/nccl-net-perf" minimal -b 8 -e 8 -n 2 -w 0

# --json when nothing loads: still one object, saying so.
out=$("$bin/nccl-net-check" no-such-plugin --json 2>/dev/null)
status=$?
if [ "$status" != 2 ] || ! python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["loaded"] is False and d["rules"] == [] and "could not open" in d["candidates"][0]["rejectReason"], d
' "$out"; then
  echo "FAILED: nccl-net-check no-such-plugin --json gave status $status and: $out"
  failures=$((failures + 1))
fi
# An integer option given something that is not a whole number says so ("-n abc" read "Value abc not in range"), and
# nccl-net-perf's -n stops where the latency's kept round trips would not fit (-n 2147483647 ended in bad_alloc).
expect 2 "--iters: Value abc is not a whole number" "$bin/nccl-net-perf" minimal -n abc
expect 2 "--iters: Value 2.5 is not a whole number" "$bin/nccl-net-bench" -n 2.5
# A whole number in range written otherwise is refused for its form, not as out of range (it read "not in range 1 to
# 10000000"); one out of range is out of range however written.
expect 2 "--iters: Value 2.0 is not written as a whole number" "$bin/nccl-net-perf" minimal -n 2.0
expect 2 "--iters: Value 1e3 is not written as a whole number" "$bin/nccl-net-perf" minimal -n 1e3
expect 2 "--iters: Value 1e9 not in range 1 to 10000000" "$bin/nccl-net-perf" minimal -n 1e9
# Decimal only: CLI11's strtoll took "0x10" as 16 and "010" as 8.
expect 2 "--iters: Value 0x10 is not written as a whole number in decimal digits" "$bin/nccl-net-perf" minimal -n 0x10
if [ -x "$bin/nccl-net-perf" ]; then
  iterations=$("$bin/nccl-net-perf" minimal -n 010 -b 8 -e 8 --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["iterations"])')
  if [ "$iterations" != 10 ]; then
    echo "FAILED: nccl-net-perf -n 010 ran $iterations iterations, not 10"
    failures=$((failures + 1))
  fi
fi
expect 2 "--iters: Value 2147483647 not in range 1 to 10000000" "$bin/nccl-net-perf" minimal -n 2147483647
expect 2 "--call-timeout: Value 99999999999 not in range 1 to 3600" "$bin/nccl-net-info" --call-timeout 99999999999
# --json with an argument refused: the refusal is a JSON object on stdout too (stdout was empty), for every tool that
# takes --json.
for command in "nccl-net-check minimal --call-timeout abc" "nccl-net-info --call-timeout abc" \
  "nccl-net-perf minimal -n abc" "nccl-net-topo --gpu-sm abc"; do
  [ -x "$bin/${command%% *}" ] || continue
  # shellcheck disable=SC2086 # the command is its words
  out=$("$bin"/$command --json 2>/dev/null)
  status=$?
  if [ "$status" != 2 ] || ! python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert "is not a whole number" in d["error"] and d["exitStatus"] == 2, d
' "$out"; then
    echo "FAILED: $command --json (a refused argument) gave status $status and stdout: $out"
    failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] && echo "every exit status and refusal as documented"
exit $((failures > 0))
