#!/usr/bin/env bash
# Allreduce, allgather and reducescatter through a plugin's collNet (NCCL's CollNet algorithm) over the star example
# (examples/star-collnet): by name (-A collnet, NNS_ALGO=collnet) and by NCCL_COLLNET_ENABLE=1, results checked by
# nccl-net-bench (-c 1), the connection said in NCCL_DEBUG=INFO; what the collNet cannot take is refused by name on
# every rank, or left to the other algorithms under NCCL_COLLNET_ENABLE; a library without a collNet is named.
# Usage: collnet_test.sh BIN_DIR
set -uo pipefail
bin="$1"
export NNS_STAR_IFNAME=lo
fail() { echo "FAILED: $1"; echo "$2" | tail -20; exit 1; }
collective=allreduce
bench() { "$bin/nccl-net-run" -n "$1" --timeout 120 "$bin/nccl-net-bench" "$collective" "${@:2}" 2>&1; }
has_wrong() {  # true when the output has no result row, or a row with a wrong element
  ! grep -qE '^ +[0-9]+ +[0-9]+ ' <<<"$1" || awk '/^ +[0-9]+ +[0-9]+ / && $9 != "0" {found = 1} END {exit !found}' <<<"$1"
}

# How a run's buffers of 64 KiB and more go (the last field of each run): registered with the star for each call and
# walked in windows, or copied through the slots; said on the connection's INFO line. Set by NNS_CALL_REGISTRATION:
# unset, the star's registration is timed, which a sanitizer build can slow past the 1 us that counts as free (see
# the default run below).
how() {  # how copy|register: sets the environment for the next runs
  if [ "$1" = copy ]; then export NNS_CALL_REGISTRATION=0; else export NNS_CALL_REGISTRATION=1; fi
}
registration() {
  if [ "$1" = copy ]; then
    echo "are copied through the slots (NNS_CALL_REGISTRATION=0)"
  else
    echo "are registered with it for each call and walked in slot-sized windows (NNS_CALL_REGISTRATION=1)"
  fi
}

# By name: each op the star reduces, each with another type (avg and mulsum are not the star's: the refusal is
# checked below), 8 B to 8 MiB (16 parts of 512 KiB through 2 slot pairs), on 1, 2 and 4 ranks, in place and not, the
# buffers registered or copied.
runs=("1 sum int32 0 register" "1 sum int32 1 copy")
for ranks in 2 4; do
  runs+=("$ranks sum int32 0 register" "$ranks prod float 1 copy" "$ranks max double 0 copy" "$ranks min uint8 1 register")
done
for run in "${runs[@]}"; do
  read -r ranks op type inplace how <<<"$run"
  how "$how"
  out=$(NCCL_DEBUG=INFO bench "$ranks" -p star -A collnet -d "$type" -o "$op" -b 8 -e 8M -f 8 -c 1 -n 1 -w 0 \
        -I "$inplace") || fail "-A collnet: $run" "$out"
  grep -q "collNet star (ncclCollNet_v12) connected: $ranks ranks.*through it: allreduce, allgather, reducescatter" \
    <<<"$out" || fail "no collNet connected: $run" "$out"
  grep -qF "$(registration "$how")" <<<"$out" || fail "the buffers are not said to be ${how}ed: $run" "$out"
  has_wrong "$out" && fail "a wrong element through the collNet: $run" "$out"
done
unset NNS_CALL_REGISTRATION
# By default each rank times a regMr/deregMr pair of the star's, and the line says what it took.
out=$(NCCL_DEBUG=INFO bench 2 -p star -A collnet -d float -b 1M -e 1M -c 1 -n 1 -w 0) || fail "-A collnet, 1 MiB" "$out"
grep -qE "are (registered with it for each call and walked in slot-sized windows|copied through the slots) \(a regMr/deregMr pair takes [0-9.]+ us\)" \
  <<<"$out" || fail "the registration's timing is not said" "$out"
has_wrong "$out" && fail "a wrong element through the collNet, 1 MiB" "$out"
echo "allreduce through the star collNet: right on 1, 2 and 4 ranks, in place and not, registered and copied"

