#!/usr/bin/env bash
# nccl-net-topo --fsroot: a machine discovered from a copy of its /sys and /proc as hwloc-gather-topology saves one,
# given as the directory the tarball unpacks to or as the tarball (tests/data/fsroot/vm-2cores-virtio.tar.gz, gathered
# on the build VM: 2 cores, one NUMA node, a virtio NIC eth0 at 0000:00:03.0). The copy is then changed where this
# machine cannot follow (the interface renamed, the CPU's cpuid dump taken out and its name changed in cpuinfo, the
# NIC's device id and link changed), and the output must follow the copy, not this machine. A directory that is no
# such tree, a file that is no tarball, and --fsroot beside another source of the machine are refused.
set -uo pipefail
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail, run, json_holds
topo="$1"
tarball="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
tar xzf "$tarball" || { echo "FAILED: cannot unpack $tarball"; exit 1; }
tree="$work/node"

run "$topo" --ignore-env --fsroot "$tree" --json --no-paths --no-search --dump-xml gathered.xml
[ "$status" = 0 ] || fail "--fsroot --json: exit status $status"
json_holds "((d['discovery']['numaNodes'], d['discovery']['cores'], d['discovery']['processingUnits'],
  d['discovery']['cpuVendor'], d['discovery']['cpuModel'], d['discovery']['fsroot']) ==
  (1, 2, 2, 'AuthenticAMD', 'AMD EPYC', '$tree'))" || fail "--fsroot: the machine is not the gathered one"
json_holds "[(n['name'], n['busId']) for n in d['nets']] == [('eth0', '0000:00:03.0')]" ||
  fail "--fsroot: the NICs are not the gathered interfaces"
json_holds "'paths' not in d" || fail "--json --no-paths: the JSON still has the paths"
# The CPU as NCCL's XML has it: the architecture the tree recorded, the identity from its cpuid dump.
grep -qF '<cpu numaid="0" affinity="00000003" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="17">' \
  gathered.xml || fail "--fsroot: the CPU in the dumped XML is not the gathered one: $(grep '<cpu' gathered.xml)"
grep -qF '<pci busid="0000:00:03.0" class="0x020000" vendor="0x1af4" device="0x1041"' gathered.xml ||
  fail "--fsroot: the NIC's PCI device in the dumped XML is not the gathered one"

# The tarball itself, as lstopo -i takes one: unpacked aside, the same machine, and nothing left behind.
mkdir unpack
run env TMPDIR="$work/unpack" "$topo" --ignore-env --fsroot "$tarball" --json --no-paths --no-search
[ "$status" = 0 ] || fail "--fsroot TARBALL: exit status $status"
json_holds "(([(n['name'], n['busId']) for n in d['nets']], d['discovery']['cpuModel'], d['discovery']['fsroot']) ==
  ([('eth0', '0000:00:03.0')], 'AMD EPYC', '$tarball'))" || fail "--fsroot TARBALL: not the gathered machine"
[ -z "$(ls -A unpack)" ] || fail "--fsroot TARBALL left $(ls unpack) behind"
echo "not a tarball" >not-a-tarball.tar.gz
run env TMPDIR="$work/unpack" "$topo" --ignore-env --fsroot not-a-tarball.tar.gz
[ "$status" = 1 ] || fail "--fsroot of a file that is no tarball: exit status $status, expected 1"
grep -qF "not-a-tarball.tar.gz: not a directory, and tar could not unpack it" <<<"$err" ||
  fail "--fsroot of a file that is no tarball: the error does not say so"
tar czf no-tree.tar.gz not-a-tarball.tar.gz
run env TMPDIR="$work/unpack" "$topo" --ignore-env --fsroot no-tree.tar.gz
[ "$status" = 1 ] || fail "--fsroot of a tarball without a tree: exit status $status, expected 1"
grep -qF "no-tree.tar.gz: the tarball holds no directory with sys/ in it" <<<"$err" ||
  fail "--fsroot of a tarball without a tree: the error does not say so"
[ -z "$(ls -A unpack)" ] || fail "a refused --fsroot TARBALL left $(ls unpack) behind"

# The copy changed: hwloc must read the CPU from the copy's cpuinfo, the NICs come from the copy's class/net.
mv "$tree/sys/class/net/eth0" "$tree/sys/class/net/gathered0"
rm -r "$tree/cpuid"
sed -i 's/^model name.*/model name\t: Gathered CPU 9999/' "$tree/proc/cpuinfo"
nic="$tree/sys/bus/pci/devices/0000:00:03.0"
echo 0x10ff >"$nic/device"  # hwloc's PCI ids from the copy
echo "16.0 GT/s PCIe" >"$nic/max_link_speed"  # the link from the copy (a virtio device has none)
echo 8 >"$nic/max_link_width"  # but the NIC sits right on pci0000:00, which has no max_link_width: NCCL reads
# the upstream port's width as 0 and writes the minimum, link_width="0" (which its loader takes as x16)
run "$topo" --ignore-env --fsroot "$tree" --no-paths --no-search --dump-xml changed.xml
[ "$status" = 0 ] || fail "--fsroot on the changed copy: exit status $status"
grep -qF "Discovered $tree (hwloc + sysfs): 1 NUMA node(s), 2 core(s), 2 hardware thread(s), AuthenticAMD Gathered CPU 9999" <<<"$out" ||
  fail "--fsroot: the discovered line does not follow the copy's cpuinfo"
grep -qE "dev 0 +gathered0 .* pci 0000:00:03.0" <<<"$out" || fail "--fsroot: the renamed interface is not listed"
grep -qF 'vendor="0x1af4" device="0x10ff" subsystem_vendor="0x1af4" subsystem_device="0x1041" link_speed="16.0 GT/s PCIe" link_width="0"' \
  changed.xml || fail "--fsroot: the PCI device's ids or link do not follow the copy: $(grep '<pci' changed.xml)"

# Refusals: a directory that is no Linux tree (exit status 1, the missing part named); --fsroot beside another
# source of the machine (CLI11's exclusion, exit status 2).
mkdir empty
run "$topo" --ignore-env --fsroot empty
[ "$status" = 1 ] || fail "--fsroot of an empty directory: exit status $status, expected 1"
grep -qF "empty: no sys/devices/system/cpu (not a Linux file system tree as hwloc-gather-topology saves one)" <<<"$err" ||
  fail "--fsroot of an empty directory: the error does not name what is missing"
for other in "--topo-file x.xml" "--synthetic 8 4" "--plugin socket"; do
  # shellcheck disable=SC2086  # an option and its value, split on purpose
  run "$topo" --ignore-env --fsroot "$tree" $other
  [ "$status" = 2 ] || fail "--fsroot with $other: exit status $status, expected 2"
  grep -q -- "--fsroot excludes ${other%% *}\|${other%% *} excludes --fsroot" <<<"$err" ||
    fail "--fsroot with $other: no refusal naming both"
done

[ "$failures" = 0 ] && echo "nccl-net-topo --fsroot reads the gathered tree"
exit $((failures > 0))
