#!/usr/bin/env python3
"""compare.py: nccl-net-bench allreduce against Open MPI (TCP and shared memory) and Gloo (ring, ring_chunked),
interleaved in one run on this host, one table of bus bandwidth per rank count (Python 3, standard library only).

Each round runs, for each rank count: ours (socket plugin on lo; also with the buffers registered once, -R 1, and
copied through the slots, NNS_CALL_REGISTRATION=0), Open MPI MPI_Allreduce over TCP on lo
(pml ob1, btl tcp,self), Open MPI's default (shared memory), gloo::AllreduceRing and gloo::AllreduceRingChunked
(TCP on 127.0.0.1); the table shows the median over rounds per size.

Every launcher binds its ranks as it does by default: mpirun to a core each while there are enough cores (none when
oversubscribed), nccl-net-run to an equal share of the CPUs on the same condition, and this script the Gloo ranks in
the same way as nccl-net-run.

Usage: compare.py [--build build/release] [--ranks 2 4] [--rounds 3] [-b 8] [-e 64M] [-f 8] [-n 20] [-w 5]
                  [--raw FILE]   (every run's output appended to FILE)
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ["ours", "ours_reg", "ours_copy", "ompi_tcp", "ompi_sm", "gloo_ring", "gloo_ring_chunked"]
TITLES = {"ours": "ours", "ours_reg": "ours -R 1", "ours_copy": "ours copying", "ompi_tcp": "OMPI-tcp",
          "ompi_sm": "OMPI-sm", "gloo_ring": "gloo ring", "gloo_ring_chunked": "gloo ring_chunked"}


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip()
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def rows(output, size_col, time_col, busbw_col):
    """{size: (time_us, busbw)} from a table whose comment lines start with '#'."""
    result = {}
    for line in output.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        try:
            result[int(fields[size_col])] = (float(fields[time_col]), float(fields[busbw_col]))
        except (IndexError, ValueError):
            continue
    return result


def run(cmd, env=None, timeout=600):
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        print(f"  ! {' '.join(cmd[:4])} ... exited {proc.returncode}:\n{proc.stdout[-2000:]}", file=sys.stderr)
    return proc.stdout, time.monotonic() - started


def build_references(args, work):
    mpi = os.path.join(work, "mpi_allreduce_bench")
    subprocess.run(["mpicc", "-O3", "-o", mpi, os.path.join(HERE, "mpi_allreduce_bench.c")], check=True)
    gloo = os.path.join(args.build, "bin", "gloo_allreduce_bench")
    if not os.access(gloo, os.X_OK):  # the tree did not build it (configured before libgloo-dev was installed)
        gloo = os.path.join(work, "gloo_allreduce_bench")
        subprocess.run(["g++", "-std=c++17", "-O3", "-o", gloo, os.path.join(HERE, "gloo_allreduce_bench.cc"),
                        "-lgloo", "-pthread"], check=True)
    return mpi, gloo


def cpu_shares(ranks):
    """Each rank's CPUs: this process's CPUs cut into `ranks` equal runs, or None (unbound) when too few."""
    cpus = sorted(os.sched_getaffinity(0))
    if ranks > len(cpus):
        return None
    return [cpus[r * len(cpus) // ranks:(r + 1) * len(cpus) // ranks] for r in range(ranks)]


def gloo_run(gloo, algo, ranks, args, work, tag):
    store = os.path.join(work, f"store-{tag}")
    os.makedirs(store)
    procs = []
    shares = cpu_shares(ranks)
    for rank in range(ranks):
        cmd = [gloo, "--rank", str(rank), "--size", str(ranks), "--store", store, "--algo", algo,
               "-b", str(args.b), "-e", str(args.e), "-f", str(args.f), "-n", str(args.n), "-w", str(args.w)]
        bind = (lambda share=shares[rank]: os.sched_setaffinity(0, share)) if shares else None
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      preexec_fn=bind))
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode != 0:
            print(f"  ! gloo {algo} rank exited {proc.returncode}:\n{out[-2000:]}", file=sys.stderr)
        outputs.append(out)
    return outputs[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build/release")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-b", default="8")
    parser.add_argument("-e", default="64M")
    parser.add_argument("-f", type=int, default=8)
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("-w", type=int, default=5)
    parser.add_argument("--raw", help="append every run's output to this file")
    args = parser.parse_args()
    min_bytes, max_bytes = parse_bytes(args.b), parse_bytes(args.e)
    work = tempfile.mkdtemp(prefix="nns-compare-")
    raw = open(args.raw, "a") if args.raw else None
    try:
        mpi, gloo = build_references(args, work)
        bench = os.path.join(args.build, "bin", "nccl-net-bench")
        launcher = os.path.join(args.build, "bin", "nccl-net-run")
        mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
        # -w too: the MPI bench's own default (5) gave Open MPI other warm-ups than the rest had.
        mpi_args = [mpi, str(min_bytes), str(max_bytes), str(args.f), str(args.n), str(args.w)]
        ours_env = dict(os.environ, NCCL_SOCKET_IFNAME="lo")
        # Plain buffers copied through the slots, as over a plugin whose registration is not free (the socket
        # plugin's is, so by default each call's buffers are registered for it).
        copy_env = dict(ours_env, NNS_CALL_REGISTRATION="0")
        # results[ranks][column][size] = {round: (time_us, busbw)}
        results = {n: {c: {} for c in COLUMNS} for n in args.ranks}
        print(f"# compare.py {' '.join(sys.argv[1:])}")
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; uptime: {os.popen('uptime').read().strip()}")
        for rnd in range(1, args.rounds + 1):
            for n in args.ranks:
                runs = [
                    ("ours", lambda: run([launcher, "-n", str(n), bench, "allreduce", "-p", "socket", "-b", args.b,
                                          "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w", str(args.w),
                                          "-c", "0"], env=ours_env)[0], (0, 5, 7)),
                    # The same with the buffers registered once (zero-copy sends and plain-copy receives).
                    ("ours_reg", lambda: run([launcher, "-n", str(n), bench, "allreduce", "-p", "socket", "-b", args.b,
                                              "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w", str(args.w),
                                              "-c", "0", "-R", "1"], env=ours_env)[0], (0, 5, 7)),
                    ("ours_copy", lambda: run([launcher, "-n", str(n), bench, "allreduce", "-p", "socket", "-b",
                                               args.b, "-e", args.e, "-f", str(args.f), "-n", str(args.n), "-w",
                                               str(args.w), "-c", "0"], env=copy_env)[0], (0, 5, 7)),
                    ("ompi_tcp", lambda: run(mpirun + ["-np", str(n), "--mca", "pml", "ob1", "--mca", "btl",
                                                       "tcp,self", "--mca", "btl_tcp_if_include", "lo"] + mpi_args)[0],
                     (0, 1, 3)),
                    ("ompi_sm", lambda: run(mpirun + ["-np", str(n)] + mpi_args)[0], (0, 1, 3)),
                    ("gloo_ring", lambda: gloo_run(gloo, "ring", n, args, work, f"ring-{n}-{rnd}"), (0, 1, 3)),
                    ("gloo_ring_chunked",
                     lambda: gloo_run(gloo, "ring_chunked", n, args, work, f"chunked-{n}-{rnd}"), (0, 1, 3)),
                ]
                for column, start, cols in runs:
                    out = start()
                    if raw:
                        raw.write(f"=== round {rnd}, {n} ranks, {column}\n{out}\n")
                    for size, value in rows(out, *cols).items():
                        results[n][column].setdefault(size, {})[rnd] = value
                    print(f"# round {rnd}, {n} ranks, {TITLES[column]}: {len(rows(out, *cols))} sizes",
                          file=sys.stderr)
        for n in args.ranks:
            print_table(n, results[n], args.rounds)
        print(f"# finished {time.strftime('%H:%M:%S')}; uptime: {os.popen('uptime').read().strip()}")
    finally:
        if raw:
            raw.close()
        shutil.rmtree(work, ignore_errors=True)


def median(by_round, index):
    return statistics.median(v[index] for v in by_round.values()) if by_round else None


def per_round(result, size, column):
    """The time ratio column/ours of each round that has both: the host's speed drifts over minutes, so a round's own
    ratio (its runs seconds apart) says more than a ratio of medians taken over the whole run."""
    ours, other = result["ours"].get(size, {}), result[column].get(size, {})
    return [other[r][0] / ours[r][0] for r in sorted(ours) if r in other and ours[r][0] and other[r][0]]


def spread(ratios):
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else "-"


def fmt(value, digits=3):
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(n, result, rounds):
    # busbw from each tool's time (us, printed to 0.1 us) rather than its busbw column (printed to 0.001 GB/s, all
    # zeros at small sizes): nccl-tests' formula, algbw * 2(n-1)/n, for every column alike. Ratios of busbw at one
    # size are ratios of times.
    sizes = sorted(set().union(*(result[c].keys() for c in COLUMNS)))
    print(f"\n### {n} ranks: busbw GB/s (size / time x 2(n-1)/n), median time of {rounds} round(s)\n")
    print("| size (B) | " + " | ".join(TITLES[c] for c in COLUMNS) + " | ours/gloo-best | ours/OMPI-tcp |")
    print("|" + " ---: |" * (len(COLUMNS) + 3))
    for size in sizes:
        t = {c: median(result[c].get(size, {}), 0) for c in COLUMNS}
        bw = {c: size / (t[c] * 1e-6) / 1e9 * 2 * (n - 1) / n if t[c] else None for c in COLUMNS}
        gloo_best = max((v for v in (bw["gloo_ring"], bw["gloo_ring_chunked"]) if v), default=None)
        vs_gloo = bw["ours"] / gloo_best if bw["ours"] and gloo_best else None
        vs_tcp = bw["ours"] / bw["ompi_tcp"] if bw["ours"] and bw["ompi_tcp"] else None
        print(f"| {size} | " + " | ".join(fmt_bw(bw[c]) for c in COLUMNS) + f" | {fmt(vs_gloo, 2)} | {fmt(vs_tcp, 2)} |")
    smallest = sizes[0] if sizes else None
    if smallest is not None:
        lat = {c: median(result[c].get(smallest, {}), 0) for c in COLUMNS}
        ratio = lat["ours"] / lat["ompi_tcp"] if lat["ours"] and lat["ompi_tcp"] else None
        print(f"\n{smallest}-byte latency (time, us): " + ", ".join(f"{TITLES[c]} {fmt(lat[c], 1)}" for c in COLUMNS) +
              f"; ours/OMPI-tcp time ratio = {fmt(ratio, 2)} (below 1: ours is faster)")
    large = [size for size in sizes if size >= 1 << 20]
    if large:
        print("\nRound by round, ours against OMPI-tcp (busbw ratio, median [lowest-highest] over the rounds): " +
              ", ".join(f"{size} B {spread(per_round(result, size, 'ompi_tcp'))}" for size in large) +
              (f"; {smallest} B time ratio {spread([1 / r for r in per_round(result, smallest, 'ompi_tcp')])}"
               if smallest is not None else ""))


def fmt_bw(value):
    if value is None:
        return "-"
    return f"{value:.3f}" if value >= 0.01 else f"{value:.2e}"


if __name__ == "__main__":
    main()
