#!/usr/bin/env bash
# The command lines of nccl-net-bench (nccl-tests' flags with nccl-tests' meanings: -i steps the size when -f is 1),
# nccl-net-run, and the timeouts of nccl-net-check and nccl-net-perf: every bad value refused with a message naming
# it before any rank starts, never a silent empty or bogus table, nor "4x" read as 4.
# Usage: tool_args_test.sh BIN_DIR
set -uo pipefail
bin="$1"
failures=0

# refuses "ARGS" "TEXT": nccl-net-bench allreduce ARGS exits non-zero and says TEXT on stderr.
refuses() {
  local out status
  out=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce $1 2>&1 >/dev/null)
  status=$?
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAILED: '$1' gave status $status and: $out (expected a refusal saying '$2')"
    failures=$((failures + 1))
  fi
}

refuses "-b 1G -e 8" "-b 1073741824 is larger than -e 8"
refuses "-b x" "--minbytes: a size is decimal digits with an optional K, M, G or T, not \"x\""
refuses "-b 4Q" "--minbytes: q unit not recognized"
refuses "-b -5" "--minbytes"
# CLI11 reads sizes with strtoull(.., 0): a sign wrapped around 2^64 (this was 1 byte), a leading 0 was octal and 0x
# hex (found by the parsers' fuzzer).
refuses "-b -18446744073709551615" "--minbytes: a size is decimal digits"
refuses "-e 010" "--maxbytes: a size is decimal, without a leading 0"
refuses "-e 0x10" "--maxbytes: a size is decimal, without a leading 0"
refuses "-b 1.5K" '--minbytes: a size is a whole number (of bytes, or of K, M, G or T), not "1.5K"'
refuses "-e 2T" "--maxbytes"
refuses "-n 0" "--iters"
refuses "-n -3" "--iters"
refuses "-w -1" "--warmup_iters"
refuses "-f 0" "--stepfactor"
refuses "-f nan" "--stepfactor: not a finite number"
refuses "-f 1 -i 0" "--stepbytes"
refuses "-c -1" "--check"
refuses "-I 2" "--inplace"
refuses "-R 7" "--local_register"
refuses "-G 3" "--device-buffers"
refuses "-r -1" "--root"
refuses "-a 4" "--average"
refuses "-d float17" "unknown data type float17 (-d: int8 uint8"
# nccl-tests' per-process layout: 1 is what this bench does (below, a run with all three), anything else is named.
refuses "-g 2" "-g 2: only 1 is supported (one GPU per rank here"
refuses "-t 4" "-t 4: only 1 is supported"
refuses "-m 8" "-m 8: only 1 is supported"
refuses "-m 0" "-m 0: only 1 is supported"
refuses "-o mean" "unknown reduction mean"
refuses "-A star" "unknown algorithm star"
# -A for a collective with one schedule (or an algorithm it does not have) was taken and changed nothing.
for case in "allgather -A tree:-A tree: allgather runs as the ring or through the collNet (-A ring or collnet)" \
            "broadcast -A ring:-A ring: only allreduce, allgather and reducescatter have algorithms to choose from, not broadcast"; do
  read -ra args <<<"${case%%:*}"
  out=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" "${args[@]}" 2>&1)
  status=$?
  if [ "$status" != 2 ] || ! grep -qF -- "${case#*:}" <<<"$out"; then
    echo "FAILED: ${case%%:*} gave status $status and: $out"
    failures=$((failures + 1))
  fi
done
refuses "-b 1T -e 1T" "-e 1099511627776 needs two buffers of that size per rank"
# An nccl-tests flag this tool lacks is named, also with no collective before it (its value was refused as the
# collective: "collective: 1 not in {allreduce,...}"); an unknown collective is named as such.
for args in "-z 1:argument was not expected: -z" "-C 1 allreduce:-C" "allred:unknown collective allred"; do
  out=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" ${args%%:*} 2>&1 >/dev/null)
  status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "${args#*:}" <<<"$out"; then
    echo "FAILED: nccl-net-bench ${args%%:*} gave status $status and: $out (expected status 2 saying '${args#*:}')"
    failures=$((failures + 1))
  fi
