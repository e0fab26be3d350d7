#!/usr/bin/env bash
# Asserts a plugin's dynamic symbol table defines exactly ncclNetPlugin_v6..v12 (and ncclCollNetPlugin_v6..v12 with
# --collnet): hidden visibility and the version script keep everything else out.
set -euo pipefail
plugin="$1"
defined=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort)
expected=$(printf 'ncclNetPlugin_v%s\n' 6 7 8 9 10 11 12)
if [ "${2:-}" = "--collnet" ]; then
  expected="$expected"$'\n'"$(printf 'ncclCollNetPlugin_v%s\n' 6 7 8 9 10 11 12)"
fi
expected=$(echo "$expected" | sort)
if [ "$defined" != "$expected" ]; then
  echo "unexpected dynamic symbols in $plugin:"
  diff <(echo "$expected") <(echo "$defined") || true
  exit 1
fi
echo "exports exactly: $(echo $defined)"
