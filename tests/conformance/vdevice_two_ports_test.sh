#!/usr/bin/env bash
# virtual-devices with two devices to fuse: the socket plugin over two interfaces (the two ends of a veth pair, both
# in a network namespace of this test's own), so the vNIC is devices 0 and 1 together, as fast as both, and carries
# data; every device, the vNIC's parts, moves data too. With nccl-net-topo as the second argument, its report of
# the two forced into one group says the plugin can fuse them. Exit 4 (a ctest SKIP) with the reason when a
# namespace or a veth pair cannot be made here.
set -uo pipefail
check="$1"
topo="${2:-}"
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
if [ -n "$topo" ]; then
  out=$(NCCL_SOCKET_IFNAME=nnsva,nnsvb NCCL_NET_FORCE_MERGE=nnsva,nnsvb ip netns exec "$ns" "$topo" --plugin socket \
        --no-paths --no-search 2>&1)
  grep -A1 "^NIC fusion" <<<"$out"
  grep -qE "forced by NCCL_NET_FORCE_MERGE" <<<"$out" && grep -q "makeVDevice: nns-socket, whose devices these are, can)" <<<"$out" ||
    { echo "FAILED: nccl-net-topo did not say the socket plugin can fuse the group"; exit 1; }
fi
echo "vNIC of two devices ok"