# Allgather and reducescatter by name, up to 5.6 MiB (-e 8M -f 7), counts not a multiple of anything; in place and
# not; 1 to 4 ranks. Copied, each operation is a full window of every rank's part (a 512 KiB slot holds 512 KiB /
# ranks of each): up to 11 parts through 2 slot pairs. Registered (64 KiB and more per rank), the operations walk
# the output (input) in windows of 512 KiB that start and end inside ranks' blocks, as NCCL's proxy posts them.
runs=("allgather 1 sum int32 0 register" "reducescatter 1 sum float 1 copy")
for ranks in 2 3 4; do
  runs+=("allgather $ranks sum int8 0 copy" "allgather $ranks sum double 1 register"
         "reducescatter $ranks sum int32 0 register" "reducescatter $ranks prod float 1 register"
         "reducescatter $ranks max uint64 1 copy" "reducescatter $ranks min int8 0 copy")
done
for run in "${runs[@]}"; do
  read -r collective ranks op type inplace how <<<"$run"
  how "$how"
  out=$(NCCL_DEBUG=INFO bench "$ranks" -p star -A collnet -d "$type" -o "$op" -b 1 -e 8M -f 7 -c 1 -n 1 -w 0 \
        -I "$inplace") || fail "-A collnet: $run" "$out"
  grep -q "collNet star (ncclCollNet_v12) connected: $ranks ranks" <<<"$out" || fail "no collNet connected: $run" "$out"
  grep -qF "$(registration "$how")" <<<"$out" || fail "the buffers are not said to be ${how}ed: $run" "$out"
  grep -q "^# algorithm: collnet$" <<<"$out" || fail "the header does not say collnet: $run" "$out"
  has_wrong "$out" && fail "a wrong element through the collNet: $run" "$out"
done
how register
# One rank that copies (NNS_CALL_REGISTRATION=0 on rank 2, 1 on the others): every rank copies, all alike (registered
# and copied operations are other windows).
out=$(NCCL_DEBUG=INFO "$bin/nccl-net-run" -n 3 --timeout 60 sh -c \
  'if [ "$NNS_RANK" = 2 ]; then export NNS_CALL_REGISTRATION=0; fi; exec "$0" "$@"' \
  "$bin/nccl-net-bench" allgather -p star -A collnet -d int32 -b 1M -e 4M -f 2 -c 1 -n 1 -w 0 2>&1) ||
  fail "allgather with rank 2 copying" "$out"
grep -q "\[rank 0\] INFO collNet star.*are copied through the slots (rank 2 copies them)" <<<"$out" ||
  fail "rank 0 does not say that rank 2 copies" "$out"
has_wrong "$out" && fail "a wrong element with rank 2 copying" "$out"
unset NNS_CALL_REGISTRATION
collective=allgather
out=$(NNS_ALGO=collnet NCCL_DEBUG=INFO bench 2 -p star -d int32 -b 8 -e 64K -c 1 -n 1 -w 0) ||
  fail "NNS_ALGO=collnet allgather" "$out"
grep -q "^# algorithm: collnet (from NNS_ALGO)$" <<<"$out" || fail "NNS_ALGO=collnet: not in the header" "$out"
grep -q "collNet star (ncclCollNet_v12) connected" <<<"$out" || fail "NNS_ALGO=collnet: no collNet" "$out"
has_wrong "$out" && fail "a wrong element with NNS_ALGO=collnet" "$out"
out=$(bench 2 -p star -A tree -b 8 -e 8) && fail "allgather -A tree passed" "$out"
grep -q "allgather runs as the ring or through the collNet" <<<"$out" || fail "allgather -A tree: not named" "$out"
echo "allgather and reducescatter through the star collNet: right on 1 to 4 ranks, in place and not, registered and copied"

# By name, a type the star does not reduce: refused by name on every rank, the communicator left usable.
for collective in allreduce reducescatter; do
  out=$(bench 2 -p star -A collnet -d half -b 8 -e 8) && fail "$collective -A collnet -d half passed" "$out"
  for rank in 0 1; do
    grep -q "rank $rank: $collective through the collNet: star's reduceSupport says no to this type and op" \
      <<<"$out" || fail "$collective: the refusal does not say why on rank $rank" "$out"
  done
done
# A collNet without iallgather (ncclCollNet_v6): named.
collective=allgather
out=$(bench 1 -p one-rank-coll-v6 -A collnet -b 8 -e 8) && fail "allgather through a v6 collNet passed" "$out"
grep -q "allgather through the collNet: one-rank-coll (ncclCollNet_v6) has no iallgather" <<<"$out" ||
  fail "the missing iallgather is not named" "$out"
collective=allreduce

