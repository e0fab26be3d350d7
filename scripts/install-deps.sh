#!/usr/bin/env bash
# Installs every Debian 12 package nccl-net-sdk needs to build, test and benchmark. Idempotent.
set -euo pipefail

packages=(
  # build
  build-essential cmake ninja-build pkg-config git python3
  # libraries the project links
  libgtest-dev libgmock-dev libbenchmark-dev libpugixml-dev libcli11-dev nlohmann-json3-dev
  libhwloc-dev hwloc libibverbs-dev ibverbs-providers rdma-core libucx-dev ucx-utils
  # sanitizers and fuzzing (clang's runtime for libFuzzer)
  clang libclang-rt-14-dev
  # the conventions' checks (scripts/lint.sh)
  clang-format clang-tidy
  # tools used by tests and benchmarks
  iproute2 iperf3 procps graphviz openmpi-bin libopenmpi-dev libgloo-dev
  # a hung child's stacks in a test's failure (tests/support/hung_child.hpp)
  gdb
  # the IB plugin's soft-RoCE VM (tests/ib/rxe-vm/run-rxe-vm.sh)
  qemu-system-x86 linux-image-amd64 busybox-static cpio kmod perftest ibverbs-utils
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

# As root apt runs directly; otherwise through sudo, with the non-interactive frontend passed explicitly (sudo's
# env_reset drops an exported DEBIAN_FRONTEND, and iperf3's postinst then stopped at a debconf question).
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: not root and no sudo: run this as root, or install these first: ${missing[*]}" >&2
    exit 1
  fi
  SUDO=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
