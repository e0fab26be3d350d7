#!/usr/bin/env bash
# nccl-net-info prints each device property as the plugin gave it, field by field, in --json and in the table: plugins
# whose values tell the fields apart (maxComms 7 and maxRecvs 8, no vProps, 2 GiB + 1 bytes; a railId of -2 beside a
# planeId of -1; a regIsGlobal of 10000 beside a forceFlush of 0; pointer support of none, and of DMA-BUF with a bit
# NCCL does not define; an infinite latency; exactly 1 Gb/s; an UNPACK device; a device whose getProperties fails)
# and a library exporting no collNet.
# And what the tool concludes from them: the candidate chosen, the releases that load each, NCCL's fallback, the
# entries NCCL skips, and where NCCL's own search would find the library.
set -uo pipefail
info="$1"; lib="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# Runs nccl-net-info --json on plugin $1 and a Python assertion on its devices (d); more environment as "$@" after.
json_check() {
  local plugin="$1" assertion="$2"
  shift 2
  env "$@" "$info" --json -p "$plugin" >"$work/out.json" 2>"$work/err" || { fail "$plugin: exit status $?"; return; }
  python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['devices']; assert $assertion, d" "$work/out.json" ||
    fail "$plugin: --json devices are not $assertion"
}
json_check strict-host-v12 "d[1]['maxComms']==7 and d[1]['maxRecvs']==8 and d[1]['vProps']==[] and d[1]['maxP2pBytes']==2**31+1 and d[1]['maxCollBytes']==3*2**30 and d[1]['speedMbps']==1000"
json_check broken-picked "d[0]['railId']==-2 and d[0]['planeId']==-1" NNS_PICKED_BUG=rail-id-2
json_check broken-reg-is-global-garbage "d[0]['regIsGlobal']==10000 and d[0]['forceFlush']==0"
json_check "$lib/libnccl-net-defective-odd-properties.so" "d[1]['ptrSupport']=='none' and d[2]['ptrSupport']=='HOST|DMABUF|unknown' and d[2]['latencyUs']=='inf' and d[2]['speedMbps']==1000 and d[3]=={'dev': 3, 'error': 'getProperties failed'}"
json_check defective-unpack-0x7 "d[0]['netDeviceType']=='UNPACK' and d[0]['netDeviceVersion']==7"

# The table: 1000 Mb/s is "1Gb/s", a byte count that is no whole KiB stays in bytes, no vProps is "{}", and the
# columns in their order (recv 8 before maxComms 7).
out=$("$info" -p strict-host-v12 2>&1)
grep -qE "^  1 +strict1 +1Gb/s +2\.5 +3 +8 +7 +5eed0001 +HOST +1 +1 +HOST +2147483649 B 3 GiB +\{\} /sys/" <<<"$out" ||
  fail "strict-host-v12's device 1 is not printed as given: $(grep strict1 <<<"$out")"
out=$("$info" -p "$lib/libnccl-net-defective-odd-properties.so" 2>&1)
grep -qE "^  2 +defective2 +1Gb/s +inf +0 +1 +1 +0 +HOST\|DMABUF\|unknown " <<<"$out" ||
  fail "odd-properties' device 2 is not printed as given: $(grep defective2 <<<"$out")"
grep -qx "  3   getProperties failed" <<<"$out" || fail "odd-properties' device 3, whose getProperties fails, is not said to"

# A library without a collNet exports "ncclCollNet none", not nothing.
cp "$lib/libnccl-net-minimal.so" "$work/"
out=$("$info" -L "$work" -p minimal 2>&1)
grep -qx "    ncclNet v12 v11 v10 v9 v8 v7 v6; ncclCollNet none" <<<"$out" ||
  fail "the minimal plugin's exports are not listed: $(grep -A1 libnccl-net-minimal.so <<<"$out" | tail -1)"

json_check minimal "d[0]['pciPath'] is None and len(d)==1"  # not a PCI device: null, not ""

