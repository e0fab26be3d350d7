#!/usr/bin/env bash
# Runs nccl-net-bench allreduce and Open MPI's MPI_Allreduce with the same rank count and sizes, interleaved, on
# this host, in two pairings: over TCP loopback (nns-socket vs Open MPI's tcp BTL) and over shared memory (the
# minimal plugin vs Open MPI's vader BTL). Usage: compare.sh BUILD_DIR [RANKS] [ROUNDS]
# compare.py (next to it) adds Gloo and both rank counts in one table per rank count.
set -euo pipefail
build="${1:-build/release}"; ranks="${2:-4}"; rounds="${3:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O3 -o "$work/mpi_allreduce_bench" "$here/mpi_allreduce_bench.c"
for round in $(seq "$rounds"); do
  echo "=== round $round: nccl-net-bench (nns-socket)"
  NCCL_SOCKET_IFNAME=lo "$build/bin/nccl-net-run" -n "$ranks" "$build/bin/nccl-net-bench" allreduce -b 8 -e 64M -f 8 \
    -n 20 -w 5 -c 0 | grep -v '^#'
  echo "=== round $round: Open MPI MPI_Allreduce"
  # pml ob1 pinned: where Open MPI picks its UCX pml, --mca btl is ignored (and the ranks use shared memory).
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo \
    "$work/mpi_allreduce_bench" 8 67108864 8 20 5 | grep -v '^#'
  echo "=== round $round: nccl-net-bench (minimal plugin, shared memory)"
  "$build/bin/nccl-net-run" -n "$ranks" "$build/bin/nccl-net-bench" allreduce -p minimal -b 8 -e 64M -f 8 \
    -n 20 -w 5 -c 0 | grep -v '^#'
  echo "=== round $round: Open MPI MPI_Allreduce (vader shared memory)"
  mpirun --allow-run-as-root --oversubscribe -np "$ranks" --mca pml ob1 --mca btl self,vader \
    "$work/mpi_allreduce_bench" 8 67108864 8 20 5 | grep -v '^#'
done
