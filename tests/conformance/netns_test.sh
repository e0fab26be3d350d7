#!/usr/bin/env bash
# nccl-net-check --netns: the socket plugin passes every rule with its two sides in two network namespaces joined by
# a veth pair (traffic seen on the veth), and the namespaces are gone afterwards: after a run, after a failing
# plugin, after SIGTERM. Exit 4 (a ctest SKIP) with the reason when namespaces cannot be made here.
set -uo pipefail
check="$1"
leftovers() { ip netns list 2>/dev/null | grep -c "^nnscheck-$1-" || true; }

out=$("$check" socket --netns --call-timeout 10 --rule-timeout 60 2>&1 &
      echo "PID=$!"; wait $!; echo "EXIT=$?")
echo "$out" | grep -v '^WARN'
if grep -q -- "--netns unavailable" <<<"$out"; then exit 4; fi
pid=$(sed -n 's/^PID=//p' <<<"$out")
grep -q '^EXIT=0$' <<<"$out" || { echo "FAILED: the socket plugin did not pass every rule across namespaces"; exit 1; }
rules=$("$check" --list | grep -vc '^collnet-')  # the socket library has no collNet: its rules do not apply
grep -q "^$rules passed, 0 failed, 0 skipped\$" <<<"$out" || { echo "FAILED: not all $rules rules PASS"; exit 1; }
grep -qE "^PASS properties-sane +1 device\(s\): nnsc${pid}a " <<<"$out" || { echo "FAILED: listener not on its veth"; exit 1; }
grep -qE "^netns: nnsc${pid}a received [0-9]{4,}\.[0-9] MB" <<<"$out" || { echo "FAILED: no GiB crossed the veth"; exit 1; }
[ "$(leftovers "$pid")" = 0 ] || { echo "FAILED: namespaces of run $pid left behind"; exit 1; }

# A failing plugin: the rule fails, the namespaces still go.
"$check" broken-zero-byte-elided --netns --call-timeout 2 --rules zero-byte > /tmp/nns-netns-$$.txt 2>&1 &
pid=$!; wait $pid; code=$?
grep -q "FAIL zero-byte" /tmp/nns-netns-$$.txt && [ $code = 1 ] || { cat /tmp/nns-netns-$$.txt; echo "FAILED: expected FAIL"; exit 1; }
rm -f /tmp/nns-netns-$$.txt
[ "$(leftovers "$pid")" = 0 ] || { echo "FAILED: namespaces of failing run $pid left behind"; exit 1; }

# Interrupted mid-run (a rule that blocks): SIGTERM removes the namespaces and the rule's processes.
"$check" broken-blocking-accept --netns --call-timeout 30 --rules accept-is-nonblocking > /dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do [ "$(leftovers "$pid")" = 2 ] && break; sleep 0.1; done
[ "$(leftovers "$pid")" = 2 ] || { echo "FAILED: run $pid never made its namespaces"; exit 1; }
sleep 1
kill -TERM "$pid"; wait "$pid"; code=$?
[ $code = 143 ] || { echo "FAILED: exit status $code after SIGTERM"; exit 1; }
[ "$(leftovers "$pid")" = 0 ] || { echo "FAILED: namespaces of interrupted run $pid left behind"; exit 1; }
echo "netns runs ok, nothing left behind"
