#!/usr/bin/env bash
# nccl-net-info on a folder holding a working plugin, a shared library that is not a plugin, a plugin whose init
# fails, a plugin exporting only v6, libraries whose plugin symbol is not a usable table, and a plugin whose device
# name is not text, and a link to nothing: each listed with the right verdict and reason, and --json stays valid JSON. And -L: it replaces
# the default ../lib (as in nccl-net-check and nccl-net-perf), and a directory that does not exist is named in a
# warning; a NCCL_NET_PLUGIN list longer than the 14 entries NCCL reads says which entries are ignored. What a plugin
# prints while probed is shown under its library or candidate ("printed:", "output" in --json).
set -euo pipefail
info="$1"; lib="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$lib/libnccl-net-minimal.so" "$work/libnccl-net-working.so"
cp "$lib/libnccl-net-minimal-v6.so" "$work/libnccl-net-oldv6.so"
cp "$lib/libnccl-net-socket.so" "$work/libnccl-net-noiface.so"
for defect in null-entries function short-object; do
  cp "$lib/libnccl-net-defective-$defect.so" "$work/"
done
cp "$lib/libnccl-net-broken-garbled-name.so" "$work/"
cp "$(ldconfig -p | awk '/libm.so.6 .*x86-64/ {print $NF; exit}')" "$work/libnccl-net-notaplugin.so"
ln -s "$work/no-such-file.so" "$work/libnccl-net-dangling.so"
out=$(NNS_SOCKET_IFNAME='=no-such-interface' "$info" -L "$work" -p "$work/libnccl-net-working.so")
echo "$out"
expect() { grep -A2 "$1" <<<"$out" | grep -q -- "$2" || { echo "MISSING for $1: $2"; exit 1; }; }
expect libnccl-net-working.so "loads through ncclNet_v12"
expect libnccl-net-oldv6.so "loads through ncclNet_v6"
expect libnccl-net-noiface.so "rejected: init through ncclNet_v12 returned ncclSystemError"
expect libnccl-net-notaplugin.so "rejected: .*exports no ncclNetPlugin_v12..v6"
expect libnccl-net-defective-null-entries.so "rejected: ncclNetPlugin_v12: getProperties, listen, .* are NULL"
expect libnccl-net-defective-function.so "rejected: ncclNetPlugin_v12: it is a function"
expect libnccl-net-defective-short-object.so "rejected: ncclNetPlugin_v12: it is a 24-byte object"
expect libnccl-net-broken-garbled-name.so "loads through ncclNet_v12"
# A library dlopen refuses: its exports are unknown, not "none".
expect libnccl-net-dangling.so "exports unknown: it could not be opened"
expect libnccl-net-dangling.so "rejected: could not open"
# What a plugin prints while probed (its WARN lines, often the reason for a rejection) is shown under its own entry,
# not loose on stderr, where it would belong to none of them.
grep -A3 libnccl-net-noiface.so <<<"$out" | grep -q "printed: WARN NET/nns-socket : no usable network interface" ||
  { echo "the socket plugin's WARN line is not under its library"; exit 1; }
errors=$(NNS_SOCKET_IFNAME='=no-such-interface' "$info" -L "$work" -p "$work/libnccl-net-working.so" 2>&1 >/dev/null)
if grep -q "WARN" <<<"$errors"; then echo "a plugin's WARN line reached stderr: $errors"; exit 1; fi
# The garbled name, printed: its bytes escaped, never raw.
garbled=$("$info" -L "$work" -p "$work/libnccl-net-broken-garbled-name.so")
grep -q 'shm\\xff\\x070' <<<"$garbled" || { echo "the garbled name is not escaped:"; echo "$garbled"; exit 1; }
if LC_ALL=C grep -q $'\xff' <<<"$garbled"; then echo "a raw 0xff byte reached the output"; exit 1; fi
# And as JSON: valid, every library present.
NNS_SOCKET_IFNAME='=no-such-interface' "$info" --json -L "$work" -p "$work/libnccl-net-broken-garbled-name.so" |
  python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["found"]) == 9, [f["path"] for f in d["found"]]
