#!/usr/bin/env bash
# launcher_signals_test.sh BIN_DIR: nccl-net-run never leaves a rank behind: SIGTERM, SIGINT, SIGHUP and SIGQUIT sent
# to it are passed on to every rank and it ends by that signal (128+signal); a rank that ignores SIGTERM (after a
# failure, a signal or --timeout) is killed --kill-after seconds later instead of holding the launcher until it ends
# on its own; a second signal kills at once; what a rank started and left running goes too; and a launcher killed
# outright takes its ranks with it, and what they started. A crash is blamed on the rank that crashed; SIGUSR1 is
# passed on; Ctrl-Z stops the ranks too.
set -u
bin=$(cd "$1" && pwd)
run="$bin/nccl-net-run"
dir=$(mktemp -d)
trap 'kill -KILL $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null; rm -rf "$dir"' EXIT
set -m  # background jobs keep SIGINT (without job control bash starts them with it ignored, and so would the ranks)
failures=0
fail() {
  echo "FAILED: $*"
  failures=$((failures + 1))
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# script CASE [SIGNALS]: what each rank runs (sh -c): writes its pid to DIR/CASE.RANK.pid, then sleeps 60 s (the
# same process, so that pid is what must die) with SIGNALS ignored.
script() { echo "${2:+trap '' $2; }echo \$\$ > $dir/$1.\$NNS_RANK.pid; exec sleep 60"; }
# started CASE N: waits (up to 10 s) until N ranks of CASE have written their pids.
started() {
  for _ in $(seq 100); do
    [ "$(ls "$dir"/"$1".*.pid 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# none_left CASE: no rank of CASE is still running (a zombie is dead: once the launcher is gone, reaping an orphan is
# up to PID 1, which in some containers never does).
# running PID: the process exists and is not a zombie. One ps call: with `kill -0` first, a zombie reaped between the
# two read as an empty state, "not Z", and so as running (seen under load).
running() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null)
  [ -n "$state" ] && [[ "$state" != Z* ]]
}
# any_left CASE: some rank of CASE is running.
any_left() {
  local pid
  for pid in $(cat "$dir"/"$1".*.pid 2>/dev/null); do running "$pid" && return 0; done
  return 1
}
none_left() {
  local pid
  for pid in $(cat "$dir"/"$1".*.pid 2>/dev/null); do
    if running "$pid"; then
      fail "$1: rank pid $pid is still running after the launcher ended"
      kill -KILL "$pid" 2>/dev/null
    fi
  done
}
# signalled CASE SIGNAL LAUNCHER_ARGS...: runs the launcher in the background (stderr to DIR/CASE.err), waits until
# CASE's 2 pid files are written, sends it SIGNAL and waits for it; sets `status` and `elapsed` (ms from the signal).
signalled() {
  local name=$1 sig=$2 launcher t0
  shift 2
  $run "$@" 2>"$dir/$name.err" &
  launcher=$!
  started "$name" 2 || fail "$name: the ranks did not start"
  t0=$(now_ms)
  kill -"$sig" $launcher
  wait $launcher
  status=$?
  elapsed=$(($(now_ms) - t0))
}
# expect CASE STATUS WANT SECONDS MIN_MS MAX_MS: the launcher's status and how long it took.
expect() {
  [ "$2" -eq "$3" ] || fail "$1: launcher exit status $2, expected $3"
  [ "$4" -ge "$5" ] && [ "$4" -le "$6" ] || fail "$1: took $4 ms, expected $5..$6"
}

# SIGTERM to the launcher: passed on, the ranks end, 143.
signalled term TERM -n 2 sh -c "$(script term)"
expect term $status 143 $elapsed 0 10000
grep -q "got SIGTERM" "$dir/term.err" || fail "term: no message: $(cat "$dir/term.err")"
none_left term

# SIGTERM with ranks that ignore it: SIGKILL --kill-after 1 s later.
signalled ignored TERM -n 2 --kill-after 1 sh -c "$(script ignored TERM)"
expect ignored $status 143 $elapsed 900 10000
grep -q "2 rank(s) still running 1 s after" "$dir/ignored.err" || fail "ignored: no message: $(cat "$dir/ignored.err")"
none_left ignored

# A failed rank: the other ignores SIGTERM, is killed 1 s later, and the launcher exits with the failed rank's status.
t0=$(now_ms)
$run -n 2 --kill-after 1 sh -c "if [ \$NNS_RANK = 0 ]; then sleep 0.5; exit 5; fi; $(script failed TERM)" \
  2>"$dir/failed.err"
expect failed $? 5 $(($(now_ms) - t0)) 1400 10000
grep -q "rank 0 failed (status 5)" "$dir/failed.err" || fail "failed: no message: $(cat "$dir/failed.err")"
none_left failed
# A rank ended by a signal: named as a shell names it, with the status 128+N.
$run -n 2 sh -c "if [ \$NNS_RANK = 1 ]; then kill -SEGV \$\$; fi; $(script segv)" 2>"$dir/segv.err"
status=$?
[ $status -eq 139 ] || fail "segv: launcher exit status $status, expected 139"
grep -q "rank 1 was killed by SIGSEGV (status 139)" "$dir/segv.err" || fail "segv: no message: $(cat "$dir/segv.err")"
none_left segv

# SIGINT twice (Ctrl-C twice) with ranks that ignore SIGINT and SIGTERM: the second kills at once, not 10 s later.
$run -n 2 --kill-after 10 sh -c "$(script twice "INT TERM")" 2>"$dir/twice.err" &
launcher=$!
started twice 2 || fail "twice: the ranks did not start"
t0=$(now_ms)
kill -INT $launcher
for _ in $(seq 100); do grep -q "got SIGINT" "$dir/twice.err" && break; sleep 0.1; done
kill -INT $launcher
wait $launcher
expect twice $? 130 $(($(now_ms) - t0)) 0 8000
none_left twice

# What a rank started and left in its process group goes too. SIGTERM, with the rank's shell ending at once and its
# command ignoring SIGTERM: killed 1 s later (it was left running: the launcher signalled only ranks not yet reaped).
leaver() { echo "sh -c \"trap '' TERM; echo \\\$\\\$ > $dir/$1.\$NNS_RANK.pid; exec sleep 60\" & wait"; }
signalled left TERM -n 2 --kill-after 1 sh -c "$(leaver left)"
expect left $status 143 $elapsed 900 10000
grep -q "2 process group(s) the ranks left still running 1 s after" "$dir/left.err" ||
  fail "left: no message: $(cat "$dir/left.err")"
none_left left
# Ranks that end well but leave a command running in the background: the job ends with its ranks, status 0.
t0=$(now_ms)
$run -n 2 sh -c "sh -c \"echo \\\$\\\$ > $dir/behind.\$NNS_RANK.pid; exec sleep 60\" &
  while [ ! -s $dir/behind.\$NNS_RANK.pid ]; do sleep 0.05; done" 2>"$dir/behind.err"
expect behind $? 0 $(($(now_ms) - t0)) 0 10000
grep -q "stopping 2 process group(s) they left running" "$dir/behind.err" ||
  fail "behind: no message: $(cat "$dir/behind.err")"
[ "$(ls "$dir"/behind.*.pid 2>/dev/null | wc -l)" = 2 ] || fail "behind: the commands did not start"
none_left behind

# SIGHUP: 129.
signalled hup HUP -n 2 sh -c "$(script hup)"
expect hup $status 129 $elapsed 0 10000
none_left hup

# --timeout with ranks that ignore SIGTERM: killed, 124, said once.
t0=$(now_ms)
$run -n 2 --timeout 1 sh -c "$(script timeout TERM)" 2>"$dir/timeout.err"
expect timeout $? 124 $(($(now_ms) - t0)) 900 10000
[ "$(grep -c "timeout after" "$dir/timeout.err")" = 1 ] || fail "timeout: said other than once: $(cat "$dir/timeout.err")"
none_left timeout

# The launcher killed outright (SIGKILL, nothing it can pass on): its ranks die with it.
$run -n 2 sh -c "$(script orphaned)" 2>/dev/null &
launcher=$!
started orphaned 2 || fail "orphaned: the ranks did not start"
kill -KILL $launcher
wait $launcher 2>/dev/null
for _ in $(seq 50); do any_left orphaned || break; sleep 0.1; done  # the kernel ends them after the launcher's death
none_left orphaned
# ... and what the ranks started too: here each rank is a shell that runs the sleeping command without exec (a
# wrapper script's way). The rank dies with the launcher; the command it started, before, ran on under PID 1.
$run -n 2 sh -c "sh -c \"echo \\\$\\\$ > $dir/grandchild.\$NNS_RANK.pid; exec sleep 60\"; :" 2>"$dir/grandchild.err" &
launcher=$!
started grandchild 2 || fail "grandchild: the commands did not start"
kill -KILL $launcher
wait $launcher 2>/dev/null
for _ in $(seq 50); do
  alive=0
  for pid in $(cat "$dir"/grandchild.*.pid 2>/dev/null); do
    running "$pid" && alive=1
  done
  [ $alive = 0 ] && break
  sleep 0.1
done
none_left grandchild
grep -q "killing 2 rank process group(s)" "$dir/grandchild.err" ||
  fail "grandchild: no message: $(cat "$dir/grandchild.err")"

# Under GNU timeout, which sends SIGTERM to the launcher and then to its own process group (the launcher again):
# one request, so the ranks get their grace period and clean up. Taken as a second signal, they were killed at once.
if command -v timeout >/dev/null; then
  t0=$(now_ms)
  timeout 2 $run -n 2 --kill-after 10 sh -c "trap 'sleep 0.5; echo cleaned > $dir/gnutimeout.\$NNS_RANK.done; exit 0' \
    TERM; echo \$\$ > $dir/gnutimeout.\$NNS_RANK.pid; sleep 60 & wait" 2>"$dir/gnutimeout.err"
  status=$?
  [ $status -eq 124 ] || fail "gnutimeout: exit status $status, expected timeout's 124"
  [ "$(ls "$dir"/gnutimeout.*.done 2>/dev/null | wc -l)" = 2 ] ||
    fail "gnutimeout: the ranks did not get to clean up: $(cat "$dir/gnutimeout.err")"
  grep -q "while stopping" "$dir/gnutimeout.err" && fail "gnutimeout: timeout's second SIGTERM killed the ranks"
  none_left gnutimeout
fi

# The launcher's whole process group killed (kill -KILL -- -PGID: a batch system's or a shell's way of ending a job):
# the keeper, in a group of its own, survives it and kills what the ranks started, here a wrapper script's background
# command and its last one. It was in the launcher's group and died with it: the ranks went (PR_SET_PDEATHSIG), what
# they started ran on. Each job of this script is a process group of its own (set -m), led by the launcher.
$run -n 2 sh -c "sleep 60 & echo \$! > $dir/pgroup.\$NNS_RANK.background.pid; echo \$\$ > $dir/pgroup.\$NNS_RANK.pid
  sleep 61" 2>"$dir/pgroup.err" &
launcher=$!
started pgroup 4 || fail "pgroup: the ranks did not start"
group=$(ps -o pgid= -p $launcher | tr -d ' ')
if [ "$group" = "$launcher" ] && [ "$group" != "$(ps -o pgid= -p $$ | tr -d ' ')" ]; then
  kill -KILL -- -"$group"
else
  fail "pgroup: the launcher is not a process group of its own (group $group); killing it alone"
  kill -KILL $launcher
fi
wait $launcher 2>/dev/null
for _ in $(seq 50); do
  alive=0
  for pid in $(cat "$dir"/pgroup.*.pid 2>/dev/null); do
    running "$pid" && alive=1
  done
  [ $alive = 0 ] && break
  sleep 0.1
done
none_left pgroup
grep -q "killing 2 rank process group(s)" "$dir/pgroup.err" || fail "pgroup: no message: $(cat "$dir/pgroup.err")"

# A crash blamed on the rank that crashed: rank 3 dies by SIGSEGV and the others exit 1 as it goes (as ranks whose
# connections to it broke do), here a little before it. Reaped first (in one pass, lowest rank first, or earlier), a
# rank that merely saw the crash was blamed ("rank 0 failed (status 1)") and the SIGSEGV went unsaid.
for round in 1 2 3; do
  $run -n 4 sh -c "m=$dir/crash.\$NNS_JOB_ID
    if [ \$NNS_RANK = 3 ]; then sleep 0.3; : > \$m; sleep 0.02; kill -SEGV \$\$; fi
    while [ ! -e \$m ]; do sleep 0.001; done; exit 1" 2>"$dir/crash.err"
  status=$?
  [ $status -eq 139 ] || fail "crash $round: launcher exit status $status, expected 139: $(cat "$dir/crash.err")"
  grep -q "rank 3 was killed by SIGSEGV" "$dir/crash.err" || fail "crash $round: not blamed: $(cat "$dir/crash.err")"
done

# SIGUSR1 and SIGUSR2 (Slurm's --signal=USR1@60, a checkpoint request) are passed on and stop nothing: the ranks
# take them and end well, status 0. The launcher died of them and SIGKILLed the ranks through its keeper.
$run -n 2 sh -c "trap 'echo 1 > $dir/usr.\$NNS_RANK.got; exit 0' USR1; echo \$\$ > $dir/usr.\$NNS_RANK.pid
  sleep 60 & wait" 2>"$dir/usr.err" &
launcher=$!
started usr 2 || fail "usr: the ranks did not start"
kill -USR1 $launcher
wait $launcher
status=$?
[ $status -eq 0 ] || fail "usr: launcher exit status $status, expected 0: $(cat "$dir/usr.err")"
[ "$(ls "$dir"/usr.*.got 2>/dev/null | wc -l)" = 2 ] || fail "usr: SIGUSR1 did not reach both ranks"
none_left usr

# SIGQUIT (Ctrl-\) stops the job like SIGTERM, and the launcher ends by it too (status 131), leaving no core file.
cd "$dir" || exit 1  # where a core file would be written
signalled quit QUIT -n 2 sh -c "$(script quit)"
cd - >/dev/null || exit 1
expect quit $status 131 $elapsed 0 10000
[ -n "$(ls "$dir"/core* 2>/dev/null)" ] && fail "quit: a core file was left"
none_left quit

# Ctrl-Z (SIGTSTP): the ranks, process groups of their own, stop with the launcher (they ran on while it was
# stopped), and go on when it is continued.
$run -n 2 sh -c "$(script tstp)" 2>"$dir/tstp.err" &
launcher=$!
started tstp 2 || fail "tstp: the ranks did not start"
kill -TSTP $launcher
stopped() { [[ "$(ps -o stat= -p "$1")" == T* ]]; }
# Each process stops (or goes on) once it is scheduled after the signal: polled, 5 s at most each.
for pid in $launcher $(cat "$dir"/tstp.*.pid); do
  for _ in $(seq 50); do stopped "$pid" && break; sleep 0.1; done
  stopped "$pid" || fail "tstp: pid $pid is not stopped"
done
kill -CONT $launcher
for pid in $launcher $(cat "$dir"/tstp.*.pid); do
  for _ in $(seq 50); do stopped "$pid" || break; sleep 0.1; done
  stopped "$pid" && fail "tstp: pid $pid is still stopped"
done
kill -TERM $launcher
wait $launcher
none_left tstp

# The launcher ends by the SIGINT it passed on (not by exit 130), so a shell loop around it stops at Ctrl-C, as it
# does for any command: with exit 130 the loop went on to its next iteration.
bash -c "for i in 1 2 3; do echo \$i >> $dir/loop.iterations; $run -n 2 sleep 5; done" 2>"$dir/loop.err" &
loop=$!
for _ in $(seq 50); do [ -s "$dir/loop.iterations" ] && break; sleep 0.1; done
sleep 0.5
kill -INT -- -$loop  # the loop's process group, as a terminal's Ctrl-C
wait $loop
status=$?
[ $status -eq 130 ] || fail "loop: status $status, expected the loop to end by SIGINT (130)"
[ "$(wc -l < "$dir/loop.iterations")" = 1 ] || fail "loop: $(wc -l < "$dir/loop.iterations") iterations ran"

# Started with stderr closed (2>&-, a daemon's closed stdio): the root listener took descriptor 2, which rank 0
# could not be handed, and every job failed. A real bootstrap (nccl-net-bench over the socket plugin) must run.
$run -n 2 "$bin/nccl-net-bench" allreduce -b 8 -e 8 -n 1 -w 0 >"$dir/closed.out" 2>&-
status=$?
[ $status -eq 0 ] || fail "closed stderr: status $status: $(cat "$dir/closed.out")"
# An empty command is refused as one, not run as the bin folder ("cannot run : Permission denied", 126).
$run -n 2 "" 2>"$dir/empty.err"
[ $? -eq 2 ] && grep -q "the command is empty" "$dir/empty.err" || fail "empty: $(cat "$dir/empty.err")"

# A keeper that cannot run (stopped) does not hold the launcher's exit: it is waited for 2 s, then killed, named.
start=$(date +%s)
timeout 30 $run -n 1 sh -c 'kill -STOP $(pgrep -P $PPID -x nccl-net-keeper)' 2>"$dir/keeper.err"
status=$?
[ $status -eq 0 ] && [ $(($(date +%s) - start)) -lt 15 ] && grep -q "the keeper (pid [0-9]*) did not end within 2 s" "$dir/keeper.err" ||
  fail "stopped keeper: status $status after $(($(date +%s) - start)) s: $(cat "$dir/keeper.err")"

[ "$failures" -eq 0 ] && echo "PASS: nccl-net-run stops every rank on SIGTERM, SIGINT, SIGHUP, SIGQUIT, a failure and --timeout, passes SIGUSR1 on and stops the ranks with Ctrl-Z"
exit $((failures > 0))
