# Sourced by the tools' test scripts (nccl-net-perf's in tests/conformance, nccl-net-topo's in tests/topology):
# counting failures, running a tool with its outputs kept apart, and checking its --json object.
# shellcheck shell=bash
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
# Runs the command with stdout in $out and stderr in $err, its status in $status.
run() {
  local errFile
  errFile=$(mktemp)
  out=$(timeout 60 "$@" 2>"$errFile")
  status=$?
  err=$(cat "$errFile")
  rm -f "$errFile"
  echo "\$ $* -> exit status $status"
  echo "$out"
  echo "$err"
}
# $1: a Python expression over d (the JSON object on stdout) that must hold.
json_holds() {
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert eval(sys.argv[2]), d
' "$out" "$1" 2>&1
}