assert d["devices"][0]["name"] == "shm\\xff\\x070", d["devices"][0]["name"]
noiface = [f for f in d["found"] if f["path"].endswith("libnccl-net-noiface.so")][0]
assert any("no usable network interface" in line for line in noiface["output"]), noiface
print("json ok")'

fail() { echo "FAILED: $*"; exit 1; }
# -L replaces the default directory: only $work's libraries are listed (the build tree's lib/ holds many more), and
# --help says so. A -L directory that does not exist: one warning naming it, and the run goes on.
"$info" --help | grep -q -- "-L,--search-dir .*in place of the default (../lib beside this tool)" ||
  fail "--help does not say that -L replaces the default: $("$info" --help | grep -- --search-dir)"
"$info" --json -L "$work" -L "$work/no-such-dir" -p "$work/libnccl-net-working.so" 2>"$work/stderr" |
  python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["found"]) == 9, [f["path"] for f in d["found"]]
assert d["searchDirs"] == [sys.argv[1], sys.argv[1] + "/no-such-dir"], d["searchDirs"]
assert d["chosen"]["name"] == "minimal", d["chosen"]' "$work"
[ "$(cat "$work/stderr")" = \
  "nccl-net-info: warning: search directory $work/no-such-dir: No such file or directory" ] ||
  fail "no one-line warning for the missing -L directory: $(cat "$work/stderr")"

# NCCL reads 14 entries of NCCL_NET_PLUGIN: the working plugin as the 15th is ignored, and the output says so.
list=$(printf 'missing%d,' $(seq 14))"$work/libnccl-net-working.so"
set +e
out=$("$info" -L "$work" -p "$list" 2>&1)
status=$?
set -e
[ "$status" = 1 ] || fail "exit status $status with the only working entry past the 14th, expected 1 (nothing loads)"
grep -qF "  ignored: $work/libnccl-net-working.so: NCCL reads at most 14 entries of NCCL_NET_PLUGIN" <<<"$out" ||
  fail "the 15th entry is not reported as ignored: $out"
set +e
json=$("$info" --json -L "$work" -p "$list")  # exit status 1, as above
set -e
python3 -c '
import json, sys
d = json.load(sys.stdin)
assert [c["requested"] for c in d["candidates"]] == ["missing%d" % i for i in range(1, 15)], d["candidates"]
assert d["ignored"] == [{"requested": sys.argv[1] + "/libnccl-net-working.so",
                         "reason": "NCCL reads at most 14 entries of NCCL_NET_PLUGIN"}], d["ignored"]
assert d["chosen"] is None, d["chosen"]' "$work" <<<"$json" || fail "--json does not list the ignored entry"
# NCCL_NET: only a net of that name is taken; the others are named as skipped, and the end says what NCCL would do.
set +e
out=$(NCCL_NET=ib "$info" -L "$work" -p working 2>&1)
status=$?
set -e
[ "$status" = 1 ] || fail "exit status $status with NCCL_NET naming another net, expected 1"
grep -qF 'and NCCL_NET=ib takes only a net of that name (ignoring case): skipped before init' <<<"$out" ||
  fail "the plugin is not named as skipped for NCCL_NET: $out"
# NCCL's IB net needs an RDMA device: without one, NCCL_NET=ib leaves NCCL with no net at all.
if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
  grep -qF 'NCCL would use its internal IB net (NCCL_NET=ib' <<<"$out" || fail "the internal net is not named: $out"
else
  grep -qF "NCCL_NET=ib asks for NCCL's internal IB net, but this machine has no RDMA device" <<<"$out" ||
    fail "NCCL_NET=ib without an RDMA device is not said to fail: $out"
fi
# Set but empty: no external plugin, as NCCL reads it.
set +e
out=$(NCCL_NET_PLUGIN='' "$info" -L "$work" 2>&1)
set -e
grep -qF 'NCCL_NET_PLUGIN: (set but empty: no external plugin, as NCCL reads it)' <<<"$out" ||
  fail "an empty NCCL_NET_PLUGIN is not read as NCCL reads it: $out"
echo "every verdict right"
