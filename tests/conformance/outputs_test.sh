#!/usr/bin/env bash
# The harness's machine outputs: --json parses with one entry per rule, --junit writes a JUnit testsuite, and both
# are complete however the run ends: the plugin not loading (missing, or crashing in init), or
# a SIGTERM in the middle of a rule (the finished rules kept, the interrupted one an error).
set -euo pipefail
# A sanitizer build would turn the crashing plugin's SIGSEGV into its own report: let the signal kill the child.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"
check="$1"
lib="$(dirname "$check")/../lib"  # the build tree's bin/ and lib/, as tests/conformance/CMakeLists.txt builds them
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
"$check" minimal --rules zero-byte,properties-sane --call-timeout 2 --json --junit "$work/junit.xml" > "$work/out.json"
python3 - "$work/out.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert [r["rule"] for r in report["rules"]] == ["properties-sane", "zero-byte"], report
assert all(r["status"] == "PASS" for r in report["rules"]), report
assert report["passed"] == 2 and report["failed"] == 0 and report["version"] == 12, report
PY
# A plugin that prints to stdout from init (nccl-like does) leaves --json one parseable document: its lines go to
# stderr.
"$check" nccl-like --rules zero-byte --call-timeout 2 --json > "$work/printing.json" 2> "$work/printing.err"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["passed"] == 1, r' "$work/printing.json" ||
  fail "--json with a plugin printing to stdout: $(head -c 300 "$work/printing.json")"
grep -q "nccl-like: init on stdout" "$work/printing.err" || fail "the plugin's own line went missing"
grep -q '<testsuite name="nccl-net-check minimal" tests="2" failures="0"' "$work/junit.xml"
grep -q '<testcase classname="minimal" name="zero-byte"' "$work/junit.xml"

# Reads a JUnit file and prints "name|kind|message" per testcase (kind "pass" for none), after checking the suite's counts against them.
cases() {
  python3 - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
suite = ET.parse(sys.argv[1]).getroot()
assert suite.tag == "testsuite", suite.tag
cases = suite.findall("testcase")
kinds = [[child.tag for child in case] for case in cases]
assert int(suite.get("tests")) == len(cases), (suite.attrib, kinds)
for attribute, kind in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
    assert int(suite.get(attribute)) == sum(k == [kind] for k in kinds), (suite.attrib, kinds)
for case in cases:
    verdict = case[0] if len(case) else None
    print("|".join([case.get("name"), verdict.tag if verdict is not None else "pass",
                    verdict.get("message") if verdict is not None else ""]))
PY
}

# A skipped rule: its evidence in --json, and in JUnit a "skipped" case the suite counts (a skip written as a pass,
# or left out of the count, would go unseen otherwise).
"$check" minimal --rules multi-recv-tags --call-timeout 2 --json --junit "$work/skip.xml" > "$work/skip.json"
python3 - "$work/skip.json" <<'PY' || fail "a skipped rule in --json: $(cat "$work/skip.json")"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["skipped"] == 1 and report["rules"][0]["status"] == "SKIP", report
assert report["rules"][0]["evidence"].startswith("maxRecvs is 1"), report
PY
out=$(cases "$work/skip.xml") || fail "a skipped rule: the JUnit file does not parse: $(cat "$work/skip.xml")"
[ "$out" = "multi-recv-tags|skipped|maxRecvs is 1: no grouped receives to check" ] || fail "a skipped rule in JUnit: $out"

