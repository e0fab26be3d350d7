#!/usr/bin/env bash
# nccl-net-info on a folder holding a working plugin, a shared library that is not a plugin, a plugin whose init
# fails and a plugin exporting only v6: each listed with the right verdict and reason.
set -euo pipefail
info="$1"; lib="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$lib/libnccl-net-minimal.so" "$work/libnccl-net-working.so"
cp "$lib/libnccl-net-minimal-v6.so" "$work/libnccl-net-oldv6.so"
cp "$lib/libnccl-net-socket.so" "$work/libnccl-net-noiface.so"
cp "$(ldconfig -p | awk '/libm.so.6 .*x86-64/ {print $NF; exit}')" "$work/libnccl-net-notaplugin.so"
out=$(NNS_SOCKET_IFNAME==no-such-interface "$info" -L "$work" -p "$work/libnccl-net-working.so")
echo "$out"
expect() { grep -A2 "$1" <<<"$out" | grep -q -- "$2" || { echo "MISSING for $1: $2"; exit 1; }; }
expect libnccl-net-working.so "loads through ncclNet_v12"
expect libnccl-net-oldv6.so "loads through ncclNet_v6"
expect libnccl-net-noiface.so "rejected: init through ncclNet_v12 returned ncclSystemError"
expect libnccl-net-notaplugin.so "rejected: .*exports no ncclNetPlugin_v12..v6"
echo "every verdict right"
