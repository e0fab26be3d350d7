#!/usr/bin/env bash
# virtual-devices with two devices to fuse: the socket plugin over two interfaces (the two ends of a veth pair, both
# in a network namespace of this test's own), so the vNIC is devices 0 and 1 together, as fast as both, and carries
# data; every device, the vNIC's parts, moves data too. Exit 4 (a ctest SKIP) with the reason when a namespace or a
# veth pair cannot be made here.
set -uo pipefail
check="$1"
ns="nnsvdev-$$"
trap 'ip netns del "$ns" 2>/dev/null' EXIT
ip netns add "$ns" 2>/dev/null || { echo "SKIP: cannot make a network namespace (needs root and iproute2)"; exit 4; }
ip -n "$ns" link set lo up
ip -n "$ns" link add nnsva type veth peer name nnsvb 2>/dev/null || { echo "SKIP: cannot make a veth pair"; exit 4; }
ip -n "$ns" addr add 10.231.0.1/24 dev nnsva
ip -n "$ns" addr add 10.231.1.1/24 dev nnsvb
ip -n "$ns" link set nnsva up
ip -n "$ns" link set nnsvb up
out=$(NCCL_SOCKET_IFNAME=nnsva,nnsvb ip netns exec "$ns" "$check" socket --call-timeout 10 \
      --rules properties-sane,every-device-moves-data,virtual-devices 2>&1)
echo "$out"
grep -qE "^PASS properties-sane +2 device\(s\): nnsv" <<<"$out" || { echo "FAILED: the plugin did not list both ends"; exit 1; }
grep -qE "^PASS virtual-devices +.*vNIC 2 = devices 0\+1 \(nnsv.\+nnsv., ([0-9]+) Mbps against \1 for its parts, vProps \{0\+1\}\)" <<<"$out" ||
  { echo "FAILED: no vNIC of devices 0 and 1 with their summed speed that moved data"; exit 1; }
grep -q "^3 passed, 0 failed, 0 skipped" <<<"$out" || { echo "FAILED: not all 3 rules passed"; exit 1; }
echo "vNIC of two devices ok"
