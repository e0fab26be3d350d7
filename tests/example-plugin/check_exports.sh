#!/usr/bin/env bash
# Asserts a plugin's dynamic symbol table defines exactly ncclNetPlugin_v6..v12 (hidden visibility for the rest).
set -euo pipefail
plugin="$1"
defined=$(nm -D --defined-only "$plugin" | awk '{print $3}' | sort)
expected=$(printf 'ncclNetPlugin_v%s\n' 6 7 8 9 10 11 12 | sort)
if [ "$defined" != "$expected" ]; then
  echo "unexpected dynamic symbols in $plugin:"
  diff <(echo "$expected") <(echo "$defined") || true
  exit 1
fi
echo "exports exactly: $(echo $defined)"
