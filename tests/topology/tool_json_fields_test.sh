#!/usr/bin/env bash
# nccl-net-topo --json field by field, on azure-ndv4.xml against what NCCL 2.29 computes for it (EXPECTED-nccl-2.29.md,
# section 3): each NET's port, maxconn and owner rank, the PXN relays, the path hop counts, the multi-node search's
# maxBw/totalBw and its rings' GPU order; the rings' NET in and out against the graph --dump-graph writes of the same
# search (NCCL_CROSS_NIC=1, where a ring leaves by another NIC than it came in); GDR read and write apart (sm70
# without NVLink: NCCL reads through no NIC, writes through the PIX ones), with a flush only where GDR writes, and the
# PCI mode of a C2C GPU's GDR that of the receive side; and --ignore-env leaving NCCL's settings alone.
set -uo pipefail
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail
topo="$1"
data="$2"  # tests/data/topologies
own="$3"   # tests/topology/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
ndv4=(--topo-file "$data/azure-ndv4.xml" --gpu-sm 80 --gpu-nvlinks 12 --nic-speed 200000)

# The completed file as NCCL's completion would have it: port 1, maxconn 131072; each NET owned by the GPU of its
# switch.
timeout 60 "$topo" --ignore-env --json "${ndv4[@]}" --nic-maxconn 131072 --nic-port 1 >ndv4.json ||
  fail "ndv4 --json exited $?"
python3 - ndv4.json <<'EOF' || fail "ndv4 --json fields differ from NCCL's (above)"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
def expect(what, got, want):
    if got != want:
        bad.append(f"{what}: {got!r}, expected {want!r}")
nets = {n["dev"]: n for n in d["nets"]}
expect("NET devs", sorted(nets), list(range(8)))
for dev, n in nets.items():
    expect(f"NET {dev} port", n["port"], 1)
    expect(f"NET {dev} maxconn", n["maxconn"], 131072)
    expect(f"NET {dev} ownerRank", n["ownerRank"], dev)  # net2->r2 net3->r3 ... (ncclTopoGetLocalGpu)