# Ranks whose collNets differ: rank 1's (the star through broken-collnet's collnet-without-iallgather, no bug: a v12
# table without iallgather and ireducescatter, both optional) lacks what the others' have. By name every rank refuses,
# naming rank 1; under NCCL_COLLNET_ENABLE=1 allgather and reducescatter take the ring on every rank, right.
differing() {  # differing COLLECTIVE BUG BENCH_ARGS...: 3 ranks, rank 1 over broken-collnet with NNS_PICKED_BUG=BUG
  "$bin/nccl-net-run" -n 3 --timeout 60 sh -c 'c=$1; bug=$2; shift 2; p=star
    if [ "$NNS_RANK" = 1 ]; then p=broken-collnet; export NNS_PICKED_BUG="$bug"; fi
    exec "$0" "$c" -p "$p" "$@"' "$bin/nccl-net-bench" "$@" 2>&1
}
for collective in allgather reducescatter; do
  call=iallgather
  [ "$collective" = reducescatter ] && call=ireducescatter
  out=$(differing "$collective" collnet-without-iallgather -A collnet -d int32 -b 12 -e 12) && fail "$collective with rank 1 lacking $call passed" "$out"
  grep -q "rank 1: $collective through the collNet: star (ncclCollNet_v12) has no $call" <<<"$out" ||
    fail "rank 1 does not name its own collNet's missing $call" "$out"
  for rank in 0 2; do
    grep -q "rank $rank: $collective through the collNet: rank 1's collNet has no $call" <<<"$out" ||
      fail "rank $rank does not name rank 1's missing $call" "$out"
  done
  out=$(NCCL_COLLNET_ENABLE=1 NCCL_DEBUG=INFO differing "$collective" collnet-without-iallgather -d int32 -b 12 -e 1M \
        -f 16 -c 1 -n 1 -w 0) ||
    fail "NCCL_COLLNET_ENABLE=1 $collective with rank 1 lacking $call" "$out"
  grep -q "\[rank 0\] INFO collNet star (ncclCollNet_v12) connected: 3 ranks.*through it: allreduce;" <<<"$out" ||
    fail "the link does not say allreduce alone ($collective)" "$out"
  has_wrong "$out" && fail "a wrong element with rank 1 lacking $call" "$out"
done
echo "ranks whose collNets differ: named by name, the ring under NCCL_COLLNET_ENABLE=1"

# A call's buffers that one rank's collNet cannot register (rank 1's regMr refuses more than 2 MiB: broken-collnet's
# collnet-registration-limit, no bug; the slots' 2 MiB still register): that rank stages the same windows through its
# slots, as NCCL's proxy does a buffer it could not register, while the others post from their registered buffers;
# said at WARN once. Calls from 64 KiB (registered everywhere) to 8 MiB (not on rank 1), in place and not.
for collective in allreduce allgather reducescatter; do
  for inplace in 0 1; do
    out=$(NNS_CALL_REGISTRATION=1 differing "$collective" collnet-registration-limit -A collnet -d float -b 64K -e 8M \
          -f 4 -c 1 -n 1 -w 0 -I "$inplace") ||
      fail "$collective -I $inplace with rank 1 unable to register its buffers" "$out"
    [ "$(grep -c "WARN rank 1: collNet star regMr of a call's buffer ([0-9]* bytes) returned ncclSystemError: this rank stages the call's windows through its slots" <<<"$out")" = 1 ] ||
      fail "$collective -I $inplace: rank 1 does not say once that it stages its windows" "$out"
    has_wrong "$out" && fail "a wrong element with rank 1 staging ($collective -I $inplace)" "$out"
  done
