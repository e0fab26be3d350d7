#!/bin/sh
# guest.sh: runs inside the rxe VM (PID 1's child): soft-RoCE on a veth pair, perftest references, the plugin's tests
# and benchmark. Every outcome is one "IBVM-RESULT: <name> PASS|FAIL|SKIP <detail>" line on the console.
. "$(dirname "$0")/guest.env"
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
IP=/sbin/ip
out="$NNS_IB_BUILD/ib-rxe-vm/out"
rm -rf "$out"; mkdir -p "$out"
result() { echo "IBVM-RESULT: $*"; echo "$*" >>"$out/results.txt"; }
wanted() { [ -z "$NNS_IB_VM_ONLY" ] || echo "$1" | grep -Eq "$NNS_IB_VM_ONLY"; }
uptime_s() { cut -d' ' -f1 /proc/uptime; }

# ---- soft-RoCE on veth0 <-> veth1 ------------------------------------------------------------------------------------
$IP link set lo up
$IP link add veth0 type veth peer name veth1
$IP addr add 10.0.0.1/24 dev veth0
$IP addr add 10.0.0.2/24 dev veth1
$IP link set veth0 up
$IP link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || { result rxe_setup FAIL "rdma link add rxe0"; exit 0; }
rdma link add rxe1 type rxe netdev veth1 || { result rxe_setup FAIL "rdma link add rxe1"; exit 0; }
# Both addresses are local to this one namespace: without this the kernel would loop rxe0->rxe1 traffic through lo,
# where rxe never sees it. Locally generated traffic to the other address goes out on the veth wire instead.
for f in all default veth0 veth1; do
  echo 1 >/proc/sys/net/ipv4/conf/$f/accept_local
  echo 0 >/proc/sys/net/ipv4/conf/$f/rp_filter
done
$IP rule add pref 10 iif lo to 10.0.0.2 lookup 100
$IP route add 10.0.0.2 dev veth0 src 10.0.0.1 table 100
$IP rule add pref 10 iif lo to 10.0.0.1 lookup 101
$IP route add 10.0.0.1 dev veth1 src 10.0.0.2 table 101
$IP rule del pref 0 lookup local
$IP rule add pref 100 lookup local
for i in 1 2 3 4 5 6 7 8 9 10; do
  ibv_devinfo -d rxe1 2>/dev/null | grep -q PORT_ACTIVE && ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE && break
  sleep 0.5
done
ibv_devinfo -d rxe0 | grep -q PORT_ACTIVE || { result rxe_setup FAIL "rxe0 port not active"; exit 0; }
result rxe_setup PASS "rxe0 on veth0 (10.0.0.1), rxe1 on veth1 (10.0.0.2), ready at $(uptime_s) s"

