#!/usr/bin/env bash
# shellcheck disable=SC2046  # $(torch ...) is split on purpose: it prints VAR=VALUE words without spaces
# The bootstrap across three "hosts" (network namespaces on one bridge) under each launcher's environment: mpirun
# (which scripts/install-deps.sh installs; its absence fails the test), srun running torchrun (both launchers'
# variables present), torchrun with MASTER_ADDR a host name that rank 0's /etc/hosts maps to 127.0.1.1 (Debian's
# habit) and as an IPv6 address; then the failures: a wrong
# WORLD_SIZE on one rank, a rank that never arrives, a DNS server that never answers, two jobs on one root port, a
# rank killed mid-allreduce, a link taken down mid-run. Every rank must end with the result or a clear error in
# bounded time. Exit 4 (a ctest SKIP) with the reason when namespaces cannot be made here; everything made is removed
# on any exit.
set -uo pipefail
bin="$1"
bench="$bin/nccl-net-bench"
example="$bin/nns-c-api-example"
tag="nnl$$"
sw="$tag-sw"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  for ns in "$tag-0" "$tag-1" "$tag-2" "$tag-3" "$sw"; do
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if [ "$(id -u)" != 0 ] || ! command -v ip > /dev/null; then echo "SKIP: needs root and iproute2"; exit 4; fi
if ! ip netns add "$sw" 2> "$tmp/err"; then echo "SKIP: no network namespaces here: $(cat "$tmp/err")"; exit 4; fi
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || { echo "FAILED: bridge"; exit 1; }
for i in 0 1 2; do
  ns="$tag-$i"
  ip netns add "$ns" &&
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "$sw" &&
    ip -n "$sw" link set "p$i" master br0 && ip -n "$sw" link set "p$i" up &&
    ip -n "$ns" addr add "10.78.0.$((i + 1))/24" dev eth0 &&
    ip -n "$ns" addr add "fd78::$((i + 1))/64" dev eth0 nodad &&
    ip -n "$ns" addr add "fe80::78:$((i + 1))/64" dev eth0 nodad &&
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || { echo "FAILED: host $i"; exit 1; }
  # `ip netns exec` shows /etc/netns/NAME/hosts as /etc/hosts. Host 0 names itself 127.0.1.1, as Debian's installer
  # writes it; the others know it by its address.
  mkdir -p "/etc/netns/$ns"
  {
    echo "127.0.0.1 localhost"
    for j in 0 1 2; do
      if [ "$j" = "$i" ] && [ "$i" = 0 ]; then echo "127.0.1.1 nnlhost0"; else echo "10.78.0.$((j + 1)) nnlhost$j"; fi
    done
  } > "/etc/netns/$ns/hosts"
done

# Host 3 has, listed before its eth0 (10.78.0.4), a BMC's link-local usb0 (169.254.1.1) and a tunnel no other host
# reaches (tun0, 10.99.0.1), each a veth pair within the host, and names itself 127.0.1.1; the others know it by its
# address.
ns="$tag-3"
ip netns add "$ns" && ip -n "$ns" link add usb0 type veth peer name zzusb0 &&
  ip -n "$ns" addr add 169.254.1.1/16 dev usb0 && ip -n "$ns" link set usb0 up && ip -n "$ns" link set zzusb0 up &&
  ip -n "$ns" link add tun0 type veth peer name zztun0 && ip -n "$ns" addr add 10.99.0.1/24 dev tun0 &&
  ip -n "$ns" link set tun0 up && ip -n "$ns" link set zztun0 up && ip link add eth0 netns "$ns" type veth peer name p3 netns "$sw" &&
  ip -n "$sw" link set p3 master br0 && ip -n "$sw" link set p3 up && ip -n "$ns" addr add 10.78.0.4/24 dev eth0 &&
  ip -n "$ns" addr add fe80::78:4/64 dev eth0 nodad &&
  ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || { echo "FAILED: host 3"; exit 1; }
mkdir -p "/etc/netns/$ns"
printf '127.0.0.1 localhost\n127.0.1.1 nnlhost3\n' > "/etc/netns/$ns/hosts"
for i in 0 1 2; do echo "10.78.0.4 nnlhost3" >> "/etc/netns/$tag-$i/hosts"; done

# The kernel marks a link running (IFF_RUNNING, which the ranks' interface choice reads) from deferred work up to a
# second after its carrier came on: wait for that, or a loaded host's first rank can see only loopback.
for host in 0 1 2 3; do
  for link in eth0 $([ "$host" = 3 ] && echo usb0 tun0); do
    for _ in $(seq 100); do ip -n "$tag-$host" -o link show dev "$link" | grep -q 'state UP' && break; sleep 0.05; done
  done