done
# A root outside the job: refused with the flags' status (2) before the communicator is built and the table started.
for collective in broadcast reduce; do
  out=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" $collective -r 1 2>&1)
  status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "-r 1: the job has 1 rank(s), 0 to 0" <<<"$out" || grep -q "^#" <<<"$out"; then
    echo "FAILED: $collective -r 1 on one rank gave status $status and: $out (expected status 2, the root named)"
    failures=$((failures + 1))
  fi
done

# -f 1 steps by -i, as in nccl-tests: 1, 2, 3 and 4 KiB.
rows=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 1K -e 4K -f 1 \
         -i 1K -n 2 -w 1 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $1, $NF}')
if [ "$rows" != "1024/0 2048/0 3072/0 4096/0 " ]; then
  echo "FAILED: -b 1K -e 4K -f 1 -i 1K gave rows (size/#wrong) '$rows'"
  failures=$((failures + 1))
fi
# -i without -f steps by -i too (nccl-tests' -f defaults to 1; ours to 2, which ignored -i).
rows=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 1K -e 3K \
         -i 1K -n 1 -w 0 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}')
if [ "$rows" != "1024 2048 3072 " ]; then
  echo "FAILED: -b 1K -e 3K -i 1K gave sizes '$rows' (expected '1024 2048 3072 ')"
  failures=$((failures + 1))
fi
# -f multiplies (sizes round down to whole elements).
rows=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 1001 -e 64K \
         -f 8 -I 1 -n 2 -w 1 -c 1 -d double | awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $1, $NF}')
if [ "$rows" != "1000/0 8008/0 64064/0 " ]; then
  echo "FAILED: -b 1001 -e 64K -f 8 -I 1 -d double gave rows (size/#wrong) '$rows'"
  failures=$((failures + 1))
fi

# -b 0 goes on to one element, and sizes that round to the row before (below one element) are not repeated.
for case in "0 64 4:0 4 16 64 " "1 16 2:0 4 8 16 "; do
  read -r b e f <<<"${case%%:*}"
  rows=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b "$b" -e "$e" \
           -f "$f" -n 1 -w 0 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}')
  if [ "$rows" != "${case#*:}" ]; then
    echo "FAILED: -b $b -e $e -f $f gave sizes '$rows' (expected '${case#*:}')"
    failures=$((failures + 1))
  fi
done

# nccl-tests' own command line, -g 1 -t 1 -m 1 included, runs.
rows=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 16 -f 2 \
         -g 1 -t 1 -m 1 -n 1 -w 0 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}')
if [ "$rows" != "8 16 " ]; then
  echo "FAILED: nccl-tests' -g 1 -t 1 -m 1 gave sizes '$rows' (expected '8 16 ')"
  failures=$((failures + 1))
fi
# A factor just above 1 still steps by at least one element (it crept up by an ulp, for ever).
rows=$(timeout 60 "$bin/nccl-net-run" -n 1 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 16 \
         -f 1.0000000000000002 -n 1 -w 0 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $1}')
if [ "$rows" != "8 12 16 " ]; then
  echo "FAILED: -b 8 -e 16 -f 1.0000000000000002 gave sizes '$rows' (expected '8 12 16 ')"
  failures=$((failures + 1))
fi
# nccl-tests' columns and closing lines: allgather's count is per rank (the size is the total), then the out-of-bounds
# and average bus bandwidth lines.
out=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allgather -p minimal -b 512 -e 512 \
        -n 1 -w 0 -c 1 2>&1)
if [ "$(awk '$1 == 512 {print $2}' <<<"$out")" != 64 ] || ! grep -q '^# Out of bounds values : 0 OK$' <<<"$out" ||
   ! grep -q '^# Avg bus bandwidth    : ' <<<"$out"; then
  echo "FAILED: allgather of 512 B on 2 ranks: expected count 64 per rank and nccl-tests' closing lines, got: $out"
  failures=$((failures + 1))
