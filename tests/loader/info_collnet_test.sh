#!/usr/bin/env bash
# nccl-net-info shows the chosen plugin's collNet: its versions, the one taken, what it reduces and its devices
# (human and --json), an old-only collNet (v6, v7) taken through its version, which collectives each offers, and why
# none is used (none exported, no devices).
set -euo pipefail
info="$1"
json_check() {  # $1 plugin, $2 python assertion on d["collNet"] as c
  "$info" --json -p "$1" | python3 -c "import json,sys; c=json.load(sys.stdin)['collNet']; assert $2, c"
}
json_check one-rank-coll "c['iallgather'] and c['ireducescatter'] and c['chosenVersion']==12 and c['exportedVersions']==[12,11,10,9,8,7,6] and c['name']=='one-rank-coll' and c['devices'][0]['name']=='coll0' and c['devices'][0]['maxCollBytes']==512*2**20"
json_check one-rank-coll-v6 "not c['iallgather'] and not c['ireducescatter'] and c['chosenVersion']==6 and c['exportedVersions']==[6] and c['devices'][0]['railId']==-1"
json_check minimal "c['chosenVersion']==0 and c['exportedVersions']==[] and 'exports no ncclCollNetPlugin' in c['rejectReason']"
out=$("$info" -p one-rank-coll)
grep -q "CHOSEN one-rank-coll through ncclCollNet_v12" <<<"$out"
grep -qE "^  0   coll0 " <<<"$out"
grep -qx "  collectives: iallreduce, iallgather, ireducescatter" <<<"$out"
for version in 6 7; do
  grep -qx "  collectives: iallreduce (ncclCollNet_v6 and v7 have no all-gather or reduce-scatter)" \
    <<<"$("$info" -p one-rank-coll-v$version)"
done
# reduceSupport's answers: every type and op for the one-rank collNet, the star example's subset (examples/star-collnet).
json_check one-rank-coll "len(c['reduceSupport'])==60 and {'type': 'bfloat16', 'op': 'avg'} in c['reduceSupport']"
grep -qx "  reduces: sum/prod/max/min/avg of int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, fp8e4m3, fp8e5m2 (reduceSupport: NCCL offloads only these types and ops)" <<<"$("$info" -p one-rank-coll)"
if [ -e "$(dirname "$info")/../lib/libnccl-net-star.so" ]; then
  grep -qx "  reduces: sum/prod/max/min of int8, uint8, int32, uint32, int64, uint64, float, double (reduceSupport: NCCL offloads only these types and ops)" <<<"$("$info" -p star)"
  json_check star "len(c['reduceSupport'])==32 and {'type': 'half', 'op': 'sum'} not in c['reduceSupport']"
fi
out=$(NNS_TEST_COLLNET_DEVICES=0 "$info" -p one-rank-coll)
grep -q "not used: no devices" <<<"$out"
# A collNet whose init crashes (broken-collnet's collnet-init-crashes): the versions it exports, and a FAILED that
# says NCCL would crash too (it was "exports ncclCollNet none" and "not used"); exit status 1, as for a net that crashes.
# (SIGSEGV, or SIGABRT under ASan with abort_on_error=1.)
if [ -e "$(dirname "$info")/../lib/libnccl-net-broken-collnet.so" ]; then
  status=0
  out=$(NNS_PICKED_BUG=collnet-init-crashes "$info" -p broken-collnet 2>&1) || status=$?
  [ "$status" = 1 ] || { echo "a crashing collNet: exit status $status"; exit 1; }
  grep -qx "  exports ncclCollNet v12 v6" <<<"$out" || { echo "$out"; exit 1; }
  grep -qE "^  FAILED: crashed: SIG[A-Z]+ in the loader's collNet probe .*; NCCL runs the same probe when it loads the net, and would crash there too" <<<"$out" ||
    { echo "$out"; exit 1; }
  status=0
  json=$(NNS_PICKED_BUG=collnet-init-crashes "$info" --json -p broken-collnet 2>/dev/null) || status=$?
  [ "$status" = 1 ] || { echo "a crashing collNet, --json: exit status $status"; exit 1; }
  python3 -c "import json,sys; c=json.load(sys.stdin)['collNet']; assert c['exportedVersions']==[12,6] and c['crashed'] and not c['hung'], c" <<<"$json"
fi
echo "collNet shown for every case"
