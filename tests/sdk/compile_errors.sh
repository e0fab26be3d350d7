#!/usr/bin/env bash
# compile_errors.sh CXX INCLUDE_DIR CASES_DIR: compiles each plugin class in CASES_DIR against the SDK. A case's first
# line says what must happen: "// expect: success", or "// expect: TEXT" for a compile error whose message contains
# TEXT, as one error (a vendor's mistake is named once, not buried under template instantiation errors).
set -uo pipefail
cxx="$1"; include="$2"; cases="$3"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
for source in "$cases"/*.cc; do
  name=$(basename "$source" .cc)
  expect=$(head -1 "$source" | sed -n 's,^// expect: ,,p')
  if [ -z "$expect" ]; then
    echo "FAIL $name: no '// expect:' line"; failures=$((failures + 1)); continue
  fi
  "$cxx" -std=c++17 -fsyntax-only -fvisibility=hidden -Wall -Wextra -I"$include" "$source" > "$work/$name.log" 2>&1
  status=$?
  errors=$(grep -c ': error: ' "$work/$name.log")
  if [ "$expect" = success ]; then
    if [ $status -ne 0 ] || [ -s "$work/$name.log" ]; then
      echo "FAIL $name: expected a clean compile, got:"; head -20 "$work/$name.log"; failures=$((failures + 1))
    else
      echo "PASS $name: compiles cleanly"
    fi
  elif [ $status -eq 0 ]; then
    echo "FAIL $name: compiled, expected an error containing: $expect"; failures=$((failures + 1))
  elif ! grep -qF -- "$expect" "$work/$name.log"; then
    echo "FAIL $name: the error does not say: $expect"; head -20 "$work/$name.log"; failures=$((failures + 1))
  elif [ "$errors" -ne 1 ]; then
    echo "FAIL $name: $errors lines mention an error, expected 1:"; grep ': error: ' "$work/$name.log" | head -20
    failures=$((failures + 1))
  else
    echo "PASS $name: $(grep ': error: ' "$work/$name.log" | sed 's/.*: error: //' | cut -c1-200)"
  fi
done
exit $((failures > 0))
