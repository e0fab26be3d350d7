#!/bin/bash
# launcher_binding_test.sh BIN_DIR: nccl-net-run binds each rank to its own share of the CPUs it may use when there
# are enough of them (disjoint, together all of them), leaves every rank unbound when the ranks outnumber the CPUs
# or with --bind-to none, reports what it did with --report-bindings, and refuses an unknown policy.
set -u
run="$1/nccl-net-run"
fail() { echo "FAIL: $*"; exit 1; }
# The CPUs a process may use, one per line.
expand() { tr ',' '\n' <<<"$1" | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done; }
allowed_of_self='grep Cpus_allowed_list /proc/self/status | cut -f2'
mine=$(sh -c "$allowed_of_self")
cpus=$(expand "$mine" | wc -l)
echo "this test may use CPUs $mine ($cpus)"

# As many ranks as CPUs (at most 4): one share each, disjoint, covering them all.
ranks=$(( cpus < 4 ? cpus : 4 ))
out=$("$run" -n "$ranks" --report-bindings sh -c "echo \"rank \$NNS_RANK: \$($allowed_of_self)\"" 2>&1) ||
  fail "nccl-net-run failed: $out"
echo "$out"
[ "$(grep -c 'bound to CPUs' <<<"$out")" = "$ranks" ] || fail "expected $ranks 'bound to CPUs' reports"
all=""
for r in $(seq 0 $((ranks - 1))); do
  set_r=$(sed -n "s/^rank $r: //p" <<<"$out")
  [ -n "$set_r" ] || fail "rank $r printed no CPU list"
  [ "$(grep "nccl-net-run: rank $r bound to CPUs" <<<"$out" | sed 's/.*CPUs //')" = "$set_r" ] ||
    fail "rank $r: the report differs from what the rank sees ($set_r)"
  all+="$(expand "$set_r")"$'\n'
done
[ "$(sort -n <<<"$all" | grep -c .)" = "$(sort -nu <<<"$all" | grep -c .)" ] || fail "two ranks share a CPU"
if [ "$ranks" = "$cpus" ]; then
  [ "$(sort -nu <<<"$all" | grep -c .)" = "$cpus" ] || fail "the ranks' shares do not cover all $cpus CPUs"
fi

# More ranks than CPUs, and --bind-to none: nobody bound, every rank sees all the CPUs.
for args in "-n $((cpus + 1))" "-n $ranks --bind-to none"; do
  out=$("$run" $args --report-bindings sh -c "echo \"rank \$NNS_RANK: \$($allowed_of_self)\"" 2>&1) ||
    fail "nccl-net-run $args failed: $out"
  echo "$out"
  grep -q "bound to CPUs" <<<"$out" && fail "$args: a rank was bound"
  [ "$(grep -c 'not bound' <<<"$out")" = "$(sed -n 's/^-n \([0-9]*\).*/\1/p' <<<"$args")" ] ||
    fail "$args: expected a 'not bound' report per rank"
  grep "^rank " <<<"$out" | grep -qv ": $mine\$" && fail "$args: a rank lost CPUs"
done

out=$("$run" -n 2 --bind-to cores true 2>&1) && fail "an unknown policy was accepted"
grep -q "spread or none" <<<"$out" || fail "an unknown policy gave no clear error: $out"
echo "PASS"
