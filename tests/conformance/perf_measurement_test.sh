#!/usr/bin/env bash
# What nccl-net-perf measures and reports on a run that succeeds: the sizes of the -b -e -f sweep (0 then 1, the last
# size -e itself), the settings in the JSON object and in the table's header, each column in its unit (latency in us,
# half a round trip; bandwidth in GB/s, counting every message of a grouped receive), and the operations of each
# phase: -w + -n round trips for the latency, at least -W warmup operations then -n timed ones for the bandwidth,
# each run ended by the receiver's zero-byte acknowledgement. Plugins (tests/conformance/broken_shim.cc):
#   broken-picked with NNS_PICKED_BUG=isend-error-once fails each process's 5th isend: where the run fails (which
#     process, which size, which phase) counts the isends before it;
#   NNS_PICKED_BUG=slow-receives completes no receive sooner than 50 ms after it was posted: a floor under every
#     round trip and every bandwidth run, so a latency or a bandwidth in another unit shows;
#   broken-picked-socket (over the socket plugin, grouped receives of up to 8 with NNS_SOCKET_MAX_RECVS=8).
# Usage: perf_measurement_test.sh NCCL_NET_PERF (the plugins are in ../lib beside it).
set -uo pipefail
perf="$1"
lib=$(cd "$(dirname "$perf")/../lib" && pwd)
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail, run, json_holds
# The sizes a run reported, as "0 1 4 16 64".
sizes_of() { python3 -c 'import json, sys; print(*[r["bytes"] for r in json.loads(sys.argv[1])["results"]])' "$out"; }

# ---- the sweep: from -b, times -f, up to -e included; 0 is followed by 1 -----------------------------------------
for case in "-b 0 -e 64 -f 4|0 1 4 16 64" "-b 5 -e 200 -f 3|5 15 45 135" "-b 8 -e 127 -f 2|8 16 32 64" \
            "-b 7 -e 7 -f 2|7" "-b 0 -e 0 -f 2|0"; do
  # shellcheck disable=SC2086  # the options are words
  run "$perf" minimal ${case%%|*} -n 2 -w 0 --call-timeout 10 --json
  sizes=$(sizes_of)
  [ "$status" = 0 ] && [ "$sizes" = "${case#*|}" ] ||
    fail "minimal ${case%%|*}: exit status $status and sizes '$sizes', expected 0 and '${case#*|}'"
done

# ---- the settings, as given, in the JSON object and the header; the plugin as it names itself ---------------------
minimal="$lib/libnccl-net-minimal.so"
run "$perf" "$minimal" -b 0 -e 8 -n 3 -w 2 -W 4 -d 0 --call-timeout 7 --json
[ "$status" = 0 ] || fail "minimal by path, --json: exit status $status"
json_holds "d['plugin'] == 'minimal' and d['path'] == '$minimal' and d['version'] == 12 and d['dev'] == 0" ||
  fail "--json: the plugin's name, path, version or the device are not the plugin's"
json_holds "(d['iterations'], d['warmup'], d['window'], d['multiRecv'], d['callTimeout']) == (3, 2, 4, 1, 7)" ||
  fail "--json: -n -w -W -m --call-timeout are not as given"
json_holds "d['binding'].startswith(('measuring process on CPUs ', 'not bound'))" || fail "--json: no binding"
json_holds "'error' not in d and 'exitStatus' not in d and 'notes' not in d" || fail "--json: a success has an error"
# A 0-byte message moves no bytes: its bandwidth is 0 whatever the time, its latency is not.
json_holds "d['results'][0]['bytes'] == 0 and d['results'][0]['bandwidthGBs'] == 0 and d['results'][0]['latencyUs'] > 0" ||
  fail "--json: the 0-byte row's bandwidth is not 0, or its latency is"
