#!/usr/bin/env bash
# What nccl-net-run gives each rank: its rank, the world size, its local rank, the launcher's name, one root address
# and one job id shared by every rank; and NCCL_SOCKET_IFNAME=lo where the user set none (the ranks share this host),
# but the user's own interface where one is set, so that `NCCL_SOCKET_IFNAME=eth0 nccl-net-run ...` measures eth0.
# Usage: launcher_environment_test.sh BIN_DIR
set -uo pipefail
run="$1/nccl-net-run"
status=0
fail() { echo "FAILED: $*"; status=1; }

out=$(env -u NCCL_SOCKET_IFNAME "$run" -n 3 --timeout 30 sh -c \
  'echo "rank=$NNS_RANK size=$NNS_WORLD_SIZE local=$NNS_LOCAL_RANK launcher=$NNS_LAUNCHER root=$NNS_ROOT_ADDR job=$NNS_JOB_ID ifname=$NCCL_SOCKET_IFNAME"' 2>&1) ||
  fail "nccl-net-run -n 3 exited $?: $out"
for r in 0 1 2; do
  grep -qE "^rank=$r size=3 local=$r launcher=nccl-net-run root=127\.0\.0\.1:[0-9]+ job=[^ ]+ ifname=lo$" <<<"$out" ||
    fail "rank $r's environment: $out"
done
[ "$(grep -oE 'root=[^ ]+ job=[^ ]+' <<<"$out" | sort -u | wc -l)" -eq 1 ] ||
  fail "the ranks were given different root addresses or job ids: $out"

out=$(NCCL_SOCKET_IFNAME=eth9 "$run" -n 2 --timeout 30 sh -c 'echo "rank $NNS_RANK ifname=$NCCL_SOCKET_IFNAME"' 2>&1)
[ "$(grep -c 'ifname=eth9$' <<<"$out")" -eq 2 ] || fail "NCCL_SOCKET_IFNAME=eth9 was not kept for every rank: $out"

out=$(NCCL_SOCKET_IFNAME='' "$run" -n 2 --timeout 30 sh -c 'echo "rank $NNS_RANK ifname=$NCCL_SOCKET_IFNAME"' 2>&1)
[ "$(grep -c 'ifname=lo$' <<<"$out")" -eq 2 ] || fail "an empty NCCL_SOCKET_IFNAME did not become lo: $out"

# Rank 0 behind a wrapper that closes inherited descriptors (Python's subprocess by default) never gets the
# launcher's listener, which still holds the root port: its bind fails, and the error says why and what to do.
if command -v python3 >/dev/null; then
  out=$(NCCL_SOCKET_IFNAME=lo "$run" -n 2 --timeout 60 python3 -c \
    'import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)' \
    "$1/nccl-net-bench" allreduce -b 8 -e 8 -n 1 -w 0 2>&1)
  grep -q "did not reach this process: a program between the launcher and this rank closed the descriptors it inherited" <<<"$out" ||
    fail "rank 0 behind a descriptor-closing wrapper: $out"
fi

[ "$status" -eq 0 ] && echo "launcher environment: every rank's as documented"
exit "$status"