fi
# -c is nccl-tests' count of checked runs (its command lines say -c 2 and more; only 0 and 1 were taken): every
# collective, in place and out of place, checks clean with more than one; with -c 0 the column says N/A and the
# out-of-bounds line is still printed, as nccl-tests prints it (scripts look for it).
for collective in allreduce allgather reducescatter broadcast reduce sendrecv; do
  for inplace in 0 1; do
    rows=$(timeout 60 "$bin/nccl-net-run" -n 3 --timeout 30 "$bin/nccl-net-bench" $collective -p minimal -b 96 \
             -e 96K -f 32 -n 2 -w 1 -c 3 -I $inplace -r 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $1, $NF}')
    if [ "$rows" != "96/0 3072/0 98304/0 " ]; then
      echo "FAILED: $collective -c 3 -I $inplace on 3 ranks gave rows (size/#wrong) '$rows'"
      failures=$((failures + 1))
    fi
  done
done
out=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 64 -f 8 \
        -n 1 -w 0 -c 0 2>&1)
if [ "$(awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $1, $NF}' <<<"$out")" != "8/N/A 64/N/A " ] ||
   ! grep -q '^# Out of bounds values : 0 OK$' <<<"$out" || ! grep -q '^# Avg bus bandwidth    : ' <<<"$out"; then
  echo "FAILED: -c 0: expected #wrong N/A and nccl-tests' two closing lines, got: $out"
  failures=$((failures + 1))
fi
# -e is measured against the memory the host has available now (MemAvailable), for every rank on it, and refused
# with the flags' status by every rank before any allocates (it was the physical total, and an -e between the two
# went on to commit it). The figure the message gives is MemAvailable's, read around the run.
available_gib() { awk '/^MemAvailable:/ {printf "%.2f", $2 / 1048576}' /proc/meminfo; }
if [ -n "$(available_gib)" ]; then
  before=$(available_gib)
  out=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -e 1T 2>&1)
  status=$?
  after=$(available_gib)
  said=$(sed -n 's/.*which has \([0-9.]*\) GiB available (MemAvailable in \/proc\/meminfo)$/\1/p' <<<"$out" | head -1)
  if [ "$status" != 2 ] || ! grep -qF "4096.0 GiB for the 2 rank(s) on this host" <<<"$out" || [ -z "$said" ] ||
     ! awk -v s="$said" -v a="$before" -v b="$after" \
         'BEGIN { lo = (a < b ? a : b) - 0.25; hi = (a > b ? a : b) + 0.25; exit !(s >= lo && s <= hi) }'; then
    echo "FAILED: -e 1T on 2 ranks: status $status (expected 2), MemAvailable ${before}-${after} GiB, said '$said': $out"
    failures=$((failures + 1))
  fi
fi
# Products stay exact in the narrow types however many ranks multiply (2^7 wrapped in int8 at 19 ranks and was
# counted wrong).
rows=$(timeout 120 "$bin/nccl-net-run" -n 19 --timeout 100 "$bin/nccl-net-bench" allreduce -p minimal -d int8 \
         -o prod -b 8 -e 8 -n 1 -w 0 -c 1 | awk '$1 ~ /^[0-9]+$/ {printf "%s/%s ", $1, $NF}')
if [ "$rows" != "8/0 " ]; then
  echo "FAILED: int8 prod on 19 ranks gave rows (size/#wrong) '$rows'"
  failures=$((failures + 1))
fi

# The header names the host reductions' ISA variant, which NNS_HOST_ISA caps; a collective that reduces nothing
# (allgather) names none.
header=$(NNS_HOST_ISA=baseline NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce -p minimal \
           -b 8 -e 8 -n 1 -w 0 | grep '^# buffers in')
if [ "$header" != "# buffers in host memory; slots in host memory; host reductions baseline" ]; then
  echo "FAILED: NNS_HOST_ISA=baseline allreduce header: '$header'"
  failures=$((failures + 1))
fi
header=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allgather -p minimal -b 8 -e 8 -n 1 -w 0 |
           grep '^# buffers in')
if [ "$header" != "# buffers in host memory; slots in host memory" ]; then
  echo "FAILED: allgather header: '$header'"
  failures=$((failures + 1))
fi

# The header names the net devices the connections use, and nccl-net-run's loopback choice for the socket plugin
# (NCCL_SOCKET_IFNAME=lo unless set): figures over lo are not an interface's.
header=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 50 "$bin/nccl-net-bench" allreduce -b 8 -e 8 -n 1 -w 0 |
           grep "^# rank 0's net")