# ---- perftest references (same device, GID index 1 = RoCE v2 IPv4-mapped) ---------------------------------------------
if wanted perftest; then
  # One device (client and server on rxe0) and across two (server rxe1, client rxe0), like the benchmark's modes.
  for pair in "same rxe0 rxe0" "two rxe1 rxe0"; do
    set -- $pair
    ib_write_bw -d $2 -x 1 -F -s 65536 -n 2000 >"$out/ib_write_bw.$1.server" 2>&1 &
    sleep 0.5
    timeout 60 ib_write_bw -d $3 -x 1 -F -s 65536 -n 2000 127.0.0.1 >"$out/ib_write_bw.$1.txt" 2>&1
    wait
    bw=$(awk '$1 == 65536 {print $4}' "$out/ib_write_bw.$1.txt")
    [ -n "$bw" ] && result perftest.ib_write_bw.$1 PASS "65536 B x2000: ${bw} MB/s average" ||
      result perftest.ib_write_bw.$1 FAIL "see $out/ib_write_bw.$1.txt"
    ib_send_lat -d $2 -x 1 -F -s 8 -n 1000 >"$out/ib_send_lat.$1.server" 2>&1 &
    sleep 0.5
    timeout 60 ib_send_lat -d $3 -x 1 -F -s 8 -n 1000 127.0.0.1 >"$out/ib_send_lat.$1.txt" 2>&1
    wait
    lat=$(awk '$1 == 8 {print $5 " typical, " $6 " average"}' "$out/ib_send_lat.$1.txt")
    [ -n "$lat" ] && result perftest.ib_send_lat.$1 PASS "8 B x1000: ${lat} us" ||
      result perftest.ib_send_lat.$1 FAIL "see $out/ib_send_lat.$1.txt"
  done
  # Large messages on one device.
  ib_write_bw -d rxe0 -x 1 -F -s 1048576 -n 300 >"$out/ib_write_bw.1m.server" 2>&1 &
  sleep 0.5
  timeout 60 ib_write_bw -d rxe0 -x 1 -F -s 1048576 -n 300 127.0.0.1 >"$out/ib_write_bw.1m.txt" 2>&1
  wait
  bw=$(awk '$1 == 1048576 {print $4}' "$out/ib_write_bw.1m.txt")
  [ -n "$bw" ] && result perftest.ib_write_bw.same.1m PASS "1048576 B x300: ${bw} MB/s average" ||
    result perftest.ib_write_bw.same.1m FAIL "see $out/ib_write_bw.1m.txt"
fi

# ---- the plugin's GoogleTest binary ------------------------------------------------------------------------------------
if wanted gtest; then
  NNS_IB_TEST_IN_VM=1 timeout 200 "$NNS_IB_BUILD/tests/ib/ib_verbs_test" --gtest_color=no >"$out/ib_verbs_test.txt" 2>&1
  status=$?
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z]' "$out/ib_verbs_test.txt" | sed 's/ (.*//' | while read -r _ verdict _ name; do
    case "$verdict" in OK) v=PASS ;; FAILED) v=FAIL ;; *) v=SKIP ;; esac
    result "ib_verbs_test.$name" $v ""
  done
  grep -E 'ib-test:' "$out/ib_verbs_test.txt"
  [ $status -eq 0 ] || { result ib_verbs_test FAIL "exit status $status"; tail -n 40 "$out/ib_verbs_test.txt"; }
fi

# ---- benchmark: one device, across two devices, through a fused vNIC of both ------------------------------------------
if wanted bench; then
  bench="$NNS_IB_BUILD/plugins/ib/bench/nns-ib-bench"
  for mode in same two fused; do
    case $mode in
      same) args="--send-hca =rxe0 --recv-hca =rxe0" ;;
      two) args="--send-hca =rxe0 --recv-hca =rxe1" ;;
      fused) args="--fuse" ;;
    esac
    timeout 90 "$bench" $args --bytes 65536 --iterations 2000 --latency-iterations 1000 >"$out/bench.$mode.txt" 2>&1
    status=$?
    line=$(grep '^bench:' "$out/bench.$mode.txt" | tr '\n' ' ')
    [ $status -eq 0 ] && result "bench.$mode" PASS "$line" || { result "bench.$mode" FAIL "status $status"; tail -n 20 "$out/bench.$mode.txt"; }
  done
  timeout 90 "$bench" --send-hca =rxe0 --recv-hca =rxe0 --bytes 1048576 --iterations 300 --window 8 \
    --latency-iterations 10 >"$out/bench.same.1m.txt" 2>&1
  status=$?
  line=$(grep '^bench:' "$out/bench.same.1m.txt" | tr '\n' ' ')
  [ $status -eq 0 ] && result "bench.same.1m" PASS "$line" || { result "bench.same.1m" FAIL "status $status"; tail -n 20 "$out/bench.same.1m.txt"; }
fi
rdma statistic show link rxe0/1 >"$out/rxe0.stats" 2>&1
$IP -s link show veth0 >"$out/veth0.stats" 2>&1
