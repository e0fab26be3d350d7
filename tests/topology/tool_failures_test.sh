#!/usr/bin/env bash
# nccl-net-topo's refusals and failures: --bench refuses the options whose output it would drop (--json printed its
# text line and exited 0, --dump-graph wrote nothing without a word), shows a file name through terminalSafe and prints
# the mean time of its runs; with --json a failure is one JSON object with the error on stdout (stdout was empty); a
# directory given as --graph-file is said to be no graph file, and a path that came from NCCL_TOPO_FILE is said to
# come from there.
set -uo pipefail
# shellcheck source=tests/support/tool_test_lib.sh
source "$(dirname "$0")/../support/tool_test_lib.sh"  # fail, run
topo="$1"
data="$2"  # tests/data/topologies
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
file="$data/azure-ncv4.xml"

for option in --json --dot --nccl-log "--graph-file $data/azure-ncv4-graph.xml" "--dump-graph bench_graph.xml"; do
  # shellcheck disable=SC2086  # an option and its value, split on purpose
  run "$topo" --ignore-env --topo-file "$file" --bench 1 $option
  [ "$status" = 2 ] || fail "--bench $option: exit status $status, expected 2"
  grep -q -- "${option%% *} excludes --bench" <<<"$err" || fail "--bench $option: no refusal naming both options"
done
[ ! -e bench_graph.xml ] || fail "--bench --dump-graph wrote a file"
# The variables stand in for --dump-graph and --graph-file: under --bench each is said to be left alone.
run env NCCL_GRAPH_DUMP_FILE=bench_env_graph.xml NCCL_GRAPH_FILE="$data/azure-ncv4-graph.xml" \
  "$topo" --topo-file "$file" --bench 1
[ "$status" = 0 ] || fail "--bench with NCCL_GRAPH_DUMP_FILE: exit status $status, expected 0"
[ ! -e bench_env_graph.xml ] || fail "--bench wrote NCCL_GRAPH_DUMP_FILE"
grep -q "note: NCCL_GRAPH_DUMP_FILE=bench_env_graph.xml is not written under --bench" <<<"$err" ||
  fail "--bench: NCCL_GRAPH_DUMP_FILE left alone without a note"
grep -q "note: NCCL_GRAPH_FILE=.* is not shown in --bench output" <<<"$err" ||
  fail "--bench: NCCL_GRAPH_FILE left alone without a note"

# A file name holding an escape sequence: shown as \x1b, not sent to the terminal.
escaped="$work/$(printf 'esc\033[31m').xml"
cp "$file" "$escaped"
run "$topo" --ignore-env --topo-file "$escaped" --bench 1
[ "$status" = 0 ] || fail "--bench of a file with an escape in its name: exit status $status"
grep -qF 'esc\x1b[31m.xml: 1 run(s)' <<<"$out" || fail "--bench: the file name is not shown with \\x1b"
if grep -q $'\033' <<<"$out"; then fail "--bench: an escape byte of the file name reached stdout"; fi

# --bench N prints the mean of its N runs: N times it is at most the time the whole process took (the total, printed
# as the mean, is N times more).
python3 - "$topo" "$file" <<'EOF' || fail "--bench 20: the time printed per run is not the mean (above)"
import re, subprocess, sys, time
start = time.monotonic()
out = subprocess.run([sys.argv[1], "--ignore-env", "--topo-file", sys.argv[2], "--bench", "20"], capture_output=True,
                     text=True, check=True, timeout=60).stdout
wall_ms = (time.monotonic() - start) * 1000
per_run = float(re.search(r": 20 run\(s\), ([0-9.]+) ms per run ", out).group(1))
assert 20 * per_run <= wall_ms, f"{out.strip()}: 20 x {per_run} ms > the process's {wall_ms:.1f} ms"
EOF

# --json failures: one JSON object on stdout, the error also on stderr.
json_error_is() {
  python3 -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["error"].startswith(sys.argv[2]) and d["exitStatus"] == 1, d
' "$out" "$1" 2>&1
}
run "$topo" --ignore-env --topo-file /nonexistent/topo.xml --json
[ "$status" = 1 ] || fail "--json, missing file: exit status $status, expected 1"
json_error_is "/nonexistent/topo.xml: cannot open" || fail "--json, missing file: no JSON object with the error"
grep -q "^nccl-net-topo: /nonexistent/topo.xml: cannot open" <<<"$err" || fail "--json, missing file: nothing on stderr"
run "$topo" --ignore-env --plugin no-such-plugin -L "$work" --json
[ "$status" = 1 ] || fail "--json, no plugin: exit status $status, expected 1"
json_error_is "--plugin no-such-plugin: no net plugin loaded" || fail "--json, no plugin: no JSON object with the error"

# Wording: a directory as --graph-file, a missing NCCL_TOPO_FILE.
run "$topo" --ignore-env --topo-file "$file" --graph-file "$work"
[ "$status" = 1 ] || fail "--graph-file DIR: exit status $status, expected 1"
grep -qx "nccl-net-topo: $work: is a directory, not a graph file" <<<"$err" || fail "--graph-file DIR: wrong words"
run env NCCL_TOPO_FILE=/nonexistent/topo.xml "$topo" --no-search
[ "$status" = 1 ] || fail "NCCL_TOPO_FILE missing: exit status $status, expected 1"
grep -qF "nccl-net-topo: /nonexistent/topo.xml: cannot open: No such file or directory (the path is NCCL_TOPO_FILE's; --ignore-env ignores it)" <<<"$err" ||
  fail "NCCL_TOPO_FILE missing: the error does not say the path came from NCCL_TOPO_FILE"

[ "$failures" -eq 0 ] && echo "every refusal and failure as documented"
exit $((failures > 0))
