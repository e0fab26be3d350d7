#!/usr/bin/env python3
"""nccl-load-check.py: real NCCL loads each of our net plugins and runs an allreduce in a one-rank communicator.

For every plugin asked for (default: socket ib ucx) whose libnccl-net-<name>.so is in --lib-dir, a child process runs
with NCCL_NET_PLUGIN=<absolute path of the .so> (a path works on every NCCL since 2.19; a bare name needs the library on
the loader's path), NCCL_NET=nns-<name> (the plugin's own name, so NCCL cannot fall back to its internal IB or Socket
net unnoticed), NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,ENV,NET. The child makes a one-rank communicator on GPU 0
and runs a float32 allreduce through one of two routes:
  --via torch   torch.distributed's NCCL backend (the NCCL PyTorch loads: the nvidia-nccl-cu13 wheel's libnccl.so.2)
  --via ctypes  libnccl.so.2 itself through ctypes (ncclGetUniqueId, ncclCommInitRank, ncclAllReduce, ...): the wheel's
                library (found under the nvidia.nccl package) or the one named by $NNS_LIBNCCL; PyTorch supplies the
                GPU memory and stream.
The parent reads NCCL's INFO lines from the child's output. A one-rank communicator may never open a connection, so
the proof that NCCL loaded the plugin is its own line "NET/Plugin: Loaded net plugin <name> (v<N>)" (the name and the
ncclNet_v<N> NCCL picked), and that the communicator uses it is "Assigned NET plugin <name> to comm" (NCCL 2.27+) or
"Using network <name>", or else a successful init with NCCL_NET forcing that name.

Per plugin, one line: PASS (loaded, used by the communicator, allreduce correct), LOADED (NCCL loaded the plugin but
could not use it here, e.g. no RDMA device for ib; a failure for a plugin named in --require), SKIP (not built, or a
library it links, such as UCX's, missing here; a failure for a plugin named in --require), or
FAIL (NCCL did not load it, loaded another, the allreduce was wrong, or the child failed some other way).
Exit status: 0 when nothing failed and at least one plugin was checked; 1 when one failed; 2 for a usage or
environment error (no PyTorch, no CUDA device, no libnccl for --via ctypes); 3 when no plugin was built.
With --log-dir, each child's whole output goes to <log-dir>/nccl-load-<name>-<via>.log.
"""
import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile

PLUGIN_NAMES = {"socket": "nns-socket", "ib": "nns-ib", "ucx": "nns-ucx"}
LOADED = re.compile(r"NET/Plugin: Loaded net plugin (.+?) \(v(\d+)\)")
ASSIGNED = re.compile(r"(?:Assigned NET plugin (.+?) to comm|Using network (.+?))\s*$", re.MULTILINE)
VERSION = re.compile(r"NCCL version (\S+)")
RESULT = "allreduce over one rank:"
COUNT = 1 << 20


def find_libnccl():
    """$NNS_LIBNCCL, else the wheel's libnccl.so.2 (nvidia-nccl-cu1x: nvidia/nccl/lib/; CUDA 13 wheels may use
    nvidia/cu13/lib/), else the libnccl.so PyTorch has loaded (read from /proc/self/maps)."""
    if os.environ.get("NNS_LIBNCCL"):
        return os.environ["NNS_LIBNCCL"]
    for entry in sys.path:
        for pattern in (("nvidia", "nccl", "lib", "libnccl.so*"), ("nvidia", "cu*", "lib", "libnccl.so*")):
            for found in sorted(glob.glob(os.path.join(entry or ".", *pattern))):
                return os.path.abspath(found)
    try:
        import torch  # noqa: F401 (libtorch_cuda needs libnccl.so.2: its path is in the maps now)

        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if "/libnccl.so" in path and os.path.exists(path):
                    return path
    except ImportError:
        pass
    return None


def child_torch():
    import torch
    import torch.distributed as dist

    print("torch", torch.__version__, "nccl", ".".join(map(str, torch.cuda.nccl.version())), flush=True)
    torch.cuda.set_device(0)
    with tempfile.TemporaryDirectory() as scratch:
        # A file store: no port to pick, nothing listening.
        store = dist.FileStore(os.path.join(scratch, "store"), 1)
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda:0"))
        tensor = torch.full((COUNT,), 3.0, device="cuda")
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        ok = bool((tensor == 3.0).all())
        dist.destroy_process_group()
    return ok


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES; passed by value to ncclCommInitRank


