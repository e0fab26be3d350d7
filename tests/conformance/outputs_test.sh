#!/usr/bin/env bash
# The harness's machine outputs: --json parses with one entry per rule, --junit writes a JUnit testsuite.
set -euo pipefail
check="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$check" minimal --rules zero-byte,properties-sane --call-timeout 2 --json --junit "$work/junit.xml" > "$work/out.json"
python3 - "$work/out.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert [r["rule"] for r in report["rules"]] == ["properties-sane", "zero-byte"], report
assert all(r["status"] == "PASS" for r in report["rules"]), report
assert report["passed"] == 2 and report["failed"] == 0 and report["version"] == 12, report
PY
grep -q '<testsuite name="nccl-net-check minimal" tests="2" failures="0"' "$work/junit.xml"
grep -q '<testcase classname="minimal" name="zero-byte"' "$work/junit.xml"
echo "json and junit outputs ok"