run "$perf" "$minimal" -b 0 -e 8 -n 3 -w 2 -W 4 --call-timeout 7
[ "$status" = 0 ] || fail "minimal by path: exit status $status"
header="# nccl-net-perf: plugin minimal (ncclNet_v12, $minimal), dev 0, iters 3, warmup 2, window 4, multi-recv 1"
grep -qxF "$header" <<<"$out" || fail "the header is not: $header"
python3 -c '
import re, sys
rows = [l.split() for l in sys.argv[1].splitlines() if re.match(r" +[0-9]+ +[0-9.]+ +[0-9.]+$", l)]
assert [r[0] for r in rows] == ["0", "1", "2", "4", "8"], rows
assert float(rows[0][1]) > 0 and rows[0][2] == "0.000", rows[0]
' "$out" || fail "the table is not one row per size (0 1 2 4 8), the 0-byte one 'latency > 0, bandwidth 0.000'"

# ---- the units: receives done no sooner than 50 ms after their posting -------------------------------------------
# Each timed round trip holds a receive posted within it: a latency (half of it) of 25000 us at least, and below 50000
# us unless the median round trip took twice the floor. The bandwidth run ends with a receive posted after its clock
# starts: 5 messages of 64 KiB in 50 ms at least, 0.0066 GB/s at most; and in the 60 s the run is given, at least
# 0.0000055 GB/s.
run env NNS_PICKED_BUG=slow-receives "$perf" broken-picked -b 64K -e 64K -n 5 -w 0 -W 1 --call-timeout 10 --json
[ "$status" = 0 ] || fail "slow-receives: exit status $status"
json_holds '25000 <= d["results"][0]["latencyUs"] < 50000' ||
  fail "slow-receives: the latency is not half a round trip of 50 ms or more, in us"
json_holds '65536 * 5 / 60 / 1e9 < d["results"][0]["bandwidthGBs"] <= 65536 * 5 / 0.05 / 1e9' ||
  fail "slow-receives: the bandwidth is not 5 x 64 KiB over 50 ms or more, in GB/s"
run env NNS_PICKED_BUG=slow-receives "$perf" broken-picked -b 64K -e 64K -n 5 -w 0 -W 1 --call-timeout 10
python3 -c '
import re, sys
row = [l.split() for l in sys.argv[1].splitlines() if re.match(r" +65536 ", l)]
assert len(row) == 1 and 25000 <= float(row[0][1]) < 50000 and float(row[0][2]) <= 0.007, row
' "$out" || fail "slow-receives: the table's row is not 'bytes, latency in us, bandwidth in GB/s'"
# Every message of a grouped receive counts: 4 messages per receive move about 4 times the bytes of 1 in the same
# receives (the floor dominates both runs; 2 leaves room for the host's noise).
if [ -e "$lib/libnccl-net-broken-picked-socket.so" ]; then
  bandwidths=()
  for m in 1 4; do
    run env NNS_SOCKET_MAX_RECVS=8 NNS_PICKED_BUG=slow-receives "$perf" broken-picked-socket -b 64K -e 64K -n 4 -w 0 \
      -W 1 -m "$m" --call-timeout 10 --json
    [ "$status" = 0 ] || fail "slow-receives over the socket plugin, -m $m: exit status $status"
    bandwidths+=("$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["results"][0]["bandwidthGBs"])' "$out")")
  done
  python3 -c 'import sys; assert float(sys.argv[2]) > 2 * float(sys.argv[1])' "${bandwidths[@]}" ||
    fail "-m 4 measured ${bandwidths[1]} GB/s, -m 1 ${bandwidths[0]} GB/s: the grouped messages are not all counted"
fi

# ---- the window: -W 32 keeps 32 receives (and sends) in flight, never more: NCCL posts no more (NCCL_NET_MAX_REQUESTS)
# and a plugin may refuse a 33rd with an error.
run env NNS_PICKED_BUG=over-32-requests-error "$perf" broken-picked -W 32 -b 8 -e 64 -n 40 -w 1 --call-timeout 10 --json
[ "$status" = 0 ] && [ "$(sizes_of)" = "8 16 32 64" ] ||
  fail "-W 32 against a plugin that refuses a 33rd request: exit status $status, sizes '$(sizes_of)'"

