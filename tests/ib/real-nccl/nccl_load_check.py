#!/usr/bin/env python3
# nccl_load_check.py: real NCCL (PyTorch's) loads libnccl-net-ib.so on a GPU host without RDMA devices: with
# NCCL_NET=nns-ib the communicator must fail carrying the plugin's reason; without it NCCL must fall back to its own
# nets and the all-reduce must still be right. Usage: nccl_load_check.py /abs/path/libnccl-net-ib.so
import os
import subprocess
import sys

CHILD = r"""
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
print("ALLREDUCE-OK", float(x[0]))
dist.destroy_process_group()
"""


def run(extra):
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_NET_PLUGIN=sys.argv[1], **extra)
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=240)
    return proc.returncode, proc.stdout + proc.stderr


def main():
    failures = 0
    code, log = run({"NCCL_NET": "nns-ib"})
    reason = [l for l in log.splitlines() if "nns-ib" in l and "init failed" in l]
    print("forced NCCL_NET=nns-ib: exit", code, "| plugin reason:", reason[0].strip() if reason else "(none)")
    if code == 0 or not reason:
        failures += 1
        print(log[-3000:])
    code, log = run({})
    ok = "ALLREDUCE-OK 1.0" in log
    loaded = [l for l in log.splitlines() if "nns-ib" in l]
    print("not forced: exit", code, "| all-reduce ok:", ok, "| plugin lines:", len(loaded))
    for line in loaded[:3]:
        print("  ", line.strip())
    if code != 0 or not ok or not loaded:
        failures += 1
        print(log[-3000:])
    print("RESULT", "PASS" if failures == 0 else "FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
