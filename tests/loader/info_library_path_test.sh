#!/usr/bin/env bash
# A plugin named without a path is the copy NCCL's dlopen finds: with another libnccl-net-socket.so on
# LD_LIBRARY_PATH (here the minimal plugin under that name), nccl-net-info and nccl-net-topo describe that copy, not
# the one in their own ../lib, which they try last and mark as theirs. With -L, the directory given comes first.
set -euo pipefail
info="$1"; topo="$2"; lib="$3"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$lib/libnccl-net-minimal.so" "$work/libnccl-net-socket.so"
fail() { echo "FAILED: $1"; echo "$2"; exit 1; }

out=$(LD_LIBRARY_PATH="$work" NCCL_SOCKET_IFNAME=lo "$info" -p socket 2>&1)
grep -q "opened libnccl-net-socket.so ($work/libnccl-net-socket.so)" <<<"$out" ||
  fail "nccl-net-info did not open the copy on LD_LIBRARY_PATH" "$out"
# Through a file, not an argument: every library found is in it (with what each exports beyond NCCL's tables, a lot
# for the test shims under a sanitizer), past the 128 KiB an argument may hold.
LD_LIBRARY_PATH="$work" NCCL_SOCKET_IFNAME=lo "$info" -p socket --json > "$work/info.json"
python3 - "$work/info.json" "$work" <<'PY'
import json, sys
out, work = json.load(open(sys.argv[1])), sys.argv[2]
chosen = out["chosen"]
assert chosen["name"] == "minimal", chosen
cand = out["candidates"][0]
assert cand["openedFile"] == work + "/libnccl-net-socket.so", cand
assert cand["foundOnlyInToolSearchDir"] is None, cand
assert out["searchDirsLast"] is True, out["searchDirsLast"]
PY

# Without the copy: its own ../lib, tried last, marked as not NCCL's.
out=$(LD_LIBRARY_PATH='' NCCL_SOCKET_IFNAME=lo "$info" -p socket 2>&1)
grep -q "tried  $lib/libnccl-net-socket.so  (this tool's last resort; NCCL does not look here)" <<<"$out" ||
  fail "the tool's own lib/ is not tried last and marked" "$out"
grep -q "opened $lib/libnccl-net-socket.so" <<<"$out" || fail "the tool's own copy did not open" "$out"

# A path is the very file NCCL opens, even one in the tool's own lib/: not the tool's last resort (it was, as the
# tool's own lib/ prefix was all the mark went by), given with -p or in NCCL_NET_PLUGIN, as a copy elsewhere is not.
for out in "$(LD_LIBRARY_PATH='' NCCL_SOCKET_IFNAME=lo "$info" -p "$lib/libnccl-net-socket.so" 2>&1)" \
           "$(LD_LIBRARY_PATH='' NCCL_SOCKET_IFNAME=lo NCCL_NET_PLUGIN="$lib/libnccl-net-socket.so" "$info" 2>&1)"; do
  grep -qx "    tried  $lib/libnccl-net-socket.so" <<<"$out" || fail "a path in the tool's lib/ was marked" "$out"
  grep -q "last resort" <<<"$out" && fail "a path given was called the tool's last resort" "$out"
  grep -q "    CHOSEN through ncclNet_v12" <<<"$out" || fail "the path given was not chosen" "$out"
done

# -L first, even with the copy on LD_LIBRARY_PATH.
out=$(LD_LIBRARY_PATH="$work" NCCL_SOCKET_IFNAME=lo "$info" -p socket -L "$lib" 2>&1)
grep -q "opened $lib/libnccl-net-socket.so" <<<"$out" || fail "-L did not come first" "$out"

# -L's directory reached through LD_LIBRARY_PATH as the dynamic linker splits it: an empty field is the working
# directory (and ';' separates too), so the verdict must not say NCCL would not find it there.
out=$(cd "$lib" && LD_LIBRARY_PATH=":/nonexistent" "$info" -p minimal -L . 2>&1)
grep -q "only if that directory is on LD_LIBRARY_PATH" <<<"$out" &&
  fail "an empty LD_LIBRARY_PATH field (the working directory) was not taken as the -L directory" "$out"
out=$(LD_LIBRARY_PATH="/nonexistent;$lib" "$info" -p minimal -L "$lib" 2>&1)
grep -q "only if that directory is on LD_LIBRARY_PATH" <<<"$out" && fail "';' did not separate LD_LIBRARY_PATH" "$out"
out=$(cd "$lib" && LD_LIBRARY_PATH="/nonexistent" "$info" -p minimal -L . 2>&1)
grep -q "only if that directory is on LD_LIBRARY_PATH" <<<"$out" || fail "the verdict's note went away" "$out"

# nccl-net-topo takes the NICs of the copy NCCL would load.
out=$(LD_LIBRARY_PATH="$work" NCCL_SOCKET_IFNAME=lo "$topo" -p socket 2>&1)
grep -q "NICs from minimal (ncclNet_v12, $work/libnccl-net-socket.so)" <<<"$out" ||
  fail "nccl-net-topo did not take the copy on LD_LIBRARY_PATH" "$out"
echo "PASS: the copy on LD_LIBRARY_PATH is described; the tools' own lib/ comes last"