if ! [[ "$header" =~ ^"# rank 0's net device 0 (lo, "[0-9]+" Mbps); NCCL_SOCKET_IFNAME=lo"$ ]]; then
  echo "FAILED: the net device's header line: '$header'"
  failures=$((failures + 1))
fi

# Set but empty is no interface named (the socket plugin would take its default): nccl-net-run sets lo then too.
header=$(NCCL_SOCKET_IFNAME='' timeout 60 "$bin/nccl-net-run" -n 2 --timeout 50 "$bin/nccl-net-bench" allreduce -b 8 \
           -e 8 -n 1 -w 0 | grep "^# rank 0's net")
if ! [[ "$header" =~ ^"# rank 0's net device 0 (lo, "[0-9]+" Mbps); NCCL_SOCKET_IFNAME=lo"$ ]]; then
  echo "FAILED: with NCCL_SOCKET_IFNAME set but empty, the net device's header line: '$header'"
  failures=$((failures + 1))
fi

# Another plugin than the socket plugin: NCCL_SOCKET_IFNAME, which nccl-net-run sets, picks none of its devices and
# is not in the header (the minimal plugin has no selecting variable).
header=$(timeout 60 "$bin/nccl-net-run" -n 2 --timeout 50 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 -n 1 \
           -w 0 | grep "^# rank 0's net")
if ! [[ "$header" =~ ^"# rank 0's net device 0 (shm0, "[0-9]+" Mbps)"$ ]]; then
  echo "FAILED: the minimal plugin's net device header line: '$header'"
  failures=$((failures + 1))
fi

# nccl-net-run's long options take --name=VALUE too (it was "not an option"); a flag without a value refuses one.
rows=$(timeout 60 "$bin/nccl-net-run" --ranks=2 --timeout=30 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 \
         -n 1 -w 0 | grep -cE '^ +8 ')
if [ "$rows" != 1 ]; then
  echo "FAILED: nccl-net-run --ranks=2 --timeout=30 gave $rows rows of 8 B (expected 1)"
  failures=$((failures + 1))
fi
for args in "--ranks=0 true:--ranks 0: a rank count" "--ranks= true:--ranks : a rank count" \
            "-n 1 --report-bindings=yes true:--report-bindings takes no value"; do
  out=$(timeout 20 "$bin/nccl-net-run" ${args%%:*} 2>&1)
  status=$?
  if [ "$status" != 2 ] || ! grep -qF -- "${args#*:}" <<<"$out"; then
    echo "FAILED: nccl-net-run ${args%%:*} gave status $status and: $out (expected status 2 saying '${args#*:}')"
    failures=$((failures + 1))
  fi
done

# -a says whose time the column is: the slowest rank's unless asked (the references report that), nccl-tests' other
# three on request.
flags=("" "-a 0" "-a 1" "-a 2")
whose=("the slowest rank's (-a 3)" "rank 0's (-a 0)" "the average of the ranks' (-a 1)" "the fastest rank's (-a 2)")
for i in "${!flags[@]}"; do
  read -ra flag <<<"${flags[$i]}"
  header=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 -n 1 -w 0 \
             "${flag[@]}" | grep '^# time:')
  if [ "$header" != "# time: ${whose[$i]}, out of place (-I 0)" ]; then
    echo "FAILED: nccl-net-bench ${flags[$i]} time header: '$header'"
    failures=$((failures + 1))
  fi
done

header=$(NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 -n 1 -w 0 -I 1 |
           grep '^# time:')
if [ "$header" != "# time: the slowest rank's (-a 3), in place (-I 1)" ]; then
  echo "FAILED: nccl-net-bench -I 1 time header: '$header'"
  failures=$((failures + 1))
fi

# Started by hand, with no launcher's rank or size set, the bench is a job of one rank (as nccl-tests without
# mpirun), and says so; half a launcher's variables is still refused (it exited 2 on both).
launchers=(NNS_RANK NNS_WORLD_SIZE RANK WORLD_SIZE OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE
           SLURM_PROCID SLURM_NTASKS NNS_ROOT_ADDR MASTER_ADDR)
