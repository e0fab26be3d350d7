#!/usr/bin/env bash
# run-rxe-vm.sh: boots Debian 12's kernel under qemu (TCG) with soft-RoCE (rdma_rxe) and runs the IB plugin's tests
# inside, against the host-built binaries shared over 9p. Prints "IBVM-RESULT: <test> PASS|FAIL|SKIP <detail>".
#
#   run-rxe-vm.sh BUILD_DIR            BUILD_DIR holds libnccl-net-ib.so, ib_verbs_test and nns-ib-bench
#
# Exit: 0 all passed, 1 a test failed or the VM misbehaved, 77 skipped (packages cannot be installed, no kernel,
# qemu cannot boot). Environment: NNS_IB_VM_NO_INSTALL=1 never runs apt-get; NNS_IB_VM_TIMEOUT (seconds, default
# 720) bounds the VM; NNS_IB_VM_SMP (default 2) vCPUs; NNS_IB_VM_ONLY=<regex> runs only matching guest steps (gtest,
# perf); NNS_IB_VM_PERF_ROUNDS (default 1) rounds of the interleaved perftest / nns-ib-bench comparison;
# NNS_IB_VM_QEMU another qemu-system-x86_64 binary; NNS_IB_VM_CHECK=0 leaves out tools/nccl-net-check (step "check").
# NNS_IB_VM_COMMAND='<shell command>' runs that command in the guest (busybox sh, once rxe0/rxe1 are up, with
# NNS_IB_BUILD naming the shared build tree) instead of the steps, prints its output and exits with its status
# (0 or 1): for trying things by hand on real soft-RoCE verbs.
set -uo pipefail

