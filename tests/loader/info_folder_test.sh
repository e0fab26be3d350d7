#!/usr/bin/env bash
# nccl-net-info on a folder holding a working plugin, a shared library that is not a plugin, a plugin whose init
# fails, a plugin exporting only v6, libraries whose plugin symbol is not a usable table, and a plugin whose device
# name is not text: each listed with the right verdict and reason, and --json stays valid JSON.
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
out=$(NNS_SOCKET_IFNAME==no-such-interface "$info" -L "$work" -p "$work/libnccl-net-working.so")
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
# The garbled name, printed: its bytes escaped, never raw.
garbled=$("$info" -L "$work" -p "$work/libnccl-net-broken-garbled-name.so")
grep -q 'shm\\xff\\x070' <<<"$garbled" || { echo "the garbled name is not escaped:"; echo "$garbled"; exit 1; }
if LC_ALL=C grep -q $'\xff' <<<"$garbled"; then echo "a raw 0xff byte reached the output"; exit 1; fi
# And as JSON: valid, every library present.
NNS_SOCKET_IFNAME==no-such-interface "$info" --json -L "$work" -p "$work/libnccl-net-broken-garbled-name.so" |
  python3 -c '
import json, sys
d = json.load(sys.stdin)
assert len(d["found"]) == 8, [f["path"] for f in d["found"]]
assert d["devices"][0]["name"] == "shm\\xff\\x070", d["devices"][0]["name"]
print("json ok")'
echo "every verdict right"