out=$(env "${launchers[@]/#/-u}" timeout 20 "$bin/nccl-net-bench" allreduce -b 8 -e 64 -f 8 2>&1)
status=$?
if [ "$status" != 0 ] || [ "$(awk '$1 == 8 || $1 == 64 {print $NF}' <<<"$out" | tr -d '\n')" != "00" ] ||
   ! grep -q "one rank, so nothing crosses the network" <<<"$out" || ! grep -q ", 1 rank," <<<"$out"; then
  echo "FAILED: nccl-net-bench with no launcher: status $status, '$out'"
  failures=$((failures + 1))
fi
out=$(env "${launchers[@]/#/-u}" NNS_RANK=0 timeout 20 "$bin/nccl-net-bench" allreduce -b 8 -e 8 2>&1)
status=$?
if [ "$status" != 2 ] || ! grep -q "NNS_RANK is set but NNS_WORLD_SIZE is not" <<<"$out"; then
  echo "FAILED: nccl-net-bench with NNS_RANK alone: status $status, '$out'"
  failures=$((failures + 1))
fi
# A root address without a rank is a launch that forgot the rank (each node a job of its own), not a bench by hand.
out=$(env "${launchers[@]/#/-u}" NNS_ROOT_ADDR=10.0.0.1:29500 timeout 20 "$bin/nccl-net-bench" allreduce -b 8 -e 8 2>&1)
status=$?
if [ "$status" != 2 ] || ! grep -q "no rank/size in the environment" <<<"$out"; then
  echo "FAILED: nccl-net-bench with NNS_ROOT_ADDR alone: status $status, '$out'"
  failures=$((failures + 1))
fi

# A bare command name that PATH does not hold is run from beside nccl-net-run (an install's bin/ is rarely on PATH);
# one that is nowhere is still "cannot run", status 127, said once for the job (it was said by every rank).
rows=$(env PATH=/usr/bin:/bin timeout 60 "$bin/nccl-net-run" -n 2 --timeout 30 nccl-net-bench allreduce \
         -p minimal -b 8 -e 8 -n 1 -w 0 | awk '$1 == 8 {print $NF}')
if [ "$rows" != "0" ]; then
  echo "FAILED: nccl-net-bench by bare name with PATH=/usr/bin:/bin: '$rows'"
  failures=$((failures + 1))
fi
out=$(env PATH=/usr/bin:/bin timeout 20 "$bin/nccl-net-run" -n 3 no-such-tool-$$ 2>&1)
status=$?
if [ "$status" != 127 ] || [ "$(grep -c "cannot run" <<<"$out")" != 1 ] ||
   ! grep -qx "nccl-net-run: cannot run no-such-tool-$$: No such file or directory" <<<"$out"; then
  echo "FAILED: a command that is nowhere: status $status, '$out'"
  failures=$((failures + 1))
fi

# One that is there but cannot be run is 126, as a shell says it (it was 127, "not found").
not_runnable=$(mktemp)
chmod 644 "$not_runnable"
out=$(timeout 20 "$bin/nccl-net-run" -n 1 "$not_runnable" 2>&1)
status=$?
if [ "$status" != 126 ] || ! grep -q "cannot run $not_runnable: Permission denied" <<<"$out"; then
  echo "FAILED: a command that cannot be run: status $status, '$out'"
  failures=$((failures + 1))
fi
rm -f "$not_runnable"
# A folder is said to be one (exec calls it "Permission denied").
out=$(timeout 20 "$bin/nccl-net-run" -n 1 /tmp 2>&1)
status=$?
if [ "$status" != 126 ] || ! grep -qx "nccl-net-run: cannot run /tmp: Is a directory" <<<"$out"; then
  echo "FAILED: a folder as the command: status $status, '$out'"
  failures=$((failures + 1))
fi
# The rank count attached, as srun takes it: -n2.
out=$(timeout 20 "$bin/nccl-net-run" -n2 sh -c 'echo "$NNS_RANK/$NNS_WORLD_SIZE"' 2>&1 | sort | tr '\n' ' ')
if [ "$out" != "0/2 1/2 " ]; then
  echo "FAILED: nccl-net-run -n2 ran '$out' (expected ranks 0/2 1/2)"
  failures=$((failures + 1))
fi