# The choice: the first candidate that loads ends the list (minimal, not socket after it); a rejected candidate has no
# NCCL release that loads it; a plugin named by its path is no find of the tool's search; --json's exit status is 1
# when nothing loads, as the text's.
LD_LIBRARY_PATH='' "$info" --json -p "no-such-plugin,minimal,socket,$lib/libnccl-net-minimal.so" >"$work/list.json" ||
  fail "-p no-such-plugin,minimal,socket: exit status $?"
python3 - "$work/list.json" <<'EOF2' || fail "the candidate list is not NCCL's (above)"
import json, sys
d = json.load(open(sys.argv[1]))
c = d["candidates"]
assert [x["requested"] for x in c] == ["no-such-plugin", "minimal"], [x["requested"] for x in c]
assert d["chosen"]["name"] == "minimal" and len(d["devices"]) == 1, (d["chosen"], d["devices"])
assert c[0]["byNcclRelease"] == [] and c[0]["chosenVersion"] == 0, c[0]
assert [r["ncclNetVersion"] for r in c[1]["byNcclRelease"]] == [12, 11, 10, 9, 8, 7, 6], c[1]["byNcclRelease"]
EOF2
LD_LIBRARY_PATH='' "$info" --json -p "$lib/libnccl-net-minimal.so" >"$work/path.json" || fail "-p PATH: exit status $?"
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['candidates'][0]; assert c['foundOnlyInToolSearchDir'] is None, c" \
  "$work/path.json" || fail "a plugin named by its path is said to be found only in the tool's search directory"
"$info" --json -p none >/dev/null
status=$?
[ "$status" = 1 ] || fail "--json -p none: exit status $status, expected 1"

# The fallback NCCL takes when no plugin loads: NCCL_NET is matched ignoring case; without NCCL_NET, IB where the
# kernel lists RDMA devices, else Socket.
out=$(NCCL_NET=socket "$info" -p none 2>&1)
grep -q "^No plugin loaded: NCCL would use its internal Socket net (NCCL_NET=socket)\.$" <<<"$out" ||
  fail "NCCL_NET=socket: $(tail -1 <<<"$out")"
if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then net="IB net"; else net="Socket net"; fi
out=$(env -u NCCL_NET "$info" -p none 2>&1)
grep -q "^No plugin loaded: NCCL would fall back to its internal $net " <<<"$out" || fail "no NCCL_NET: $(tail -1 <<<"$out")"
# NIC fusion: a v9 table has a makeVDevice entry, here NULL; before v9 there is none.
grep -q "NIC fusion: none: makeVDevice is NULL, so NCCL uses each device as listed" <<<"$("$info" -p minimal-v9 2>&1)" ||
  fail "minimal-v9's NIC fusion line"

# The entries NCCL skips, one line per reason: a name of 255 characters or more (cut to 60 here), and the entries past
# the 14th, together. With -L, no tried path is this tool's last resort.
long=$(printf 'x%.0s' $(seq 300))
out=$("$info" -L "$work" -p "$long,$(printf 'missing%d,' $(seq 14))extra1,extra2" 2>&1)
grep -qx "  ignored: $(printf 'x%.0s' $(seq 57))...: a name of 300 characters, which NCCL skips (it takes names shorter than 255)" <<<"$out" ||
  fail "the 300-character entry is not listed, cut, as ignored: $(grep ignored <<<"$out")"
grep -qx "  ignored: extra1, extra2: NCCL reads at most 14 entries of NCCL_NET_PLUGIN" <<<"$out" ||
  fail "the entries past the 14th are not listed on one line: $(grep ignored <<<"$out")"
grep -q "last resort" <<<"$out" && fail "with -L a tried path is called the tool's last resort"
# A plugin found in a -L directory that is also on LD_LIBRARY_PATH is what NCCL's dlopen finds too: no note.
LD_LIBRARY_PATH="$work" "$info" --json -L "$work" -p minimal >"$work/ldpath.json" || fail "-L on LD_LIBRARY_PATH: exit $?"
python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['candidates'][0]; assert c['chosenVersion']==12 and c['foundOnlyInToolSearchDir'] is None, c" \
  "$work/ldpath.json" || fail "a -L directory on LD_LIBRARY_PATH is said to be the tool's own find"

[ "$failures" = 0 ] && echo "every device field as the plugin gave it"
exit $((failures > 0))
