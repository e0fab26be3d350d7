#!/usr/bin/env bash
# nccl-net-topo's words where they were wrong or missing: the completion options on a machine with no device of their
# class (the note said every such device had its element already, and to edit a file there is none of in discovery);
# a P2P level NCCL cannot read (refused, saying that NCCL ignores it); a FIFO or a UTF-16 file given as the topology
# file (the read waited forever; pugixml's "Could not determine tag type"); a graph file given as the topology file;
# the heading of the Ring/Trees lines (whose rank they are for); the GIN devices this engine does not model.
set -uo pipefail
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail, run
topo="$1"
data="$2"     # tests/data/topologies
cases="$3"    # tests/topology/data
tarball="$4"  # tests/data/fsroot/vm-2cores-virtio.tar.gz: a VM with no GPU and a virtio NIC
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

# Discovery (of the gathered VM: no GPU-class device at all): the options found nothing to complete, said as such,
# without "edit the file".
run "$topo" --ignore-env --fsroot "$tarball" --no-paths --no-search --gpu-sm 90 --gpu-nvlinks 18 --nic-speed 100000
[ "$status" = 0 ] || fail "--gpu-sm on a machine without GPUs: exit status $status"
grep -qF "note: the --gpu-* options changed nothing: no GPU-class PCI device found" <<<"$err" ||
  fail "--gpu-sm on a machine without GPUs: the note does not say there is none"
grep -qF "note: the --nic-* options changed nothing: every NIC-class PCI device here has its <nic><net> already" \
  <<<"$err" || fail "--nic-speed in discovery: the note does not say the NICs have their <net>"
if grep -q "edit the file\|has its <gpu> already" <<<"$err"; then
  fail "discovery: a note speaks of a file or of GPUs that are not there"
fi
# A file whose NICs hang off the CPU (Azure's, no NIC-class PCI device), and one whose NIC-class devices have their
# <net>: each said as it is (and a file can be edited).
run "$topo" --ignore-env --topo-file "$data/azure-ncv4.xml" --no-paths --no-search --nic-speed 100000 --gpu-sm 80
[ "$status" = 0 ] || fail "--nic-speed on a file without NIC-class devices: exit status $status"
grep -qF "note: the --nic-* options changed nothing: no NIC-class PCI device found in $data/azure-ncv4.xml" <<<"$err" ||
  fail "--nic-speed on a file without NIC-class devices: the note does not say there is none"
grep -qF "note: the --gpu-* options changed nothing: every GPU-class PCI device here has its <gpu> already (they complete partial files; edit the file to change a GPU)" \
  <<<"$err" || fail "--gpu-sm on a complete file: the note lost its advice"
run "$topo" --ignore-env --topo-file "$cases/c2c-gpu-nic-on-one-switch.xml" --no-paths --no-search --nic-speed 100000
grep -qF "note: the --nic-* options changed nothing: every NIC-class PCI device here has its <nic><net> already (they complete partial files; edit the file to change a NIC)" \
  <<<"$err" || fail "--nic-speed on a complete file: the note lost its advice"

# A level NCCL cannot read: refused, and said to be ignored by NCCL (which keeps its default without a word).
run env NCCL_P2P_LEVEL=pix "$topo" --topo-file "$data/azure-ncv4.xml" --no-paths --no-search
[ "$status" = 1 ] || fail "NCCL_P2P_LEVEL=pix: exit status $status, expected 1"
grep -qF "NCCL_P2P_LEVEL=pix: unknown level (LOC NVL" <<<"$err" || fail "NCCL_P2P_LEVEL=pix: the levels are not named"
grep -qF "NCCL itself silently ignores a value it cannot read and uses its default, so this setting has no effect there" \
  <<<"$err" || fail "NCCL_P2P_LEVEL=pix: what NCCL does with it is not said"

# A FIFO with no writer: refused up front (the read waited for a writer forever), as is a character device; a pipe
# from the shell's process substitution, which has its writer, is still read.
mkfifo topo.fifo
run timeout 20 "$topo" --ignore-env --topo-file topo.fifo
[ "$status" = 1 ] || fail "--topo-file FIFO: exit status $status, expected 1 (124: it waited)"
grep -qF "topo.fifo: a FIFO, not a topology file: not opened, as its open would wait for a writer" <<<"$err" ||
  fail "--topo-file FIFO: the error does not say what it is"