# The algorithm line names NNS_ALGO's choice (it said "auto" while the tree ran); -A wins over it.
for case in "tree::# algorithm: tree (from NNS_ALGO)" "tree:ring:# algorithm: ring" ":ring:# algorithm: ring"; do
  IFS=: read -r algo flag want <<<"$case"
  header=$(NNS_ALGO="$algo" NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce -p minimal -b 8 \
             -e 8 -n 1 -w 0 ${flag:+-A "$flag"} | grep '^# algorithm')
  if [ "$header" != "$want" ]; then
    echo "FAILED: NNS_ALGO=$algo -A '$flag': header '$header' (expected '$want')"
    failures=$((failures + 1))
  fi
done

# Auto's limits as numbers, knobs applied (the line named the knobs only): one rank, so the tree is out.
header=$(NNS_DOUBLING_MAX_BYTES=4096 NNS_RANK=0 NNS_WORLD_SIZE=1 timeout 20 "$bin/nccl-net-bench" allreduce -p minimal \
           -b 8 -e 8 -n 1 -w 0 | grep '^# algorithm')
want="# algorithm: auto (recursive doubling up to 4096 B (NNS_DOUBLING_MAX_BYTES), the tree only from 8 ranks, then the ring)"
if [ "$header" != "$want" ]; then
  echo "FAILED: NNS_DOUBLING_MAX_BYTES=4096: header '$header' (expected '$want')"
  failures=$((failures + 1))
fi

# Ranks whose schedule knobs differ (NNS_ALGO here) are refused at creation with both settings, rather than failing
# on the wire with a size mismatch that names neither.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  knob=()
  [ "$r" = 0 ] && knob=(NNS_ALGO=ring)
  env NNS_ROOT_ADDR="127.0.0.1:$port" NNS_WORLD_SIZE=2 NNS_RANK=$r NNS_COMM_TIMEOUT_MS=10000 \
    "${knob[@]}" timeout 30 "$bin/nccl-net-bench" allreduce -p minimal -b 8 -e 8 -n 1 -w 0 \
    > "/tmp/knobs.$$.$r" 2>&1 &
done
wait
if ! grep -q "rank 1 runs with plugin minimal, .*NNS_CHECK_CALLS=0, this rank with .*NNS_CHECK_CALLS=0, NNS_ALGO=ring" \
     "/tmp/knobs.$$.0"; then
  echo "FAILED: ranks with different NNS_ALGO were not refused by name: $(cat "/tmp/knobs.$$.0")"
  failures=$((failures + 1))
fi
rm -f "/tmp/knobs.$$.0" "/tmp/knobs.$$.1"

# launcher_refuses "ARGS" "TEXT": nccl-net-run ARGS /bin/true exits 2 and says TEXT.
launcher_refuses() {
  local out status
  out=$(timeout 20 "$bin/nccl-net-run" $1 /bin/true 2>&1)
  status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "$2" <<<"$out"; then
    echo "FAILED: nccl-net-run '$1' gave status $status and: $out (expected a refusal saying '$2')"
    failures=$((failures + 1))
  fi
}
launcher_refuses "-n 0" "-n 0: a rank count from 1 to 4096"
launcher_refuses "-n 4x" "-n 4x: a rank count"
launcher_refuses "-n 5000" "-n 5000: a rank count"
launcher_refuses "-n 4097" "-n 4097: a rank count from 1 to 4096"
launcher_refuses "-n0" "-n0: a rank count from 1 to 4096"
launcher_refuses "-n 2 --timeout -1" "--timeout -1: whole seconds"
launcher_refuses "-n 2 --timeout soon" "--timeout soon: whole seconds"
launcher_refuses "-n 2 --bind-to cores" "--bind-to cores: spread or none"
launcher_refuses "-n 2 --kill-after -1" "--kill-after -1: whole seconds"
launcher_refuses "-n 2 --kill-after 5s" "--kill-after 5s: whole seconds"
# An option it does not know is refused by name, never run as the command; "--" ends the options.
launcher_refuses "-n 2 --bogus" "--bogus: not an option"
launcher_refuses "-np 2" "-np: not an option; the rank count is -n N"
launcher_refuses "" "give the rank count: -n N"
out=$(timeout 20 "$bin/nccl-net-run" -n 2 -- 2>&1)
status=$?
if [ "$status" -ne 2 ] || ! grep -qF "no command to run" <<<"$out"; then
  echo "FAILED: nccl-net-run -n 2 -- gave status $status and: $out (expected 'no command to run')"
  failures=$((failures + 1))