done
echo "a rank that cannot register a call's buffers stages the same windows: right, said once"
# Its second buffer refused after its first registered (broken-collnet's collnet-two-registrations, no bug: a comm
# holds 2 registrations at most, and the slots hold one): the first is deregistered and the call staged, right. Each
# call's message names the second buffer (128 KiB per rank); one naming the first (384 KiB) would mean the first was
# still held from a call before.
for collective in allgather reducescatter; do
  out=$(NNS_CALL_REGISTRATION=1 NCCL_DEBUG=INFO differing "$collective" collnet-two-registrations -A collnet -d float \
        -b 384K -e 384K -n 2 -w 1 -c 1) || fail "$collective with rank 1 unable to register its second buffer" "$out"
  said=$(grep -c "rank 1: collNet star regMr of a call's buffer (131072 bytes) returned ncclSystemError" <<<"$out")
  ((said >= 3)) && [ "$(grep -c "regMr of a call's buffer" <<<"$out")" = "$said" ] ||
    fail "$collective: rank 1 does not name its second buffer at each call" "$out"
  has_wrong "$out" && fail "a wrong element with rank 1 staging after its second regMr failed ($collective)" "$out"
done
echo "a rank whose second buffer cannot register releases the first and stages: right"

# Ranks whose devices take operations of different sizes (rank 1's maxCollBytes is 64 KiB: broken-collnet's
# collnet-small-operations, no bug; the star's take 512 MiB): every rank cuts its slots, and so its parts and windows,
# to the smallest, and says whose it is; cut each to its own, rank 1 posted parts of other counts than the others.
for collective in allreduce allgather reducescatter; do
  for registration in 0 1; do
    out=$(NNS_CALL_REGISTRATION=$registration NCCL_DEBUG=INFO differing "$collective" collnet-small-operations \
          -A collnet -d float -b 8 -e 4M -f 8 -c 1 -n 1 -w 0) ||
      fail "$collective (NNS_CALL_REGISTRATION=$registration) with rank 1's operations smaller" "$out"
    for rank in 0 1 2; do
      grep -q "\[rank $rank\] INFO collNet star (ncclCollNet_v12) connected: 3 ranks, [0-9]* pairs of 65536-byte host slots registered (rank 1's device takes 65536 bytes at most)" <<<"$out" ||
        fail "$collective: rank $rank does not cut its slots to rank 1's 64 KiB, or does not say so" "$out"
    done
    has_wrong "$out" && fail "a wrong element with rank 1's operations smaller ($collective)" "$out"
  done
done
echo "ranks whose devices take operations of different sizes: cut to the smallest, right"
# Its slots themselves (4 pairs of 512 KiB with NNS_SLOTS=4: 4 MiB) refused at connect: the communicator fails on that
# rank naming the regMr, and every rank ends at once rather than at the launcher's timeout.
start=$SECONDS
out=$(NNS_SLOTS=4 differing allreduce collnet-registration-limit -A collnet -d float -b 8 -e 8) &&
  fail "a collNet whose slots rank 1 cannot register passed" "$out"
grep -q "rank 1, in allreduce(count 2, float, sum, collnet): collNet star regMr returned ncclSystemError" <<<"$out" ||
  fail "rank 1 does not name the regMr of its slots" "$out"
((SECONDS - start < 30)) || fail "the slots' failed registration took $((SECONDS - start)) s to end every rank" "$out"

# NCCL_COLLNET_ENABLE=1: the collNet where it reduces, the size rule (allreduce) or the ring elsewhere; every type
# and op right.
for collective in allreduce reducescatter allgather; do
  out=$(NCCL_DEBUG=INFO NCCL_COLLNET_ENABLE=1 bench 3 -p star -d all -o all -b 8 -e 1M -f 32 -c 1 -n 1 -w 0) ||
    fail "NCCL_COLLNET_ENABLE=1 $collective over star" "$out"
  grep -q "collNet star (ncclCollNet_v12) connected: 3 ranks" <<<"$out" ||
    fail "NCCL_COLLNET_ENABLE=1 $collective: no collNet" "$out"
  header="auto (the collNet for the types and ops it reduces (NCCL_COLLNET_ENABLE=1)"
  [ "$collective" = allreduce ] || header="auto (the collNet where it takes the call (NCCL_COLLNET_ENABLE=1), else"
  grep -qF "# algorithm: $header" <<<"$out" || fail "$collective: the header does not say the collNet comes first" "$out"
  has_wrong "$out" && fail "a wrong element under NCCL_COLLNET_ENABLE=1 ($collective)" "$out"
done
collective=allreduce
echo "NCCL_COLLNET_ENABLE=1: every type and op right, the collNet's through it"

# One rank whose collNet does not load (no interface for the star on it) while the others' do: every rank learns so at
# the first call and runs by size, all alike (the rank used to fall back alone while the others waited for it to
# connect, until the launcher's timeout).
out=$(NCCL_DEBUG=INFO NCCL_COLLNET_ENABLE=1 "$bin/nccl-net-run" -n 3 --timeout 60 sh -c \
  'if [ "$NNS_RANK" = 1 ]; then export NNS_STAR_IFNAME=nosuch0; fi; exec "$0" "$@"' \
  "$bin/nccl-net-bench" allreduce -p star -d int32 -o all -b 8 -e 64K -c 1 -n 1 -w 0 2>&1) ||
  fail "NCCL_COLLNET_ENABLE=1 with one rank's collNet unloaded" "$out"
for rank in 0 2; do
  grep -q "\[rank $rank\] INFO collNet not used: rank 1 has no collNet to use (no collNet: init through" <<<"$out" ||
    fail "rank $rank was not told of rank 1's missing collNet" "$out"
done
has_wrong "$out" && fail "a wrong element with one rank's collNet unloaded" "$out"
echo "one rank without a collNet: every rank runs by size"

# The same by name: every rank refuses the call, naming the rank, at once (the ranks that had a collNet used to wait
# for it at the collNet's connect until the launcher's timeout).
start=$SECONDS
out=$("$bin/nccl-net-run" -n 3 --timeout 60 sh -c \
  'if [ "$NNS_RANK" = 1 ]; then export NNS_STAR_IFNAME=nosuch0; fi; exec "$0" "$@"' \
  "$bin/nccl-net-bench" allreduce -p star -A collnet -d int32 -b 8 -e 8 2>&1) &&
  fail "-A collnet with one rank's collNet unloaded passed" "$out"
for rank in 0 1 2; do
  grep -q "rank $rank: allreduce through the collNet: rank 1 has no collNet to use (no collNet: init through" \
    <<<"$out" || fail "rank $rank did not refuse the call naming rank 1" "$out"
done
((SECONDS - start < 30)) || fail "the refusal took $((SECONDS - start)) s" "$out"
echo "one rank without a collNet, by name: every rank refuses at once"

# A library without a collNet: by name, an error naming it; under NCCL_COLLNET_ENABLE=1, the size rule, said once.
out=$(bench 2 -p minimal -A collnet -d int32 -b 8 -e 8) && fail "-A collnet over minimal passed" "$out"
grep -q "allreduce through the collNet: rank 0 has no collNet to use (no collNet: exports no ncclCollNetPlugin" \
  <<<"$out" || fail "the missing collNet is not named" "$out"
out=$(NCCL_DEBUG=INFO NCCL_COLLNET_ENABLE=1 bench 2 -p minimal -d int32 -b 8 -e 64K -c 1 -n 1 -w 0) ||
  fail "NCCL_COLLNET_ENABLE=1 over minimal" "$out"
grep -q "collNet not used: no collNet" <<<"$out" || fail "NCCL_COLLNET_ENABLE=1 over minimal: not said" "$out"
has_wrong "$out" && fail "a wrong element over minimal" "$out"
out=$(NCCL_COLLNET_ENABLE=2 bench 1 -p star -d int32 -b 8 -e 8) && fail "NCCL_COLLNET_ENABLE=2 passed" "$out"
grep -q "NCCL_COLLNET_ENABLE=2: 0 or 1" <<<"$out" || fail "NCCL_COLLNET_ENABLE=2 not refused by name" "$out"
echo "refusals named; a library without a collNet falls back"

# NCCL_COLLNET_ENABLE=1 on one rank only: refused at creation, naming it, where rank 1 waited in the collNet's
# connect while the others ran the ring, until both timed out naming neither. 0 is the same as unset.
start=$SECONDS
out=$("$bin/nccl-net-run" -n 2 --timeout 60 sh -c '[ "$NNS_RANK" = 1 ] && export NCCL_COLLNET_ENABLE=1
  exec "$0" allreduce -p star -d int32 -b 8 -e 8 -c 1 -n 1 -w 0' "$bin/nccl-net-bench" 2>&1) &&
  fail "NCCL_COLLNET_ENABLE=1 on rank 1 only passed" "$out"
grep -q "rank 1: rank 0 runs with plugin .*, this rank with plugin .*NCCL_COLLNET_ENABLE=1: every rank needs the same" \
  <<<"$out" || fail "NCCL_COLLNET_ENABLE on one rank only: not named" "$out"
((SECONDS - start < 30)) || fail "the refusal took $((SECONDS - start)) s" "$out"
out=$("$bin/nccl-net-run" -n 2 --timeout 60 sh -c '[ "$NNS_RANK" = 1 ] && export NCCL_COLLNET_ENABLE=0
  exec "$0" allreduce -p star -d int32 -b 8 -e 8 -c 1 -n 1 -w 0' "$bin/nccl-net-bench" 2>&1) ||
  fail "NCCL_COLLNET_ENABLE=0 on rank 1 only (the same as unset) failed" "$out"
echo "NCCL_COLLNET_ENABLE on one rank only: refused by name at creation; 0 is unset"