# ---- grouped receives: every buffer of each, and every size a test reports --------------------------------------
if [ -e "$lib/libnccl-net-socket.so" ]; then
  run env NNS_SOCKET_MAX_RECVS=8 "$perf" socket -b 0 -e 64K -f 16 -m 8 -W 2 -n 3 -w 1 --call-timeout 10 --json
  [ "$status" = 0 ] && [ "$(sizes_of)" = "0 1 16 256 4096 65536" ] && json_holds 'd["multiRecv"] == 8' ||
    fail "socket -m 8: exit status $status and sizes '$(sizes_of)', expected 0 and every size"
fi
if [ -e "$lib/libnccl-net-broken-picked-socket.so" ]; then
  # The last of each group of 8 reported one byte short: seen at the first grouped receive (latency receives one), by
  # the receiving peer. The measuring process may fail too, on the peer's exit (ncclRemoteError): named after the
  # peer's when both are seen, but it can be seen alone first, and the peer's is then its note.
  run env NNS_SOCKET_MAX_RECVS=8 NNS_PICKED_BUG=grouped-last-short "$perf" broken-picked-socket -b 8 -e 64 -m 8 -n 2 \
    -w 0 --call-timeout 10
  [ "$status" = 1 ] || fail "grouped-last-short: exit status $status, expected 1"
  grep -qE "^nccl-net-perf: (peer process, at 8 bytes \(bandwidth\)|peer process: also failed): test reported 7 bytes for message 7 of a receive of 8 of 8 bytes \(sizes\[7\]\): the plugin's size is wrong$" <<<"$err" ||
    fail "grouped-last-short: the size of the group's last message is not named"
fi
# A send's test may write a size (NCCL never reads it): not a failure.
run env NNS_PICKED_BUG=send-size "$perf" broken-picked -b 8 -e 64 -n 2 -w 0 --call-timeout 10
[ "$status" = 0 ] || fail "send-size: a size written by a send's test failed the run (exit status $status)"

# ---- the operations counted: each process's 5th isend fails ------------------------------------------------------
# The measuring process sends first in each round trip and is the sender of the bandwidth runs; the peer answers
# each round trip and acknowledges each bandwidth run (its warmup run's too, empty under -w 0) with one isend.
for case in \
  "-b 8 -e 16 -n 4 -w 1|measuring process, at 8 bytes \\(latency\\)" \
  "-b 8 -e 16 -n 3 -w 1|measuring process, at 8 bytes \\(bandwidth\\)" \
  "-b 8 -e 16 -n 1 -w 1 -W 4|measuring process, at 8 bytes \\(bandwidth\\)" \
  "-b 8 -e 32 -n 1 -w 0 -W 1|peer process, at 16 bytes \\(bandwidth\\)"; do
  # 1 + 4 isends in the latency's round trips, the 5th in its last; 1 + 3 there, the 5th in the bandwidth's warmup;
  # 1 + 1 there, then max(-w, -W) = 4 warmup sends; the peer's 1 answer and 2 acknowledgements a size, the measuring
  # process's 1 + 1 sends: the peer's 5th isend is the acknowledgement of the empty warmup at 16 bytes.
  # shellcheck disable=SC2086  # the options are words
  run env NNS_PICKED_BUG=isend-error-once "$perf" broken-picked ${case%%|*} --call-timeout 10
  [ "$status" = 1 ] || fail "isend-error-once ${case%%|*}: exit status $status, expected 1"
  grep -qE "^nccl-net-perf: ${case#*|}: isend returned 3 \(ncclInternalError\)$" <<<"$err" ||
    fail "isend-error-once ${case%%|*}: not '${case#*|}: isend returned 3 (ncclInternalError)'"
done

[ "$failures" -eq 0 ] && echo "nccl-net-perf's sweep, settings, units and operation counts as documented"
exit $((failures > 0))
