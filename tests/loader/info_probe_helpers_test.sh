#!/usr/bin/env bash
# A process a plugin forks while nccl-net-info probes it (a monitor forked at init without an exec) dies with the
# probe's process group, as nccl-net-check's rules' helpers do: it outlived the tool under PID 1 for its 5 minutes.
# The tool's processes are found by a variable only its run has in its environment (the helper inherits it). Run over
# the misbehaving plugins (one crashes, one hangs and is killed, one forks the helper) and on the helper's plugin
# alone, chosen (its devices and collNet probed too); the tool's own exit status is what it was.
set -euo pipefail
info="$1"; misbehaving="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$misbehaving/libnccl-net-broken-forked-helper.so" "$work/"
fail() { echo "FAILED: $1"; echo "$2"; exit 1; }
marker="NNS_INFO_PROBE_HELPER_TEST=$$.$RANDOM"

# The processes (other than this script's) whose environment holds the marker, with their command lines.
survivors() {
  local file pid
  for file in /proc/[0-9]*/environ; do
    pid=${file#/proc/}; pid=${pid%/environ}
    [ "$pid" = $$ ] && continue
    if grep -qzx -- "$marker" "$file" 2>/dev/null; then
      echo "$pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)"
    fi
  done
}

check() {  # $1: the exit status expected; the rest: nccl-net-info's arguments
  local expected="$1" status=0 out left
  shift
  out=$(env "$marker" "$info" "$@" 2>&1) || status=$?
  [ "$status" = "$expected" ] || fail "nccl-net-info $* exited $status, not $expected" "$out"
  grep -q "libnccl-net-broken-forked-helper.so" <<<"$out" || fail "the helper's plugin was not probed" "$out"
  sleep 0.3
  left=$(survivors)
  if [ -n "$left" ]; then
    # Not left for minutes behind the test either.
    for pid in $(cut -d: -f1 <<<"$left"); do kill -9 "$pid" 2>/dev/null || true; done
    fail "nccl-net-info $* left processes of its probes running after it exited:" "$left"$'\n'"$out"
  fi
}

check 1 -L "$misbehaving" -p minimal --call-timeout 4
check 0 -L "$work" -p "$work/libnccl-net-broken-forked-helper.so" --call-timeout 4
echo "PASS: no process a plugin forked while probed outlives nccl-net-info"