# The plugin does not load: still a testsuite, one "load" case with the reason, as --json gives one object.
# not_loaded NAME PLUGIN PATTERN: nccl-net-check PLUGIN exits 2 and its JUnit file's load case matches PATTERN.
not_loaded() {
  local name="$1" plugin="$2" pattern="$3" status out
  set +e
  "$check" "$plugin" --call-timeout 2 --junit "$work/$name.xml" > /dev/null 2>&1
  status=$?
  set -e
  [ "$status" = 2 ] || fail "$name: exit status $status, expected 2"
  out=$(cases "$work/$name.xml") || fail "$name: the JUnit file does not parse: $(cat "$work/$name.xml")"
  echo "$out"
  grep -qE "$pattern" <<<"$out" || fail "$name: no load error matching '$pattern'"
}
not_loaded missing no-such-plugin "^load\|error\|no-such-plugin did not load: no-such-plugin: could not open"
not_loaded crash "$lib/misbehaving/libnccl-net-broken-crash-in-init.so" \
  "^load\|error\|.* did not load: .*crashed: SIGSEGV in init through ncclNet_v12"

# SIGTERM (a CI job's timeout) while a rule hangs (random-sizes-integrity waits 30 s for the lost completion), once
# the first rule has finished: the report keeps the finished rule and names the interrupted one. The finished rule is
# in the file as soon as its verdict is known.
# --json too: stdout is still one object, with the finished rule and the interrupted one.
"$check" broken-lost-completion --call-timeout 2 --rule-timeout 60 --rules zero-byte,random-sizes-integrity \
  --junit "$work/interrupted.xml" --json > "$work/interrupted.json" 2>/dev/null &
harness=$!
for _ in $(seq 300); do
  grep -q 'name="zero-byte"' "$work/interrupted.xml" 2>/dev/null && break
  sleep 0.1
done
if ! grep -q 'name="zero-byte"' "$work/interrupted.xml" 2>/dev/null; then
  kill -KILL $harness 2>/dev/null || true
  fail "SIGTERM: the finished rule zero-byte never reached the JUnit file: $(cat "$work/interrupted.xml" 2>&1)"
fi
# Signals the harness (pid $1) with $2 and requires it to end with status $3; $4 names the case.
interrupt() {
  kill "-$2" "$1" || fail "$4: the harness had ended before the signal"
  local status=0
  wait "$1" || status=$?
  [ "$status" = "$3" ] || fail "$4: exit status $status, expected $3"
}
interrupt $harness TERM 143 SIGTERM
out=$(cases "$work/interrupted.xml") || fail "SIGTERM: the JUnit file does not parse: $(cat "$work/interrupted.xml")"
echo "$out"
[ "$out" = $'zero-byte|pass|\nrandom-sizes-integrity|error|interrupted by signal 15' ] ||
  fail "SIGTERM: not the finished rule and the interrupted one"
python3 - "$work/interrupted.json" <<'PY' || fail "SIGTERM: --json's object: $(cat "$work/interrupted.json")"
import json, sys
report = json.load(open(sys.argv[1]))
assert [r["rule"] for r in report["rules"]] == ["zero-byte"] and report["passed"] == 1, report
assert report["interrupted"] == {"signal": 15, "rule": "random-sizes-integrity"}, report
PY
# Interrupted while the plugin loads (its init hangs): the object says it did not load, and no rule ran.
"$check" "$lib/misbehaving/libnccl-net-broken-hang-in-init.so" --call-timeout 30 --json > "$work/loading.json" \
  2>/dev/null &
harness=$!
# The signal goes once the harness has forked its loading probe (its handlers are set before that): a fixed second
# raced a harness slow to start (a sanitizer build on a loaded machine), which SIGINT then ended with no report.
for _ in $(seq 300); do
  pgrep -P $harness > /dev/null && break
  sleep 0.1
done
pgrep -P $harness > /dev/null || fail "SIGINT while loading: the harness forked no loading probe in 30 s"
interrupt $harness INT 130 "SIGINT while loading"
python3 - "$work/loading.json" <<'PY' || fail "SIGINT while loading: --json's object: $(cat "$work/loading.json")"
import json, sys
report = json.load(open(sys.argv[1]))
assert report["loaded"] is False and report["rules"] == [], report
assert report["interrupted"] == {"signal": 2, "rule": None}, report
PY
leftovers=$(find "$work" -name '*.tmp.*')
[ -z "$leftovers" ] || fail "a temporary report was left behind: $leftovers"
echo "json and junit outputs ok"