SKIP=77
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-}"
[ -n "$build" ] && [ -d "$build" ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build="$(cd "$build" && pwd)"
work="$build/ib-rxe-vm"
timeout_s="${NNS_IB_VM_TIMEOUT:-720}"
qemu="${NNS_IB_VM_QEMU:-qemu-system-x86_64}"
smp="${NNS_IB_VM_SMP:-2}"
started=$(date +%s)

skip() { echo "IBVM-RESULT: rxe_vm SKIP $*"; exit $SKIP; }
log() { echo "rxe-vm: $*"; }

# ---- packages ------------------------------------------------------------------------------------------------------
# Debian 12 package -> a file it provides that we need.
declare -A needs=(
  [qemu-system-x86]=/usr/bin/qemu-system-x86_64
  [linux-image-amd64]=/boot
  [busybox-static]=/bin/busybox
  [cpio]=/usr/bin/cpio
  [kmod]=/usr/bin/kmod
  [perftest]=/usr/bin/ib_write_bw
  [ibverbs-utils]=/usr/bin/ibv_devinfo
  [ibverbs-providers]=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
  [rdma-core]=/etc/libibverbs.d
  [iproute2]=/usr/bin/rdma
)
kernel_image() { ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V | tail -n 1; }
missing=()
for package in "${!needs[@]}"; do
  [ -e "${needs[$package]}" ] || missing+=("$package")
done
[ -n "$(kernel_image)" ] || missing+=(linux-image-amd64)
if [ ${#missing[@]} -gt 0 ]; then
  [ "${NNS_IB_VM_NO_INSTALL:-0}" = 1 ] && skip "missing packages ${missing[*]} and NNS_IB_VM_NO_INSTALL=1"
  [ "$(id -u)" -eq 0 ] || skip "missing packages ${missing[*]} and not root to apt-get them"
  command -v apt-get >/dev/null || skip "missing packages ${missing[*]} and no apt-get (not Debian?)"
  log "installing ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$build/ib-rxe-vm-apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$build/ib-rxe-vm-apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$build/ib-rxe-vm-apt.log" 2>&1 ||
      skip "apt-get install ${missing[*]} failed (see $build/ib-rxe-vm-apt.log)"
  fi
fi
vmlinuz="$(kernel_image)"
kver="${vmlinuz#/boot/vmlinuz-}"
[ -d "/lib/modules/$kver" ] || skip "no /lib/modules/$kver for $vmlinuz"
[ -r "$vmlinuz" ] || skip "$vmlinuz is not readable"

for binary in "$build/lib/libnccl-net-ib.so" "$build/tests/ib/ib_verbs_test" "$build/plugins/ib/bench/nns-ib-bench"; do
  [ -x "$binary" ] || [ -f "$binary" ] || { echo "IBVM-RESULT: rxe_vm FAIL $binary not built"; exit 1; }
done

# ---- initramfs -----------------------------------------------------------------------------------------------------
root="$work/root"
rm -rf "$root" && mkdir -p "$root"/{bin,sbin,etc/libibverbs.d,proc,sys,dev,tmp,run,mnt,usr/lib/x86_64-linux-gnu/libibverbs}
mkdir -p "$root$build"
cp /bin/busybox "$root/bin/busybox"

# A binary plus every library ldd names, at the same paths.
copy_with_libs() {
  local file="$1" target="${2:-$1}"
  mkdir -p "$root$(dirname "$target")"
  cp -L "$file" "$root$target"
  ldd "$file" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3} /^[[:space:]]*\/lib64\// {print $1}' | while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
}
# iproute2's ip at /sbin/ip: busybox's ip applet cannot create veth pairs.
copy_with_libs "$(command -v ip)" /sbin/ip
for tool in rdma ibv_devices ibv_devinfo ib_write_bw ib_send_lat timeout; do
  path="$(command -v "$tool")" || skip "$tool not found"
  copy_with_libs "$path" "/usr/bin/$tool"
done
# The provider is dlopen'ed by libibverbs, so ldd does not list it.
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs.so.1
# Libraries our host-built C++ binaries need (libstdc++, libgcc_s, ...), which the share does not carry.
for binary in "$build/lib/libnccl-net-ib.so" "$build/tests/ib/ib_verbs_test" "$build/plugins/ib/bench/nns-ib-bench" \
  "$build/bin/nccl-net-check" "$build/bin/nccl-net-run" "$build/bin/nccl-net-bench" "$build/bin/nccl-net-perf" \
  "$build/bin/nccl-net-info"; do
  [ -f "$binary" ] || continue  # the harness and the tools are optional (they need CLI11 and nlohmann-json)
  ldd "$binary" | awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r lib; do
    [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"; }
  done
done

modules=()
for module in virtio_pci 9pnet_virtio 9p veth crc32_generic ib_uverbs rdma_rxe; do
  while read -r kind path _; do
    [ "$kind" = insmod ] || continue
    [[ " ${modules[*]} " == *" $path "* ]] || modules+=("$path")
  done < <(modprobe -S "$kver" --show-depends "$module" 2>/dev/null)
done
[ ${#modules[@]} -ge 5 ] || skip "cannot resolve kernel modules for $kver (modprobe --show-depends)"
for path in "${modules[@]}"; do
  mkdir -p "$root$(dirname "$path")"
  cp "$path" "$root$path"
done

cat >"$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/sbin:/usr/sbin:/bin:/usr/bin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
echo "IBVM: init start \$(cut -d' ' -f1 /proc/uptime)"
for m in ${modules[*]}; do insmod \$m || echo "IBVM: insmod \$m failed"; done
mkdir -p $build  # again: a build tree under /tmp lies below the tmpfs just mounted there
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host0 $build || echo "IBVM: 9p mount failed"
/bin/sh $work/guest.sh
echo "IBVM: done \$(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
EOF
chmod +x "$root/init"
# Packing our own initramfs is this script's work, not the machine's: a failure is a failure, not a skip.
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$work/initramfs.cpio.gz") ||
  { echo "IBVM-RESULT: rxe_vm FAIL packing the initramfs (cpio | gzip) failed"; exit 1; }
cp "$here/guest.sh" "$work/guest.sh"
echo "NNS_IB_BUILD=$build" >"$work/guest.env"
echo "NNS_IB_VM_ONLY='${NNS_IB_VM_ONLY:-}'" >>"$work/guest.env"
echo "NNS_IB_VM_PERF_ROUNDS=${NNS_IB_VM_PERF_ROUNDS:-1}" >>"$work/guest.env"
echo "NNS_IB_VM_CHECK=${NNS_IB_VM_CHECK:-1}" >>"$work/guest.env"
# A sanitizer build (ASan or TSan linked into the plugin) runs every call several times slower: the guest shortens
# its longest stress rule.
# ldd's output is taken whole first: the dynamic loader writes it a line at a time, and under pipefail `ldd | grep -q`
# failed whenever grep, done at libasan's line, left the next line's write to SIGPIPE (a loaded host's timing), so the
# ASan run took the release counts: 637 s of its 780 s bound in one CI run, against 250-430 s before.
sanitized=0
linked=$(ldd "$build/lib/libnccl-net-ib.so" 2>/dev/null || true)
grep -qE 'lib(asan|tsan)' <<<"$linked" && sanitized=1
echo "NNS_IB_VM_SANITIZED=$sanitized" >>"$work/guest.env"
# A command of one's own travels as a file (no quoting through guest.env); none: the file is absent.
rm -f "$work/guest-command.sh"
[ -n "${NNS_IB_VM_COMMAND:-}" ] && printf '%s\n' "$NNS_IB_VM_COMMAND" >"$work/guest-command.sh"
log "initramfs $(du -h "$work/initramfs.cpio.gz" | cut -f1) for kernel $kver, ${#modules[@]} modules ($(($(date +%s) - started)) s)"

# ---- boot ----------------------------------------------------------------------------------------------------------
console="$work/console.log"
timeout --foreground -k 5 "$timeout_s" "$qemu" -accel tcg,thread=multi -M pc -m 4096 -smp "$smp" \
  -nographic -nodefaults -no-reboot -kernel "$vmlinuz" -initrd "$work/initramfs.cpio.gz" \
  -append "console=ttyS0 panic=-1 quiet loglevel=3" -serial stdio \
  -virtfs "local,path=$build,mount_tag=host0,security_model=none,id=host0" </dev/null >"$console" 2>&1
qemu_status=$?
tr -d '\r' <"$console" | grep -E 'IBVM|RESULT' || true
elapsed=$(($(date +%s) - started))
if ! grep -q "IBVM: init start" "$console"; then
  tail -n 20 "$console"
  skip "the VM did not reach /init (qemu status $qemu_status, ${elapsed} s): qemu cannot boot this kernel here"
fi
if ! grep -q "IBVM: done" "$console"; then
  echo "IBVM-RESULT: rxe_vm FAIL the VM did not finish within ${timeout_s} s (qemu status $qemu_status); console: $console"
  exit 1
fi
log "VM run finished in ${elapsed} s"
if [ -n "${NNS_IB_VM_COMMAND:-}" ]; then
  cat "$work/out/command.txt" 2>/dev/null
  grep -aq 'IBVM-RESULT: command PASS' "$console" && exit 0
  exit 1
fi
# grep the file itself: with pipefail, `tr | grep -q` can fail on tr's SIGPIPE once grep has found its line.
if grep -aq 'IBVM-RESULT: [^ ]* FAIL' "$console"; then
  # The failures once more, last: a CI log shortened in its middle keeps its end, and the cause with it. Each FAIL
  # line, then what its test printed about itself (the children's checks, WARNs and figures, gtest's expectations).
  echo "rxe-vm: the failures again (full console: $console)"
  tr -d '\r' <"$console" | grep -aE 'IBVM-RESULT: [^ ]+ FAIL' | cut -c1-300
  tr -d '\r' <"$console" | grep -aE '^IBVM-DETAIL: .*(ib-test:|WARN|Failure|Expected|Which is|Value of|  Actual|FAILED)' |
    grep -v 'FAILED  ] [0-9]* test' | tail -n 30 | cut -c1-300
  exit 1
fi
# The devices coming up (rxe_setup) is not a test: at least one test must have passed (the tools and the verbs test
# missing from the build left only SKIP lines and passed).
grep -aE 'IBVM-RESULT: [^ ]+ PASS' "$console" >"$work/passed.txt" || true
grep -vq 'IBVM-RESULT: rxe_setup PASS' "$work/passed.txt" ||
  { echo "IBVM-RESULT: rxe_vm FAIL no test ran (only the devices came up)"; exit 1; }
exit 0