done

failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }
# start NAME HOST VAR=VALUE... -- COMMAND...: one rank in host HOST's namespace, output in $tmp/NAME.log.
start() {
  local name=$1 host=$2 vars=()
  shift 2
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  env "${vars[@]}" ip netns exec "$tag-$host" "$@" > "$tmp/$name.log" 2>&1 &
  pids+=($!)
  eval "pid_$name=$!"
}
# finish NAME LIMIT: waits at most LIMIT seconds for the rank; sets `status` (999: still running, killed).
finish() {
  local pid
  eval "pid=\$pid_$1"
  for _ in $(seq $(($2 * 20))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"; wait "$pid" 2>/dev/null; status=999
  else
    wait "$pid"; status=$?
  fi
}
expect_ok() {  # NAME LIMIT TEXT
  finish "$1" "$2"
  [ "$status" = 0 ] && grep -q "$3" "$tmp/$1.log" || { fail "$1: status $status, wanted '$3'"; sed 's/^/    /' "$tmp/$1.log"; }
}
expect_error() {  # NAME LIMIT TEXT
  finish "$1" "$2"
  [ "$status" != 0 ] && [ "$status" != 999 ] && grep -q -- "$3" "$tmp/$1.log" ||
    { fail "$1: status $status, wanted an error with '$3'"; sed 's/^/    /' "$tmp/$1.log"; }
}
torch() {  # RANK WORLD_SIZE [VAR=VALUE...]: torchrun's variables for a worker of one-worker nodes
  echo "RANK=$1 WORLD_SIZE=$2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 GROUP_RANK=$1 TORCHELASTIC_RUN_ID=none"
}
base=(NNS_COMM_TIMEOUT_MS=2000 NNS_DEBUG=INFO)
# The cases that must succeed get a long timeout: 2 s for every rank to arrive was tight for 3 or 4 sanitized ranks
# started through `ip netns exec` on a loaded 2-core host.
ok=(NNS_COMM_TIMEOUT_MS=30000 NNS_DEBUG=INFO)
# The cases where a rank is missing on purpose: every other rank must have arrived within the timeout for the error to
# name only the missing one, which 2 s did not leave room for under ASan either.
missing=(NNS_COMM_TIMEOUT_MS=5000 NNS_DEBUG=INFO)
port=$((20000 + $$ % 20000))

# mpirun: its own daemons talk over the root namespace; each rank enters its host's namespace for our sockets.
if command -v mpirun > /dev/null; then
  printf '#!/bin/sh\nexec ip netns exec %s-$OMPI_COMM_WORLD_RANK "$@"\n' "$tag" > "$tmp/in-host.sh"
  chmod +x "$tmp/in-host.sh"
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 3 -x MASTER_ADDR=10.78.0.1 -x MASTER_PORT=$port \
    -x NNS_DEBUG=INFO -x NCCL_DEBUG=INFO "$tmp/in-host.sh" "$bench" allreduce -b 8 -e 256K -f 32 -c 1 > "$tmp/mpirun.log" 2>&1
  code=$?
  for r in 0 1 2; do
    grep -q "bootstrap: rank $r of 3 from OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI), local rank $r" \
      "$tmp/mpirun.log" || fail "mpirun: rank $r's launch line"
    grep -q "listening on 10.78.0.$((r + 1)):.*eth0" "$tmp/mpirun.log" || fail "mpirun: host $r's socket plugin not on eth0"
  done
  [ $code = 0 ] && grep -qE "^ +262144 .* 0$" "$tmp/mpirun.log" || { fail "mpirun: status $code"; cat "$tmp/mpirun.log"; }
  grep -q "listening on 127\." "$tmp/mpirun.log" && fail "mpirun: loopback chosen across hosts"
else
  fail "mpirun is not installed (scripts/install-deps.sh installs openmpi-bin): its case cannot run"
fi
port=$((port + 1))

# srun running torchrun on two nodes, two workers each: Slurm's variables name the node's task, torchrun's the
# worker; the worker's must win (and both workers of a node must not both be rank 0 or 1).
for node in 0 1; do
  for lr in 0 1; do
    start "srun_torchrun_$node$lr" $node "${ok[@]}" SLURM_PROCID=$node SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=$node \
      SLURM_JOB_ID=4242 SLURM_STEP_ID=0 "SLURM_STEP_NODELIST=nnlhost[0-1]" "SLURM_JOB_NODELIST=nnlhost[0-1]" \
      RANK=$((2 * node + lr)) WORLD_SIZE=4 LOCAL_RANK=$lr LOCAL_WORLD_SIZE=2 GROUP_RANK=$node TORCHELASTIC_RUN_ID=none \
      MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- "$example"
  done
done
for node in 0 1; do
  for lr in 0 1; do
    expect_ok "srun_torchrun_$node$lr" 20 "rank $((2 * node + lr)) of 4: allreduce and ring exchange correct"
    grep -q "from RANK/WORLD_SIZE (torchrun), local rank $lr; ignored SLURM_PROCID=$node/SLURM_NTASKS=2" \
      "$tmp/srun_torchrun_$node$lr.log" || fail "srun_torchrun_$node$lr: launch line"
  done
done
port=$((port + 1))

# MASTER_ADDR as a host name (rank 0 resolves it to 127.0.1.1, the others to 10.78.0.1), then as IPv6.
for addr in nnlhost0 fd78::1; do
  for r in 0 1 2; do
    start "addr_$r" $r "${ok[@]}" $(torch $r 3) MASTER_ADDR=$addr MASTER_PORT=$port -- "$example"
  done
  for r in 0 1 2; do expect_ok "addr_$r" 20 "rank $r of 3: allreduce and ring exchange correct"; done
  port=$((port + 1))
done

# A wrong WORLD_SIZE on rank 2: it fails at once with the reason; the others after the timeout, naming it.
for r in 0 1 2; do
  size=3; [ $r = 2 ] && size=4
  start "size_$r" $r "${missing[@]}" $(torch $r $size) MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- "$example"
done
# Rank 2 is refused as soon as it reaches rank 0: its limit is under the timeout, with room for a sanitized start.
expect_error size_2 4 "rank 0 expects 3 ranks, and rank 2 says 4"
expect_error size_0 12 "rank(s) 2 did not arrive within 5000 ms.*turned away: rank 2 of 4"
expect_error size_1 12 "rank 0 gave up: rank(s) 2 did not arrive within 5000 ms"
port=$((port + 1))

# Ranks 0 and 1 on host 3, rank 2 on host 1, MASTER_ADDR host 3's name (127.0.1.1 there): rank 1 reaches rank 0 over
# loopback and announces an interface's address instead, the one NCCL_SOCKET_IFNAME selects. It announced the first
# interface up (usb0's 169.254.1.1), whatever NCCL_SOCKET_IFNAME said, and rank 2 found it unreachable.
for r in 0 1 2; do
  host=3; [ $r = 2 ] && host=1
  start "ifname_$r" $host "${ok[@]}" $(torch $r 3) MASTER_ADDR=nnlhost3 MASTER_PORT=$port NCCL_SOCKET_IFNAME=eth0 -- \
    "$example"
done
for r in 0 1 2; do expect_ok "ifname_$r" 20 "rank $r of 3: allreduce and ring exchange correct"; done
grep -q "listens for the other ranks at 10.78.0.4:" "$tmp/ifname_1.log" || fail "ifname_1: not announced on eth0"
port=$((port + 1))

# A link-local IPv6 root address, rank 0 on host 3 (whose eth0 has another interface index than the others'): each
# rank reaches the others' link-local listeners through its own eth0 (and the socket plugin is told eth0: it would take
# host 3's usb0, the first interface, as NCCL's does). The scope of the address a rank announced was
# taken as it was, its own interface index, and the others found no route.
for r in 0 1 2; do
  host=3; [ $r != 0 ] && host=$r
  start "linklocal_$r" $host "${ok[@]}" $(torch $r 3) "MASTER_ADDR=fe80::78:4%eth0" MASTER_PORT=$port \
    NCCL_SOCKET_IFNAME=eth0 -- "$example"
done
for r in 0 1 2; do expect_ok "linklocal_$r" 20 "rank $r of 3: allreduce and ring exchange correct"; done
port=$((port + 1))

# Rank 2 never arrives: every rank that did fails after the timeout, naming it.
for r in 0 1; do
  start "absent_$r" $r "${missing[@]}" $(torch $r 3) MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- "$example"
done
expect_error absent_0 12 "rank(s) 2 did not arrive within 5000 ms at 10.78.0.1:$port"
expect_error absent_1 12 "rank 0 gave up: rank(s) 2 did not arrive"
port=$((port + 1))

# A DNS server that never answers (one on the bridge's subnet that no host has, its neighbour entry fixed so that no
# ARP failure ends the wait early): the root's name fails within the bootstrap's 2 s, where the resolver held the
# rank for its own 20 s.
printf 'nameserver 10.78.0.53\noptions timeout:20 attempts:1\n' > "/etc/netns/$tag-2/resolv.conf"
ip -n "$tag-2" neigh replace 10.78.0.53 lladdr 02:00:00:00:00:53 dev eth0 nud permanent
start dns 2 "${base[@]}" NNS_RANK=1 NNS_WORLD_SIZE=2 NNS_ROOT_ADDR=nnl-unanswered.example:$port -- "$bench" allreduce \
  -b 8 -e 8
expect_error dns 8 "cannot resolve root address nnl-unanswered.example: the resolver did not answer within"
rm -f "/etc/netns/$tag-2/resolv.conf"

# Two jobs on one root port (torchrun run ids a and b, each two ranks moving a different size): job b's rank 1
# reaches job a's rank 0 first; it must be turned away and wait for its own rank 0, which listens once job a's
# has stopped listening. Ranks of different jobs in one communicator would fail on the sizes. Job a's rank 1 starts
# once its rank 0 has turned job b's away (started after a fixed pause, it could reach rank 0 first on a slow host).
# Job b's rank 1 waits through all of job a: its timeout leaves room for that under ASan.
job() {  # JOB RANK SIZE_BYTES
  start "job$1_$2" $2 "${base[@]}" NNS_COMM_TIMEOUT_MS=20000 RANK=$2 WORLD_SIZE=2 TORCHELASTIC_RUN_ID=$1 \
    MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- "$bench" allreduce -b $3 -e $3 -n 2 -w 0 -c 1
}
job b 1 2048; sleep 0.5; job a 0 1024
for _ in $(seq 100); do grep -q "turned away a connection claiming rank 1" "$tmp/joba_0.log" 2>/dev/null && break; sleep 0.1; done
job a 1 1024
finish joba_0 10; [ "$status" = 0 ] || { fail "job a rank 0: status $status"; cat "$tmp/joba_0.log"; }
job b 0 2048
expect_ok jobb_0 10 "^ *2048 "
finish jobb_1 10; [ "$status" = 0 ] || fail "job b rank 1: status $status"
finish joba_1 10; [ "$status" = 0 ] || fail "job a rank 1: status $status"
grep -q "turned away a connection claiming rank 1 of 2: rank 0 there belongs to another job" "$tmp/joba_0.log" ||
  fail "job a's rank 0 did not turn job b's rank 1 away"
port=$((port + 1))

# A rank killed mid-allreduce, and a link taken down mid-run: every other rank fails with an error, never hangs.
for case in kill linkdown; do
  for r in 0 1 2; do
    start "${case}_$r" $r NNS_COMM_TIMEOUT_MS=3000 $(torch $r 3) MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- \
      "$bench" allreduce -b 4M -e 4M -n 1000000 -w 0
  done
  for _ in $(seq 200); do grep -q "^# nccl-net-bench" "$tmp/${case}_0.log" && break; sleep 0.05; done
  sleep 0.5
  if [ $case = kill ]; then
    # shellcheck disable=SC2154  # pid_kill_2 is set by start() (eval "pid_$name=$!")
    kill -9 "$pid_kill_2"
    expect_error kill_0 5 "returned ncclRemoteError\|no progress"
    expect_error kill_1 5 "returned ncclRemoteError\|no progress"
  else
    ip -n "$tag-2" link set eth0 down
    for r in 0 1 2; do expect_error "linkdown_$r" 8 "no progress for 3000 ms\|returned ncclRemoteError"; done
    ip -n "$tag-2" link set eth0 up
  fi
  port=$((port + 1))
done

# A root port already taken on host 0: rank 0 says so at once.
ip netns exec "$tag-0" python3 -c "
import socket, time
s = socket.socket(); s.bind(('10.78.0.1', $port)); s.listen(); open('$tmp/listening', 'w').close(); time.sleep(30)" &
pids+=($!)
for _ in $(seq 100); do [ -e "$tmp/listening" ] && break; sleep 0.05; done  # the port is taken before rank 0 starts
start busy_0 0 "${base[@]}" $(torch 0 2) MASTER_ADDR=10.78.0.1 MASTER_PORT=$port -- "$example"
expect_error busy_0 2 "rank 0 cannot listen on 10.78.0.1:$port: Address already in use"

[ $failures = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "launchers across namespaces ok"
