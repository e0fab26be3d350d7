#!/usr/bin/env python3
"""Loads one of our plugins into real NCCL (the library PyTorch ships) in a one-rank communicator and runs an
allreduce. Run with NCCL_NET_PLUGIN=/abs/path/libnccl-net-X.so NCCL_NET=<plugin name> NCCL_DEBUG=INFO.
Used on a GPU machine; prints the NCCL version and the result."""
import os
import sys

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())), flush=True)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
tensor = torch.full((1 << 20,), 3.0, device="cuda")
dist.all_reduce(tensor)
torch.cuda.synchronize()
ok = bool((tensor == 3.0).all())
print("allreduce over one rank:", "correct" if ok else "WRONG", flush=True)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
