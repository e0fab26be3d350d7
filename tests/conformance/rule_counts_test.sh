#!/usr/bin/env bash
# The rule counts the README and docs/conformance.md give are those nccl-net-check --list shows: each rule added
# left them behind ("43 rules for the net" while --list showed 46), and a vendor reading them misses the rules after.
# Every count of the kind in either file is checked, so a sentence that moves keeps being held to it.
set -euo pipefail
check="$1"
source="$2"  # the source tree: README.md and docs/conformance.md
fail() {
  echo "FAILED: $*"
  exit 1
}
names=$("$check" --list | awk '{print $1}')
net=$(grep -vc '^collnet-' <<<"$names")
coll=$(grep -c '^collnet-' <<<"$names")
[ "$net" -gt 0 ] && [ "$coll" -gt 0 ] || fail "--list shows $net net and $coll collNet rules"
# expect FILE PATTERN TEXT: every match of PATTERN (an extended regex) in FILE is TEXT, and there is one at least.
expect() {
  local file="$1" pattern="$2" text="$3" found
  found=$(grep -oE "$pattern" "$source/$file") || fail "$file no longer says '$text' (nothing matches '$pattern')"
  while IFS= read -r match; do
    [ "$match" = "$text" ] || fail "$file says '$match', but --list shows $net net rules and $coll collNet rules"
  done <<<"$found"
}
expect README.md '[0-9]+ rules for the net and [0-9]+ for a collNet' "$net rules for the net and $coll for a collNet"
expect docs/conformance.md 'of the [0-9]+ rules' "of the $net rules"
expect docs/conformance.md 'its [0-9]+ collnet-\* rules' "its $coll collnet-* rules"
echo "README.md and docs/conformance.md count $net net rules and $coll collNet rules, as --list shows"
