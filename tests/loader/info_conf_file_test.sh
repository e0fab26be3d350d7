#!/usr/bin/env bash
# nccl-net-info reads NCCL's configuration files as NCCL does: $NCCL_CONF_FILE (else ~/.nccl.conf), then
# /etc/nccl.conf, KEY=VALUE lines, '#' lines skipped, never over a variable the environment sets. A site that puts
# NCCL_NET_PLUGIN in /etc/nccl.conf had the tool report the default libnccl-net.so while NCCL tried its plugin.
# Usage: info_conf_file_test.sh NCCL_NET_INFO
set -euo pipefail
info="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
printf '# site defaults\nNCCL_NET_PLUGIN=minimal\nNCCL_NET=shm0-is-not-a-net-name\n' > "$work/nccl.conf"

out=$(env -u NCCL_NET_PLUGIN -u NCCL_NET NCCL_CONF_FILE="$work/nccl.conf" "$info" 2>&1 || true)
grep -q "^NCCL_NET_PLUGIN: minimal (from $work/nccl.conf)" <<<"$out" || fail "the file's NCCL_NET_PLUGIN: $out"
grep -q "^NCCL_NET: shm0-is-not-a-net-name .*(from $work/nccl.conf)" <<<"$out" || fail "the file's NCCL_NET: $out"
grep -q "tried  .*libnccl-net-minimal.so" <<<"$out" || fail "the file's plugin was not tried: $out"

# The environment wins over the file.
out=$(env -u NCCL_NET NCCL_CONF_FILE="$work/nccl.conf" NCCL_NET_PLUGIN=socket "$info" 2>&1 || true)
grep -q "^NCCL_NET_PLUGIN: socket$" <<<"$out" || fail "the environment's NCCL_NET_PLUGIN: $out"
# -p, even -p '' (set but empty), replaces the file's value: no "(from FILE)" after it.
out=$(env -u NCCL_NET_PLUGIN -u NCCL_NET NCCL_CONF_FILE="$work/nccl.conf" "$info" -p '' 2>&1 || true)
grep -q "^NCCL_NET_PLUGIN: (set but empty.*)$" <<<"$out" || fail "-p '' was said to come from the file: $out"
# A comment longer than any buffer stays a comment: one was cut after 4095 bytes, and its tail, "NCCL_NET_PLUGIN=...",
# set the plugin from inside the comment.
{ printf '#'; head -c 4094 /dev/zero | tr '\0' x; printf 'NCCL_NET_PLUGIN=from-inside-a-comment\n'; } > "$work/long.conf"
out=$(env -u NCCL_NET_PLUGIN -u NCCL_NET NCCL_CONF_FILE="$work/long.conf" "$info" 2>&1 || true)
if grep -q "from-inside-a-comment" <<<"$out"; then fail "a long comment's tail was read as a line: $out"; fi
grep -q "^NCCL_NET_PLUGIN: (unset: libnccl-net.so)$" <<<"$out" || fail "a file of one long comment: $out"
# Windows line endings: NCCL keeps the CR in the value (and so finds no library of that name); the tool says so.
printf 'NCCL_NET_PLUGIN=minimal\r\n' > "$work/crlf.conf"
out=$(env -u NCCL_NET_PLUGIN -u NCCL_NET NCCL_CONF_FILE="$work/crlf.conf" "$info" 2>&1 || true)
grep -q "^NCCL_NET_PLUGIN: minimal\\\\x0d (from $work/crlf.conf) -- it ends in a carriage return" <<<"$out" ||
  fail "a CRLF file's value: $out"
if grep -q "tried  .*libnccl-net-minimal.so" <<<"$out"; then fail "a CRLF file's value was taken without its CR: $out"; fi
# The candidate's lines (its name, each path tried, the reason) write the CR as the header does, never raw.
grep -q "^    tried  libnccl-net-minimal\\\\x0d.so$" <<<"$out" || fail "a CRLF file's value: the path tried is not escaped: $out"
if grep -q $'\r' <<<"$out"; then fail "a raw carriage return reached the output: $out"; fi
# A terminal escape in NCCL_NET_PLUGIN itself: escaped on every line.
out=$(env -u NCCL_NET NCCL_NET_PLUGIN=$'ab\x1b[31mc' "$info" 2>&1 || true)
if grep -q $'\x1b' <<<"$out"; then fail "an escape character in NCCL_NET_PLUGIN reached the output raw: $out"; fi
grep -q '^  ab\\x1b\[31mc$' <<<"$out" || fail "the candidate's name is not shown escaped: $out"
echo "configuration file: ok"