fi
if ! out=$(timeout 20 "$bin/nccl-net-run" -n 2 -- /bin/echo ran 2>&1) || [ "$(grep -c '^ran$' <<<"$out")" != 2 ]; then
  echo "FAILED: nccl-net-run -n 2 -- /bin/echo ran gave: $out (expected two lines 'ran')"
  failures=$((failures + 1))
fi
# The lowest values each flag takes: --timeout 0 (no limit) and --kill-after 0 (SIGKILL at once) run the command.
if ! out=$(timeout 20 "$bin/nccl-net-run" -n 1 --timeout 0 --kill-after 0 /bin/echo ran 2>&1) || [ "$out" != ran ]; then
  echo "FAILED: nccl-net-run -n 1 --timeout 0 --kill-after 0 /bin/echo ran gave: $out (expected 'ran')"
  failures=$((failures + 1))
fi

# nccl-net-check and nccl-net-perf: a timeout of 0 would fail every rule as hung (the plugin blamed for a typo).
# nccl-net-perf's sizes go through the same size option as nccl-net-bench's.
for tool_args in "nccl-net-check --call-timeout 0 socket" "nccl-net-check --rule-timeout -1 socket" \
                 "nccl-net-check --thread-messages 10 socket" \
                 "nccl-net-perf socket --call-timeout 0" "nccl-net-perf socket -e 2T" "nccl-net-perf socket -b x"; do
  out=$(timeout 20 "$bin/"$tool_args 2>&1)
  status=$?
  if [ "$status" -eq 0 ] || ! grep -qE -- "not in range|a size is decimal digits" <<<"$out"; then
    echo "FAILED: '$tool_args' gave status $status and: $out (expected a refusal)"
    failures=$((failures + 1))
  fi
done

# nccl-net-perf names the option it refuses (one line for all before); -m above NCCL's 64 grouped receives is refused
# before anything is allocated (300000000 allocated 1.2 GB first).
for args_text in "-n 0|--iters" "-f 1|--stepfactor" "-m 0|--multi-recv" "-m 300000000|--multi-recv" "-w -1|--warmup" \
                 "-b 100 -e 10|-b 100 is above -e 10"; do
  out=$(timeout 20 "$bin/nccl-net-perf" minimal ${args_text%%|*} 2>&1)
  status=$?
  if [ "$status" -ne 2 ] || ! grep -qF -- "${args_text#*|}" <<<"$out"; then
    echo "FAILED: nccl-net-perf minimal ${args_text%%|*} gave status $status and: $out (expected 2 and '${args_text#*|}')"
    failures=$((failures + 1))
  fi
done

# Output that cannot be written is a failure, not a success with a truncated report or JSON document.
if [ -w /dev/full ]; then
  for tool_args in "nccl-net-perf minimal -e 8 -n 2 --json" "nccl-net-info -p minimal --json" "nccl-net-info -p minimal"; do
    out=$(timeout 60 "$bin/"$tool_args 2>&1 >/dev/full)
    status=$?
    if [ "$status" -eq 0 ] || ! grep -qF "could not write the output" <<<"$out"; then
      echo "FAILED: '$tool_args > /dev/full' gave status $status and: $out (expected a failure saying so)"
      failures=$((failures + 1))
    fi
  done
  # nccl-net-topo's files: a short one stays in the stream's buffer until it is closed, where the error shows.
  topo="$(dirname "$0")/../data/topologies/azure-ncv4.xml"
  for dump in "--dump-graph /dev/full --nranks 4" "--dump-xml /dev/full"; do
    out=$(timeout 60 "$bin/nccl-net-topo" --topo-file "$topo" $dump 2>&1 >/dev/null)
    status=$?
    if [ "$status" -eq 0 ] || ! grep -qF "/dev/full: write failed" <<<"$out"; then
      echo "FAILED: nccl-net-topo $dump gave status $status and: $out (expected a failed write)"
      failures=$((failures + 1))
    fi
  done
fi

[ "$failures" -eq 0 ] && echo "nccl-net-bench, nccl-net-run, nccl-net-check and nccl-net-perf arguments: every refusal and step as expected"
exit $(( failures > 0 ))
