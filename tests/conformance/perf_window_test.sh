#!/usr/bin/env bash
# nccl-net-perf keeps a correct plugin moving when it refuses a post (a NULL request, "not now") and moves its data
# only inside test(): while a post is refused the tool tests its oldest requests in flight, as NCCL's proxy does.
# broken-limited-requests refuses a 9th receive in flight over the minimal plugin, whose receives progress only in
# test(); -W 32 keeps 32 receives in flight, so the peer's irecv is refused until a receive completes. Before the fix
# the run ended after --call-timeout with "a request did not complete within the timeout". (No plugin of this repo
# refuses an isend under -W x -m, so the sender's path is exercised by the same code, not by this test.)
set -uo pipefail
perf="$1"
failures=0
for plugin in broken-limited-requests minimal; do
  out=$(timeout 60 "$perf" "$plugin" -W 32 -b 1K -e 64K -f 4 -n 20 -w 2 --call-timeout 5 --json 2>&1)
  status=$?
  if [ "$status" != 0 ] || ! grep -q '"bytes": 65536' <<<"$out"; then
    echo "FAILED: nccl-net-perf $plugin -W 32 gave status $status (expected 0 and a row for 65536 bytes): $out"
    failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] && echo "nccl-net-perf completes with posts refused while requests are in flight"
