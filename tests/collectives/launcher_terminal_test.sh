#!/usr/bin/env bash
# nccl-net-run and its ranks' stdin and terminal: a pipe goes to rank 0 only (as mpirun forwards stdin), a terminal to
# nobody (a rank reading it from outside the terminal's foreground group was stopped by SIGTTIN, and the launcher,
# waiting without a timeout, waited for ever), and a rank stopped for writing to the terminal under `stty tostop` is
# a failure. Usage: launcher_terminal_test.sh BIN_DIR
set -euo pipefail
run="$1/nccl-net-run"
fail() { echo "FAILED: $*"; exit 1; }

out=$(echo hello | "$run" -n 2 --timeout 20 sh -c 'read -r x || x="(eof)"; echo "rank $NNS_RANK read $x"' 2>&1)
grep -q "rank 0 read hello" <<<"$out" || fail "rank 0 did not get the pipe: $out"
grep -q "rank 1 read (eof)" <<<"$out" || fail "rank 1 did not get an empty stdin: $out"

# `script` gives the launcher a terminal. The timeout outside is the test's own guard against the old hang.
out=$(timeout 30 script -qec "$run -n 2 sh -c 'read -r x || x=\"(eof)\"; echo \"rank \$NNS_RANK read \$x\"'" /dev/null \
      2>&1 < /dev/null) || fail "ranks reading a terminal: exit $? ($out)"
grep -q "rank 0 read (eof)" <<<"$out" || fail "rank 0 read the terminal: $out"

status=0
out=$(timeout 30 script -qec "stty tostop; $run -n 2 sh -c 'echo written'; echo \"launcher exit \$?\"" /dev/null \
      2>&1 < /dev/null) || status=$?
[ "$status" -eq 0 ] || fail "the launcher hung or failed under tostop (status $status): $out"
grep -q "was stopped by SIGTTOU" <<<"$out" || fail "no word of the stopped rank: $out"
grep -q "launcher exit 150" <<<"$out" || fail "the exit status is not 128+SIGTTOU: $out"
echo "launcher terminal handling: ok"
