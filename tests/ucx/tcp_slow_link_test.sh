#!/usr/bin/env bash
# Runs "$@" (a test of ucx_close_test) in a network namespace of its own whose loopback is limited to 100 Mbit/s
# (tc's token bucket filter), with NNS_UCX_SLOW_LINK=1 for the test to run. Exit 4 (a ctest SKIP) with the reason
# when the namespace or the limit cannot be made here (needs root, iproute2 and the kernel's sch_tbf).
unshare -n true 2>/dev/null || { echo "SKIP: cannot make a network namespace (needs root and util-linux's unshare)"; exit 4; }
exec unshare -n bash -c '
  ip link set lo up || { echo "SKIP: cannot bring up the namespace'"'"'s loopback"; exit 4; }
  tc qdisc add dev lo root tbf rate 100mbit burst 256kb latency 5000ms ||
    { echo "SKIP: cannot limit the loopback (tc tbf)"; exit 4; }
  NNS_UCX_SLOW_LINK=1 exec "$@"' slow-link "$@"