run timeout 20 "$topo" --ignore-env --topo-file "$data/azure-ncv4.xml" --graph-file topo.fifo
[ "$status" = 1 ] || fail "--graph-file FIFO: exit status $status, expected 1"
grep -qF "topo.fifo: a FIFO, not a graph file" <<<"$err" || fail "--graph-file FIFO: the error does not say so"
run timeout 20 "$topo" --ignore-env --topo-file /dev/zero
[ "$status" = 1 ] || fail "--topo-file /dev/zero: exit status $status, expected 1"
grep -qF "/dev/zero: a character device, not a topology file" <<<"$err" ||
  fail "--topo-file /dev/zero: the error does not say what it is"
run timeout 20 "$topo" --ignore-env --no-paths --no-search --topo-file <(cat "$data/azure-ncv4.xml")
[ "$status" = 0 ] || fail "--topo-file <(cat FILE): exit status $status, expected 0"

# UTF-16 (with a byte order mark, or without one: NUL bytes in the first bytes): said to be UTF-16 or binary, not XML
# in UTF-8.
python3 -c "import sys; open('utf16.xml','wb').write(open(sys.argv[1]).read().encode('utf-16'))" "$data/azure-ncv4.xml"
run "$topo" --ignore-env --topo-file utf16.xml
[ "$status" = 1 ] || fail "UTF-16 topology file: exit status $status, expected 1"
grep -qF "utf16.xml: starts with a UTF-16 byte order mark: a UTF-16 file, not XML in UTF-8" <<<"$err" ||
  fail "UTF-16 topology file: the error does not say UTF-16"
python3 -c "import sys; open('utf16le.xml','wb').write(open(sys.argv[1]).read().encode('utf-16-le'))" "$data/azure-ncv4.xml"
run "$topo" --ignore-env --topo-file utf16le.xml
[ "$status" = 1 ] || fail "UTF-16 topology file without a BOM: exit status $status, expected 1"
grep -qF "utf16le.xml: NUL bytes in its first bytes: UTF-16 or a binary file, not XML in UTF-8" <<<"$err" ||
  fail "UTF-16 topology file without a BOM: the error does not say so"
if grep -q "Could not determine tag type" <<<"$err"; then fail "UTF-16: pugixml's words are still the answer"; fi

# A graph file as the topology file: --graph-file suggested.
run "$topo" --ignore-env --topo-file "$data/azure-ncv4-graph.xml"
[ "$status" = 1 ] || fail "graph file as --topo-file: exit status $status, expected 1"
grep -qF "azure-ncv4-graph.xml: root element <graphs>: this is a graph file (NCCL_GRAPH_FILE), not a topology file; give it as --graph-file" \
  <<<"$err" || fail "graph file as --topo-file: --graph-file is not suggested"

# The Ring/Trees lines have a heading naming their rank, and --rank.
run "$topo" --ignore-env --no-paths --topo-file "$data/azure-ncv4.xml"
[ "$status" = 0 ] || fail "azure-ncv4: exit status $status"
grep -qF "Ring/Trees lines for rank 0 (the first GPU in NCCL's order; --rank R shows another rank's):" <<<"$out" ||
  fail "the Ring/Trees lines have no heading naming the rank"
run "$topo" --ignore-env --no-paths --topo-file "$data/azure-ncv4.xml" --rank 2
grep -qF "Ring/Trees lines for rank 2 (--rank 2):" <<<"$out" || fail "--rank 2: the heading does not name rank 2"

# GIN devices: no NET for net="0", and a note for the GIN node this engine does not model.
run "$topo" --ignore-env --no-paths --no-search --topo-file "$cases/net-gin-only.xml"
[ "$status" = 0 ] || fail "net-gin-only.xml: exit status $status"
grep -qF "note: $cases/net-gin-only.xml:14: <net> dev 1 (mlx5_1) has gin=\"1\": NCCL makes a GIN node (GPU-initiated networking) for it, which this engine does not model: left out (it has net=\"0\": no NET either)" \
  <<<"$err" || fail "net-gin-only.xml: no note for the GIN device"
run "$topo" --ignore-env --no-paths --no-search --json --topo-file "$cases/net-gin-only.xml"
json_holds "[n['dev'] for n in d['nets']] == [0, 2]" || fail "net-gin-only.xml: net=\"0\" made a NET"

[ "$failures" = 0 ] && echo "nccl-net-topo's messages say what is there"
exit $((failures > 0))