def child_ctypes():
    path = find_libnccl()
    if path is None:
        print("no libnccl.so.2: install nvidia-nccl-cu13 or set NNS_LIBNCCL", flush=True)
        return None
    nccl = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    import torch  # after NCCL: PyTorch's own reference to libnccl.so.2 then resolves to the same library

    comm_t = ctypes.c_void_p
    nccl.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    nccl.ncclGetErrorString.argtypes = [ctypes.c_int]
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    nccl.ncclGetUniqueId.argtypes = [ctypes.POINTER(NcclUniqueId)]
    nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(comm_t), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    # sendbuff, recvbuff, count, datatype, op, comm, stream
    nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                   comm_t, ctypes.c_void_p]
    nccl.ncclCommDestroy.argtypes = [comm_t]
    for function in (nccl.ncclGetVersion, nccl.ncclGetUniqueId, nccl.ncclCommInitRank, nccl.ncclAllReduce,
                     nccl.ncclCommDestroy):
        function.restype = ctypes.c_int

    def check(result, what):
        if result != 0:
            raise RuntimeError("%s: %s (%d)" % (what, nccl.ncclGetErrorString(result).decode(), result))

    version = ctypes.c_int()
    check(nccl.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
    code = version.value  # 2.9+: major * 10000 + minor * 100 + patch
    print("libnccl", path, "nccl %d.%d.%d" % (code // 10000, code // 100 % 100, code % 100), flush=True)
    torch.cuda.set_device(0)
    unique = NcclUniqueId()
    check(nccl.ncclGetUniqueId(ctypes.byref(unique)), "ncclGetUniqueId")
    comm = comm_t()
    check(nccl.ncclCommInitRank(ctypes.byref(comm), 1, unique, 0), "ncclCommInitRank")
    send = torch.full((COUNT,), 3.0, device="cuda")
    recv = torch.zeros(COUNT, device="cuda")
    stream = torch.cuda.current_stream()
    nccl_float32, nccl_sum = 7, 0
    check(nccl.ncclAllReduce(ctypes.c_void_p(send.data_ptr()), ctypes.c_void_p(recv.data_ptr()), COUNT, nccl_float32,
                             nccl_sum, comm, ctypes.c_void_p(stream.cuda_stream)), "ncclAllReduce")
    stream.synchronize()
    ok = bool((recv == 3.0).all())
    check(nccl.ncclCommDestroy(comm), "ncclCommDestroy")
    return ok


def child(via):
    try:
        import torch
    except ImportError as error:
        print("no PyTorch:", error, flush=True)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA device", flush=True)
        return 2
    ok = child_torch() if via == "torch" else child_ctypes()
    if ok is None:
        return 2
    print(RESULT, "correct" if ok else "WRONG", flush=True)
    return 0 if ok else 1


def beside_plugin(path):
    """The environment with the plugin's own folder first on LD_LIBRARY_PATH: scripts/gpu-prepare.sh copies the
    libraries a prebuilt plugin needs beyond the C/C++ runtime (UCX's) beside it."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [os.path.dirname(path), env.get("LD_LIBRARY_PATH")]))
    return env


def missing_libraries(path):
    """The shared libraries the plugin needs that this machine lacks (ldd's "not found"), e.g. UCX's for a plugin
    built elsewhere. Without ldd, a child process dlopen()s the plugin and the first library the loader names as
    missing is returned."""
    try:
        run = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                             env=beside_plugin(path))
    except (OSError, subprocess.TimeoutExpired):
        try:
            probe = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", path],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                                   env=beside_plugin(path))
        except (OSError, subprocess.TimeoutExpired):
            return []
        found = re.search(r"([^\s:]+\.so[.\d]*): cannot open shared object file", probe.stdout.decode(errors="replace"))
        return [found.group(1)] if found and found.group(1) not in (path, os.path.basename(path)) else []
    return [line.split()[0] for line in run.stdout.decode(errors="replace").splitlines() if "not found" in line]


def check_plugin(short, lib_dirs, via, required, log_dir, timeout):
    candidates = [os.path.abspath(os.path.join(d, "libnccl-net-%s.so" % short)) for d in lib_dirs]
    name = PLUGIN_NAMES[short]
    found = [c for c in candidates if os.path.exists(c)]
    if not found:
        print("%s %s: not built (%s)" % ("FAIL" if short in required else "SKIP", short, ", ".join(candidates)),
              flush=True)
        return "fail" if short in required else "skip"
    path = found[0]
    missing = missing_libraries(path)
    if missing:
        print("%s %s: %s needs %s, not on this machine" % ("FAIL" if short in required else "SKIP", short, path,
                                                          ", ".join(missing)), flush=True)
        return "fail" if short in required else "skip"
    env = beside_plugin(path)
    env.update({"NCCL_NET_PLUGIN": path, "NCCL_NET": name, "NCCL_DEBUG": "INFO",
                "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET"})
    env.setdefault("NCCL_SOCKET_IFNAME", "lo")  # NCCL's bootstrap and the socket plugin: one host, loopback
    command = [sys.executable, os.path.abspath(__file__), "--child", via]
    # NCCL's lines go to a file of their own, which NCCL writes unbuffered: on stdout they sit in C's stdio buffer,
    # and a child that crashes or is killed on the timeout lost them ("did not load" for a plugin that loaded, then
    # crashed).
    with tempfile.TemporaryDirectory() as scratch:
        env["NCCL_DEBUG_FILE"] = os.path.join(scratch, "nccl.%p.log")
        try:
            run = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
            output, status = run.stdout.decode(errors="replace"), run.returncode
        except subprocess.TimeoutExpired as expired:
            output, status = (expired.stdout or b"").decode(errors="replace"), None
        for debug in sorted(glob.glob(os.path.join(scratch, "nccl.*.log"))):
            with open(debug, errors="replace") as lines:
                output = lines.read() + output
    if log_dir:
        with open(os.path.join(log_dir, "nccl-load-%s-%s.log" % (short, via)), "w") as log:
            log.write(output)
    keys = ("NET/", "NET plugin", "NCCL version", "NCCL_NET", "network", "WARN", "Error")
    interesting = [line for line in output.splitlines()
                   if any(key in line for key in keys) or line.startswith(("torch ", "libnccl ", RESULT, "Traceback"))]
    for line in interesting[-40:]:
        print("    " + line)
    version = VERSION.search(output)
    loaded = [(m.group(1), int(m.group(2))) for m in LOADED.finditer(output)]
    assigned = [(m.group(1) or m.group(2)).strip() for m in ASSIGNED.finditer(output)]
    ours = [v for (n, v) in loaded if n == name]
    what = "NCCL %s (%s)" % (version.group(1) if version else "version ?", via)
    if status == 2:
        last = [line for line in output.splitlines() if line.strip()]
        print("FAIL %s: %s: the child could not run (%s)" % (short, what, last[-1] if last else "no output"))
        return "env"
    if not ours:
        print("FAIL %s: %s did not load %s from %s%s" % (
            short, what, name, path, "; it loaded " + ", ".join("%s (v%d)" % l for l in loaded) if loaded else ""))
        return "fail"
    head = "%s loaded %s through ncclNet_v%d" % (what, name, ours[0])
    correct = (RESULT + " correct") in output
    if status == 0 and correct:
        others = [a for a in assigned if a != name]
        if others:
            print("FAIL %s: %s, but the communicator uses %s" % (short, head, others[0]))
            return "fail"
        how = "assigned to the communicator" if name in assigned else "NCCL_NET=%s and the init succeeded" % name
        print("PASS %s: %s; %s; allreduce correct" % (short, head, how), flush=True)
        return "pass"
    if (RESULT + " WRONG") in output:
        print("FAIL %s: %s; the allreduce result is WRONG" % (short, head))
        return "fail"
    why = ("timed out after %d s" % timeout if status is None else
           "child killed by signal %d" % -status if status < 0 else "child exit status %d" % status)
    warns = [line for line in output.splitlines() if "WARN" in line]
    detail = "%s%s" % (why, "; " + warns[-1].strip() if warns else "")
    if short in required or status is None or status < 0:  # a crash (signal) or a hang is never "not usable"
        print("FAIL %s: %s, but the communicator could not use it (%s)" % (short, head, detail))
        return "fail"
    print("LOADED %s: %s, not usable on this machine (%s)" % (short, head, detail), flush=True)
    return "loaded"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                          "release", "lib"),
                        help="where libnccl-net-<name>.so are, several separated by ':' (the first that has a plugin "
                             "wins; default: build/release/lib)")
    parser.add_argument("--plugins", default="socket,ib,ucx", help="comma-separated: socket, ib, ucx")
    parser.add_argument("--require", default="socket",
                        help="plugins that must be usable here, not only loaded (comma-separated; default socket)")
    parser.add_argument("--via", choices=("torch", "ctypes"), default="torch")
    parser.add_argument("--log-dir", help="write each child's whole output here")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per plugin (default 180)")
    parser.add_argument("--child", choices=("torch", "ctypes"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    plugins = [p for p in args.plugins.split(",") if p]
    required = [p for p in args.require.split(",") if p]
    unknown = [p for p in plugins + required if p not in PLUGIN_NAMES]
    if unknown:
        parser.error("unknown plugin %s (socket, ib, ucx)" % ", ".join(unknown))
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    lib_dirs = [d for d in args.lib_dir.split(os.pathsep) if d]
    results = [check_plugin(p, lib_dirs, args.via, required, args.log_dir, args.timeout) for p in plugins]
    if "env" in results:
        status = 2
    elif "fail" in results:
        status = 1
    elif all(r == "skip" for r in results):
        print("nccl-load-check: no plugin built in %s" % args.lib_dir)
        status = 3
    else:
        status = 0
    print("nccl-load-check (%s): %s" % (args.via, "PASS" if status == 0 else "FAIL"), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
