#!/usr/bin/env bash
# run.sh: the nns-socket benchmark beside iperf3 (same number of TCP streams) and a raw TCP ping-pong, interleaved in
# one run over loopback; prints the medians and the ratios as the markdown kept in docs/performance.md.
# Usage: plugins/socket/bench/run.sh BUILD_DIR [ROUNDS] [SECONDS_PER_POINT]
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [ROUNDS] [SECONDS_PER_POINT]}
rounds=${2:-3}
seconds=${3:-1}
bench=$build/bin/nns-socket-bench
plugin=$build/lib/libnccl-net-socket.so
export NCCL_SOCKET_IFNAME=lo  # loopback only: the one address every machine lets us target
# The plugin's own default: 2 helper threads with 4 or more usable CPUs, else none (the caller drives one socket).
threads=${NNS_SOCKET_NTHREADS:-$(( $(nproc) >= 4 ? 2 : 0 ))}
per_thread=${NNS_SOCKET_NSOCKS_PERTHREAD:-1}
streams=$(( threads > 0 ? threads * per_thread : per_thread ))
(( streams >= 1 )) || streams=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
command -v iperf3 >/dev/null || { echo "run.sh: iperf3 is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }

for round in $(seq 1 "$rounds"); do
  echo "== round $round: nns-socket-bench ($streams data sockets)" >&2
  timeout 600 "$bench" --plugin "$plugin" --seconds "$seconds" > "$out/bench.$round"
  echo "== round $round: iperf3 -P $streams" >&2
  port=$(( 20000 + RANDOM % 20000 ))
  iperf3 -s -1 -B 127.0.0.1 -p "$port" > /dev/null 2>&1 &
  server=$!
  sleep 0.5
  timeout 60 iperf3 -c 127.0.0.1 -p "$port" -P "$streams" -t 5 -J > "$out/iperf.$round"
  wait "$server" || true
done

python3 - "$out" "$rounds" "$streams" <<'PY'
import json, statistics, sys
out, rounds, streams = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bw, lat_plugin, lat_raw, lat_raw2, iperf = {}, [], [], [], []
for r in range(1, rounds + 1):
    for line in open(f"{out}/bench.{r}"):
        f = line.split()
        if f[:1] == ["BW"]:
            bw.setdefault(int(f[1]), []).append(float(f[2]))
        elif f[:2] == ["LAT", "plugin"]:
            lat_plugin.append((float(f[3]), float(f[5])))
        elif f[:2] == ["LAT", "raw"]:
            lat_raw.append((float(f[3]), float(f[5])))
        elif f[:2] == ["LAT", "raw2"]:
            lat_raw2.append((float(f[3]), float(f[5])))
    result = json.load(open(f"{out}/iperf.{r}"))
    iperf.append(result["end"]["sum_received"]["bits_per_second"] / 8e9)
def fmt(values):
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
ip = statistics.median(iperf)
def size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
print(f"iperf3 -P {streams} (receiver), GB/s: {fmt(iperf)}\n")
print("| message | nns-socket GB/s median [min-max] | ratio to iperf3 -P %d |" % streams)
print("|---|---|---|")
for n in sorted(bw):
    print(f"| {size(n)} | {fmt(bw[n])} | {statistics.median(bw[n]) / ip:.2f} |")
def med(samples, i):
    return statistics.median(v[i] for v in samples)
plugin, raw, raw2 = [(med(x, 0), med(x, 1)) for x in (lat_plugin, lat_raw, lat_raw2)]
print()
print("| 8 B one-way latency | p50 us | avg us | plugin ratio p50 / avg |")
print("|---|---|---|---|")
print(f"| nns-socket | {plugin[0]:.2f} | {plugin[1]:.2f} | |")
print(f"| raw TCP ping-pong, one connection | {raw[0]:.2f} | {raw[1]:.2f} | {plugin[0] / raw[0]:.2f} / {plugin[1] / raw[1]:.2f} |")
print(f"| raw TCP ping-pong, one connection per direction | {raw2[0]:.2f} | {raw2[1]:.2f} | {plugin[0] / raw2[0]:.2f} / {plugin[1] / raw2[1]:.2f} |")
print("(p50 and avg are medians over the rounds)")
PY