# PXN: each rank reaches a NIC of another switch through the rank that owns it (r0: nets 2 via r2, ...).
pxn = sorted((p["rank"], p["net"], p["relayRank"]) for p in d["pxn"])
expect("PXN relays", pxn, sorted((r, n, n) for r in range(8) for n in range(8) if n // 2 != r // 2))
# Hops: LOC none; GPU -> switch -> CPU 2 (PHB); GPU -> switch -> NIC -> NET 3 (PIX); over the NVSwitch and a peer GPU
# to a NIC of another switch 5 (PXN).
row = d["paths"]["GPU/0-300000"]
expect("GPU rank 2 to itself", row["GPU/0-300000"], {"type": "LOC", "bw": 5000.0, "hops": 0})
expect("GPU rank 2 to its CPU", row["CPU/0-0"], {"type": "PHB", "bw": 24.0, "hops": 2})
expect("GPU rank 2 to NET 2", row["NET/0-2"], {"type": "PIX", "bw": 24.0, "hops": 3})
expect("GPU rank 2 to NET 0", row["NET/0-0"], {"type": "PXN", "bw": 24.0, "hops": 5})
inter = [s for s in d["searches"] if s["inter"]]
expect("multi-node searches", len(inter), 1)
if inter:
    s = inter[0]
    expect("multi-node maxBw", s["maxBw"], 24.0)
    expect("multi-node totalBw", s["totalBw"], 240.0)
    rings = [c["ranks"] for c in s["ring"]["channels"]]
    expect("ring ch0", rings[0] if rings else None, [2, 5, 4, 7, 6, 1, 0, 3])
    expect("ring ch1", rings[1] if len(rings) > 1 else None, [3, 0, 1, 6, 7, 4, 5, 2])
    expect("ring ch7", rings[7] if len(rings) > 7 else None, [5, 2, 3, 0, 1, 6, 7, 4])
    expect("ring NETs in, out", [(c["netIn"], c["netOut"]) for c in s["ring"]["channels"]],
           [(n, n) for n in (2, 3, 0, 1, 6, 7, 4, 5)])
print("\n".join(bad) or "ndv4 --json fields as NCCL's")
sys.exit(1 if bad else 0)
EOF

# Without a GPU no NET has an owner: -1, not rank 0.
timeout 60 "$topo" --ignore-env --json --topo-file "$data/azure-ndv4.xml" --nic-speed 200000 >nogpu.json ||
  fail "ndv4 without GPUs --json exited $?"
python3 -c "import json,sys; o=[n['ownerRank'] for n in json.load(open('nogpu.json'))['nets']]; assert o==[-1]*8, o" ||
  fail "NETs of a topology without GPUs are owned by a rank"

# A ring that leaves by another NIC (NCCL_CROSS_NIC=1): each channel's netIn and netOut as the dumped graph's.
NCCL_CROSS_NIC=1 timeout 60 "$topo" --json "${ndv4[@]}" --dump-graph cross.xml >cross.json 2>/dev/null ||
  fail "NCCL_CROSS_NIC=1 --json exited $?"
python3 - cross.json cross.xml <<'EOF' || fail "the rings' GPUs or NETs in --json differ from --dump-graph's (above)"
import json, sys, xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
ring = [s for s in d["searches"] if s["inter"]][0]["ring"]
dumped = [g for g in ET.parse(sys.argv[2]).getroot() if g.get("id") == "0"][0]
want = []
for ch in dumped:
    nets = [int(n.get("dev")) for n in ch if n.tag == "net"]
    want.append({"ranks": [int(g.get("dev")) for g in ch if g.tag == "gpu"], "netIn": nets[0], "netOut": nets[-1]})
got = [{k: c[k] for k in ("ranks", "netIn", "netOut")} for c in ring["channels"]]
assert got == want, f"--json {got}\n--dump-graph {want}"
assert any(c["netIn"] != c["netOut"] for c in got), f"no channel crosses NICs here: the check checks nothing {got}"
print("rings as dumped, crossing NICs:", [(c["netIn"], c["netOut"]) for c in got])
EOF

# GDR read and write apart: sm70 without NVLink reads through no NIC (NCCL: pre-Ampere without NVLink), writes through
# the two PIX NICs of its switch; a flush on receive only where GDR writes.
timeout 60 "$topo" --ignore-env --json --no-search --topo-file "$data/azure-ndv4.xml" --gpu-sm 70 --nic-speed 200000 \
  >sm70.json || fail "sm70 --json exited $?"
python3 - sm70.json <<'EOF' || fail "GDR read/write/flush per GPU and NET differ (above)"
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for g in d["gpus"]:
    for x in g["gdrPerNet"]:
        pix = x["net"] // 2 == g["rank"] // 2  # the two NICs on the GPU's switch
        got = (x["read"], x["write"], x["pciMode"], x["flushOnReceive"])
        if got != (False, pix, False, pix):
            bad.append(f"rank {g['rank']} net {x['net']}: read/write/pciMode/flush {got}")
print("\n".join(bad) or "GDR: no reads, writes and flushes through the PIX NICs")
sys.exit(1 if bad else 0)
EOF

# GDR mode PCI (a C2C GPU and a NIC on its switch) is the receive side's: with NCCL_NET_GDR_READ=0 the send side has no
# GDR, and the receive side still has it, through a PCI BAR mapping.
NCCL_NET_GDR_READ=0 timeout 60 "$topo" --json --no-search --topo-file "$own/c2c-gpu-nic-on-one-switch.xml" >c2c.json ||
  fail "the C2C topology --json exited $?"
python3 -c "import json; x=json.load(open('c2c.json'))['gpus'][0]['gdrPerNet'][0]; assert (x['read'], x['write'], x['pciMode'])==(False, True, True), x" ||
  fail "GDR with NCCL_NET_GDR_READ=0 on a C2C GPU: not (read off, write on through PCI)"

# --ignore-env ignores NCCL's settings: a GDR level of LOC (GDR off everywhere) and a NIC group that matches no NIC
# (NCCL fails its init on it) change nothing.
NCCL_NET_GDR_LEVEL=LOC NCCL_NET_FORCE_MERGE=no-such-nic timeout 60 "$topo" --ignore-env --json --no-search "${ndv4[@]}" \
  >ignored.json || fail "--ignore-env with NCCL_NET_GDR_LEVEL and NCCL_NET_FORCE_MERGE set exited $?"
python3 -c "import json; d=json.load(open('ignored.json')); assert d['fusion']==[] and all(x['read'] and x['write'] for g in d['gpus'] for x in g['gdrPerNet']), d.get('error')" ||
  fail "--ignore-env applied NCCL_NET_GDR_LEVEL or NCCL_NET_FORCE_MERGE"

[ "$failures" = 0 ] && echo "nccl-net-topo --json fields ok"
exit $((failures > 0))
