// nccl-net-bench: nccl-tests-style benchmark of the collectives over any net plugin: nccl-tests' flags (-b -e -f -i -n
// -w -c -d -o -r -a) with their meanings, some defaults of its own (-b 8 -e 64M, where nccl-tests takes 32M for both;
// -a 3, the slowest rank's time, where nccl-tests averages), and its columns (size, count, type, redop, root, time,
// algbw, busbw, #wrong). Run it under nccl-net-run, mpirun, srun or torchrun; rank 0 prints the table.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "nns/coll/collectives.hpp"
#include "nns/coll/reduce.hpp"
#include "nns/core/cpus.hpp"
#include "nns/core/printable.hpp"
#include "nns/tools/executable_dir.hpp"
#include "nns/tools/guarded_main.hpp"
#include "nns/tools/host_memory.hpp"
#include "nns/tools/parse_arguments.hpp"
#include "nns/tools/size_option.hpp"

#ifdef NNS_BENCH_CUDA
#include <cuda_runtime_api.h>

#include "nns/cuda/kernel_layer.hpp"
#include "nns/cuda/kernels.hpp"
#include "nns/cuda/slot_memory.hpp"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using namespace nns;

bool isFp8(ncclDataType_t type) {
  return type == ncclFloat8e4m3 || type == ncclFloat8e5m2;
}

// nccl-tests' "mulsum": a premultiplied sum (ncclRedOpCreatePreMulSum), here coll::ReduceOp::preMulSum; the first
// value past NCCL's built-in ops stands for it in the op lists.
constexpr auto kMulSum = static_cast<ncclRedOp_t>(ncclNumOps);

// Rank r's premultiplied-sum scalar: 1 on even ranks, 2 on odd ones, so that every type holds it and the products.
double mulSumScalar(int r) {
  return r % 2 == 0 ? 1.0 : 2.0;
}

const char* reductionName(ncclRedOp_t op) {
  return op == kMulSum ? "mulsum" : coll::opName(op);
}

// How many factors of 2 a product may have and stay exact in `type` (no wrap, no saturation, no rounding).
int exactDoublings(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return 6;
    case ncclUint8: return 7;
    case ncclFloat8e4m3: return 8;  // largest finite 448
    case ncclFloat8e5m2:
    case ncclFloat16: return 15;
    case ncclInt32: return 30;
    case ncclUint32: return 31;
    case ncclInt64: return 62;
    case ncclUint64: return 63;
    default: return 127;  // bfloat16, float32, float64: below float's largest power of two
  }
}

// What element i of a non-reducing collective holds on rank r: 0..8, exact in every type. The r x i term makes each
// rank's step from one element to the next its own, so that no rank count reduces every element to the same result:
// with (7r + 3i) mod 9 alone, 3 ranks' inputs summed to 12 for every element (and their prod, and fp8's sums, were
// the same for every element too), so a collective that combined the wrong elements on 3 ranks went unseen.
//
// gSalt, added to every value mod 9 (mod 3 for fp8), differs between the timed runs (0) and each checked run (1, 2,
// ...): every element's input, and so its result, differs from the earlier runs', so a plugin that leaves an earlier
// message where a lost one should have landed (a bounce buffer or a slot not copied out) is caught as surely as one
// that leaves the output untouched. Prod's inputs stay unsalted: their exactness rests on where the 2s fall.
int gSalt = 0;
double plainValue(int r, size_t i) {
  const auto rank = static_cast<size_t>(r);
  return static_cast<int>((rank * 7 + i * 3 + rank * i + static_cast<size_t>(gSalt)) % 9);
}

// 0..2, mixed the same way (for prod's factors of 2): 0 comes at most once in every three consecutive ranks.
size_t third(int r, size_t i) {
  const auto rank = static_cast<size_t>(r);
  return (rank + i + rank * i) % 3;
}

// Input value of element i on rank r: small integers, so every type and op has an exact expected result. For prod, a
// 2 on at most every third rank, among the first ranks only, so that the product stays exact in the type however
// many ranks there are. For fp8, -1..1 so that every partial sum of up to 8 ranks (a premultiplied one too, whose
// scalars are 1 and 2) is exact in e5m2's 2 mantissa bits: -1, 0 and 1 in turn along the ranks, and on every third
// element a 1 on every third rank and 0 elsewhere, so that 3 ranks' sums differ from element to element.
double inputValue(int r, size_t i, ncclRedOp_t op, ncclDataType_t type) {
  if (op == ncclProd) return (third(r, i) == 0 && r < 3 * exactDoublings(type)) ? 2.0 : 1.0;
  if (isFp8(type)) {
    const auto rank = static_cast<size_t>(r) + static_cast<size_t>(gSalt);
    return i % 3 == 2 ? (rank % 3 == 0 ? 1 : 0) : static_cast<int>((rank + i) % 3) - 1;
  }
  const bool isUnsigned = type == ncclUint8 || type == ncclUint32 || type == ncclUint64;
  return isUnsigned ? plainValue(r, i) : plainValue(r, i) - 4;
}

// Whether every partial result of `op` over n ranks is exact in a narrow float type, so that the result must be exact
// too: min and max pick an input, prod's inputs keep it exact (inputValue), and a sum's partials stay within n times
// the largest input, exact while that is within the type's run of consecutive integers. Avg rounds (1/n).
bool exactIn(ncclDataType_t type, ncclRedOp_t op, int n) {
  if (op == ncclMin || op == ncclMax || op == ncclProd) return true;
  if (op != ncclSum) return false;
  double consecutive = 0;  // every integer up to this is exact in the type
  switch (type) {
    case ncclFloat16: consecutive = 2048; break;
    case ncclBfloat16: consecutive = 256; break;
    case ncclFloat8e4m3: consecutive = 16; break;
    case ncclFloat8e5m2: consecutive = 8; break;
    default: return true;
  }
  return (isFp8(type) ? 1.0 : 4.0) * n <= consecutive;
}

// How far a result may be from the exact one: nothing for exact types, nor for the narrow floats where every partial
// result is exact (one rounding step off is a wrong result there); otherwise, for the narrow floats, avg's rounding
// (1/n and each rank's input times it are rounded to the type, as in NCCL, then each partial sum) or a sum's past
// the type's consecutive integers, with margin.
double tolerance(ncclDataType_t type, double expected, bool exact) {
  double scale = std::max(1.0, std::fabs(expected));
  switch (type) {
    case ncclFloat16:
    case ncclBfloat16: return exact ? 0 : 1e-2 * scale;
    case ncclFloat8e4m3: return exact ? 0 : 0.07 * scale;
    case ncclFloat8e5m2: return exact ? 0 : 0.13 * scale;
    default: return 1e-6;
  }
}

// Whether a result is off by more than the type's rounding. A NaN is always wrong (every comparison with it is
// false, so "differs by more than" would pass it); an exact match is right, infinities included. `exact`: the
// result has no rounding to allow for (exactIn; always so for collectives that only move data).
bool isWrong(double got, double expected, ncclDataType_t type, bool exact) {
  return !(got == expected || std::fabs(got - expected) <= tolerance(type, expected, exact));
}

void store(void* buffer, size_t i, ncclDataType_t type, double v) {
  switch (type) {
    case ncclInt8: static_cast<int8_t*>(buffer)[i] = static_cast<int8_t>(v); break;
    case ncclUint8: static_cast<uint8_t*>(buffer)[i] = static_cast<uint8_t>(v); break;
    case ncclInt32: static_cast<int32_t*>(buffer)[i] = static_cast<int32_t>(v); break;
    case ncclUint32: static_cast<uint32_t*>(buffer)[i] = static_cast<uint32_t>(v); break;
    case ncclInt64: static_cast<int64_t*>(buffer)[i] = static_cast<int64_t>(v); break;
    case ncclUint64: static_cast<uint64_t*>(buffer)[i] = static_cast<uint64_t>(v); break;
    case ncclFloat16: static_cast<uint16_t*>(buffer)[i] = coll::floatToHalf(static_cast<float>(v)); break;
    case ncclBfloat16: static_cast<uint16_t*>(buffer)[i] = coll::floatToBfloat16(static_cast<float>(v)); break;
    case ncclFloat32: static_cast<float*>(buffer)[i] = static_cast<float>(v); break;
    case ncclFloat64: static_cast<double*>(buffer)[i] = v; break;
    case ncclFloat8e4m3: static_cast<uint8_t*>(buffer)[i] = coll::floatToFp8e4m3(static_cast<float>(v)); break;
    case ncclFloat8e5m2: static_cast<uint8_t*>(buffer)[i] = coll::floatToFp8e5m2(static_cast<float>(v)); break;
    default: break;
  }
}

double load(const void* buffer, size_t i, ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return static_cast<const int8_t*>(buffer)[i];
    case ncclUint8: return static_cast<const uint8_t*>(buffer)[i];
    case ncclInt32: return static_cast<const int32_t*>(buffer)[i];
    case ncclUint32: return static_cast<const uint32_t*>(buffer)[i];
    case ncclInt64: return static_cast<double>(static_cast<const int64_t*>(buffer)[i]);
    case ncclUint64: return static_cast<double>(static_cast<const uint64_t*>(buffer)[i]);
    case ncclFloat16: return coll::halfToFloat(static_cast<const uint16_t*>(buffer)[i]);
    case ncclBfloat16: return coll::bfloat16ToFloat(static_cast<const uint16_t*>(buffer)[i]);
    case ncclFloat32: return static_cast<const float*>(buffer)[i];
    case ncclFloat64: return static_cast<const double*>(buffer)[i];
    case ncclFloat8e4m3: return coll::fp8e4m3ToFloat(static_cast<const uint8_t*>(buffer)[i]);
    case ncclFloat8e5m2: return coll::fp8e5m2ToFloat(static_cast<const uint8_t*>(buffer)[i]);
    default: return 0;
  }
}

// What a buffer holds before the checked run writes it (sentinelFor): a value outside the inputs (0..8, -4..4, 1 and
// 2), and so every broadcast, allgather, sendrecv, max and min result, and no reduction's result either.
double expectedReduction(int n, size_t i, ncclRedOp_t op, ncclDataType_t type);  // below

#ifdef NNS_BENCH_CUDA
// This process's rank among those on its machine, from the launcher the bootstrap took the rank from (never another
// one's variable: under `srun torchrun`, SLURM_LOCALID is the node's task, LOCAL_RANK the worker's); nccl-net-run
// sets NNS_LOCAL_RANK. Where the launcher does not say, the global rank.
int localRank(const core::LaunchInfo& launch) {
  return launch.localRank >= 0 ? launch.localRank : std::max(launch.rank, 0);
}
#endif

// An exact integer result as the type holds it: 8- and 32-bit sums wrap, as NCCL's (and the C++) arithmetic in the
// type does; uint8 sums of 0..8 pass 255 from 64 ranks on. (64-bit types never get there with these inputs.)
double wrapped(double v, ncclDataType_t type) {
  const auto value = static_cast<long long>(v);
  switch (type) {
    case ncclInt8: return static_cast<int8_t>(static_cast<uint8_t>(value));
    case ncclUint8: return static_cast<uint8_t>(value);
    case ncclInt32: return static_cast<int32_t>(static_cast<uint32_t>(value));
    case ncclUint32: return static_cast<uint32_t>(value);
    default: return v;
  }
}

// The sentinel for a checked run of `op` over n ranks in `type`: the first of a few values that, as the type holds it,
// no element's expected result equals or comes within the check's tolerance of (the inputs repeat every 9 elements).
// 99 alone was an unsigned sum of 25 ranks (every 9th element from the 3rd), where a collective that wrote nothing
// passed the check.
double sentinelFor(int n, ncclRedOp_t op, ncclDataType_t type) {
  alignas(8) unsigned char cell[8] = {};
  for (double candidate : {99.0, 97.0, 93.0, 89.0, 83.0, 79.0, 73.0, 71.0, 67.0, 61.0, 59.0, 53.0}) {
    store(cell, 0, type, candidate);
    const double held = load(cell, 0, type);
    bool clash = false;
    for (size_t i = 0; i < 18 && !clash; ++i)
      clash = !isWrong(held, expectedReduction(n, i, op, type), type, exactIn(type, op, n));
    if (!clash) return candidate;
  }
  return 99.0;  // every candidate is some element's result: none of them can tell an unwritten element
}

double expectedReduction(int n, size_t i, ncclRedOp_t op, ncclDataType_t type) {
  double acc = inputValue(0, i, op, type);
  for (int r = 1; r < n; ++r) {
    double v = inputValue(r, i, op, type);
    switch (op) {
      case kMulSum: acc += v * mulSumScalar(r); break;
      case ncclSum:
      case ncclAvg: acc += v; break;
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: break;
    }
  }
  const bool integer = !coll::isFloatingPoint(type);
  if (integer) acc = wrapped(acc, type);  // the sum as the type holds it; avg divides that
  if (op == ncclAvg) acc = integer ? std::trunc(acc / n) : acc / n;
  return acc;
}

}  // namespace

int runTool(int argc, char** argv) {
  CLI::App app{"nccl-net-bench: collective benchmark over an ncclNet plugin, nccl-tests columns"};
  std::string collective = "allreduce", typeText = "float", opText = "sum", plugin, algoText = "auto";
  std::uint64_t minBytes = 8, maxBytes = 64 << 20, stepBytes = 1 << 20;
  double factor = 2;
  int iterations = 20, warmup = 5, check = 1, root = 0, inPlace = 0, registerBuffers = 0, deviceBuffers = 0;
  // Checked after parsing: a check here would run before CLI11 names an unknown flag, so `nccl-net-bench -t 1` would
  // be refused for its collective "1" instead of for -t.
  app.add_option("collective", collective,
                 "allreduce (the default), allgather, reducescatter, broadcast, reduce or sendrecv");
  app.footer(
      "Exit status:\n"
      "  0  measured (and, with -c 1, every element right)\n"
      "  1  the run failed: a plugin or communicator error, a rank that died or did not arrive in time\n"
      "  2  a refused argument, or buffers larger than the memory this host has available\n"
      "  3  wrong results (-c 1): the rows' #wrong column and '# Out of bounds values' say how many\n"
      "  4  -G 1 on a machine with no CUDA device");
  // nccl-tests' flags and meanings; sizes take K/M/G (powers of 1024).
  const auto nonNegative = nns::tools::integerIn(0, std::numeric_limits<int>::max());
  tools::addSizeOption(app, "-b,--minbytes", minBytes, "smallest size (default 8)");
  tools::addSizeOption(app, "-e,--maxbytes", maxBytes, "largest size (default 64M)");
  app.add_option("-f,--stepfactor", factor,
                 "size multiplier between rows (default 2, or 1 when -i is given); 1: add -i")
      ->check(CLI::Range(1.0, 1024.0))
      ->check(CLI::Validator(
          [](std::string& text) {  // NaN passes a range (both comparisons false) and stood for 1: one row, exit 0
            return std::isfinite(std::strtod(text.c_str(), nullptr)) ? std::string() : "not a finite number";
          },
          "FINITE"));
  tools::addSizeOption(app, "-i,--stepbytes", stepBytes, "size increment between rows when -f is 1 (default 1M)", 1);
  app.add_option("-n,--iters", iterations, "timed iterations per size (default 20)")
      ->transform(nns::tools::integerIn(1, std::numeric_limits<int>::max()));
  app.add_option("-w,--warmup_iters", warmup, "untimed iterations per size (default 5)")->transform(nonNegative);
  // nccl-tests' datacheck is a count: up to N checked runs after the timed ones, stopping at the first that finds a
  // wrong element (whose count the row shows), so `-c 2` from its command lines is taken with that meaning.
  app.add_option("-c,--check", check,
                 "checked runs per size: 0 none, N up to N, stopping at the first with wrong elements (default 1)")
      ->transform(nonNegative);
  static constexpr const char* kTypeNames =
      "int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double fp8e4m3 fp8e5m2, or all";
  app.add_option("-d,--datatype", typeText, kTypeNames);
  app.add_option(
      "-o,--op", opText,
      "sum prod max min avg, mulsum (a premultiplied sum: rank r's input times 1 or 2, r even or odd), or all");
  app.add_option("-r,--root", root, "root rank of broadcast/reduce")->transform(nonNegative);
  // nccl-tests times both forms in one row; here one form per run, and -i is nccl-tests' step.
  app.add_option("-I,--inplace", inPlace, "1: in place (the input lives inside the output buffer, as nccl.h defines)")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("-R,--local_register", registerBuffers,
                 "1: register the send and receive buffers with the communicator once (zero-copy transfers, like "
                 "ncclCommRegister)")
      ->check(CLI::IsMember({0, 1}));
  // -d is nccl-tests' data type, so GPU buffers get a flag of their own.
  app.add_option("-G,--device-buffers", deviceBuffers,
                 "1: buffers in GPU memory (the current CUDA device), reduced by the CUDA kernels, moved by GPU Direct "
                 "RDMA where the plugin supports CUDA pointers, else staged through pinned host slots")
      ->check(CLI::IsMember({0, 1}));
  // nccl-tests' -a, with its meanings; the default here is the slowest rank (3), not nccl-tests' average (1): the
  // references this bench is compared with (mpi_allreduce_bench, gloo_allreduce_bench) report the slowest rank, and
  // a collective is done when its last rank is.
  int timeReport = 3;
  app.add_option("-a,--average", timeReport,
                 "time reported across the ranks: 0 rank 0's, 1 the average (nccl-tests' default), 2 the fastest, "
                 "3 the slowest (default)")
      ->check(CLI::IsMember({0, 1, 2, 3}));
  app.add_option("-p,--plugin", plugin, "net plugin (default: NCCL_NET_PLUGIN, else socket)");
  app.add_option("-A,--algo", algoText,
                 "algorithm: for allreduce auto (by size; the collNet first where NCCL_COLLNET_ENABLE=1), ring, tree, "
                 "doubling or collnet (the plugin's collNet: in-network reduction); for allgather and reducescatter "
                 "auto (the ring; the collNet first where NCCL_COLLNET_ENABLE=1), ring or collnet");
  // nccl-tests' per-process layout flags, so its command lines run here: one rank per process, one thread, one
  // operation per timed step is what this bench does, so 1 is taken and anything else is refused by name.
  int gpusPerProcess = 1, threadsPerProcess = 1, aggregated = 1;
  app.add_option("-g,--ngpus", gpusPerProcess,
                 "nccl-tests' GPUs per process: 1 only (a rank per GPU: nccl-net-run -n N)");
  app.add_option("-t,--nthreads", threadsPerProcess, "nccl-tests' threads per process: 1 only (a rank per process)");
  app.add_option("-m,--agg_iters", aggregated, "nccl-tests' operations aggregated per iteration: 1 only");
  if (int status = nns::tools::parseArguments(app, argc, argv); status >= 0) return status;
  static const char* const kCollectives[] = {"allreduce", "allgather", "reducescatter",
                                             "broadcast", "reduce",    "sendrecv"};
  if (std::find(std::begin(kCollectives), std::end(kCollectives), collective) == std::end(kCollectives)) {
    std::fprintf(stderr,
                 "nccl-net-bench: unknown collective %s (allreduce, allgather, reducescatter, broadcast, reduce or "
                 "sendrecv)\n",
                 collective.c_str());
    return 2;
  }
  for (const auto& [flag, value, why] :
       {std::make_tuple("-g", gpusPerProcess,
                        "one GPU per rank here: run a rank per GPU (nccl-net-run -n N, or mpirun)"),
        std::make_tuple("-t", threadsPerProcess, "one thread per rank here: run more ranks instead"),
        std::make_tuple("-m", aggregated, "each timed step is one operation here")}) {
    if (value != 1) {
      std::fprintf(stderr, "nccl-net-bench: %s %d: only 1 is supported (%s)\n", flag, value, why);
      return 2;
    }
  }
  // nccl-tests steps by -i unless -f multiplies (its -f defaults to 1); here -f defaults to 2 for a short table, so
  // an -i without -f is nccl-tests' additive step rather than ignored.
  if (app.count("-i") > 0 && app.count("-f") == 0) factor = 1;

  if (minBytes > maxBytes) {
    std::fprintf(stderr, "nccl-net-bench: -b %llu is larger than -e %llu\n", static_cast<unsigned long long>(minBytes),
                 static_cast<unsigned long long>(maxBytes));
    return 2;
  }
  // -d all and -o all run every type and every op in turn, as in nccl-tests (the correctness matrix runs them in
  // one launch per rank count); the op is left at sum for the collectives that do not reduce.
  std::vector<ncclDataType_t> types;
  std::vector<ncclRedOp_t> ops;
  coll::Algorithm algorithm;
  if (typeText == "all") {
    types = {ncclInt8,    ncclUint8,    ncclInt32,   ncclUint32,  ncclInt64,      ncclUint64,
             ncclFloat16, ncclBfloat16, ncclFloat32, ncclFloat64, ncclFloat8e4m3, ncclFloat8e5m2};
  } else if (ncclDataType_t type; coll::parseType(typeText.c_str(), &type)) {
    types = {type};
  } else {
    std::fprintf(stderr, "nccl-net-bench: unknown data type %s (-d: %s)\n", typeText.c_str(), kTypeNames);
    return 2;
  }
  if (opText == "all") {
    ops = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, kMulSum};
  } else if (opText == "mulsum" || opText == "premulsum") {
    ops = {kMulSum};
  } else if (ncclRedOp_t op; coll::parseOp(opText.c_str(), &op)) {
    ops = {op};
  } else {
    std::fprintf(stderr, "nccl-net-bench: unknown reduction %s (-o: sum prod max min avg mulsum, or all)\n",
                 opText.c_str());
    return 2;
  }
  if (!coll::parseAlgorithm(algoText.c_str(), &algorithm)) {
    std::fprintf(stderr, "nccl-net-bench: unknown algorithm %s (-A: auto ring tree doubling collnet)\n",
                 algoText.c_str());
    return 2;
  }
  // The other collectives have one schedule each: an -A for them was taken and changed nothing.
  const bool ringOrCollNet = collective == "allgather" || collective == "reducescatter";
  if (algorithm != coll::Algorithm::Auto && collective != "allreduce" &&
      !(ringOrCollNet && (algorithm == coll::Algorithm::Ring || algorithm == coll::Algorithm::CollNet))) {
    std::fprintf(stderr, "nccl-net-bench: -A %s: %s\n", algoText.c_str(),
                 ringOrCollNet
                     ? (collective + " runs as the ring or through the collNet (-A ring or collnet)").c_str()
                     : ("only allreduce, allgather and reducescatter have algorithms to choose from, not " + collective)
                           .c_str());
    return 2;
  }
  core::LaunchInfo launch;
  std::string error;
  if (!core::launcherVariablesSet()) {
    // Started by hand, as nccl-tests runs without mpirun: a job of one rank, which moves nothing over the network.
    launch.rank = 0;
    launch.size = 1;
    launch.localRank = 0;
    launch.source = "none";
    std::fprintf(stderr,
                 "nccl-net-bench: no launcher in the environment: one rank, so nothing crosses the network (run it "
                 "under nccl-net-run -n N, mpirun, srun or torchrun for more)\n");
  } else if (!core::launchInfoFromEnvironment(&launch, &error)) {
    std::fprintf(stderr, "nccl-net-bench: %s\n", error.c_str());
    return 2;
  }
  // A root outside the job is a bad flag like any other: refused before the communicator is built and the table
  // started, with the flags' exit status (the collective would refuse it too, but as a failed run).
  if ((collective == "broadcast" || collective == "reduce") && root >= launch.size) {
    std::fprintf(stderr, "nccl-net-bench: -r %d: the job has %d rank(s), 0 to %d\n", root, launch.size,
                 launch.size - 1);
    return 2;
  }
  long wrongTotal = 0;
  double busbwSum = 0;  // over the rows rank 0 printed, for the closing average
  long rows = 0;
  int gpu = -1;  // with -G 1: the CUDA device this rank's buffers are on
  try {
    core::CommOptions options;
    if (!plugin.empty()) options.plugin = plugin;
    if (deviceBuffers) {
#ifdef NNS_BENCH_CUDA
      if (!cuda::deviceAvailable()) {
        std::fprintf(stderr, "nccl-net-bench: -G 1: no CUDA device (%s)\n", cuda::deviceUnavailableReason().c_str());
        return 4;
      }
      // One GPU per local rank where there are several, shared round-robin where there are fewer GPUs than ranks
      // (every rank on device 0 with one GPU). Before the communicator: its slots go on the current device.
      int gpus = 0;
      if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
        std::fprintf(stderr, "nccl-net-bench: -G 1: no CUDA device\n");
        return 4;
      }
      gpu = localRank(launch) % gpus;
      if (cudaError_t status = cudaSetDevice(gpu); status != cudaSuccess) {
        std::fprintf(stderr, "nccl-net-bench: rank %d: cudaSetDevice(%d): %s\n", launch.rank, gpu,
                     cudaGetErrorString(status));
        return 1;
      }
      options.slotMemory = cuda::chooseSlotMemory;
#else
      std::fprintf(stderr, "nccl-net-bench: -G 1: this build has no CUDA (configure with NNS_WITH_CUDA=ON)\n");
      return 2;
#endif
    }
    options.searchDirs = {nns::tools::libDirBesideExecutable()};
    core::Communicator comm(launch, options);
    const int n = comm.size(), rank = comm.rank();
    const bool rooted = collective == "broadcast" || collective == "reduce";
    const bool reducing = collective != "allgather" && collective != "broadcast" && collective != "sendrecv";
    const bool p2p = collective == "sendrecv";
    if (!reducing) ops = {ncclSum};
    if (p2p) inPlace = 0;  // send/recv has no in-place form
    // nccl-tests' bus bandwidth factors.
    double busFactor = collective == "allreduce"                                      ? 2.0 * (n - 1) / n
                       : (collective == "allgather" || collective == "reducescatter") ? double(n - 1) / n
                                                                                      : 1.0;
    // Every rank on this host holds two buffers of -e bytes (host mirrors too with -G 1): refused when they do not
    // fit in the memory the host has available now, rather than left to the OOM killer (with overcommit the
    // allocation itself succeeds; the physical total, checked before, let through sizes that other processes' memory
    // left no room for). Every rank reads before any allocates, and all stop if one refuses: a rank that went on
    // would wait in its first collective for one that left.
    const double buffersBytes = 2.0 * static_cast<double>(maxBytes + 64) * comm.bootstrap().localRanks();
    const double availableBytes = nns::tools::hostAvailableBytes();
    const bool tooBig = availableBytes > 0 && buffersBytes > availableBytes;
    bool anyTooBig = false;
    for (const auto& verdict : comm.bootstrap().allGather(tooBig ? "1" : "0")) anyTooBig |= verdict == "1";
    if (tooBig) {
      std::fprintf(stderr,
                   "nccl-net-bench: rank %d: -e %llu needs two buffers of that size per rank, %.1f GiB for the %d "
                   "rank(s) on this host, which has %.1f GiB available (MemAvailable in /proc/meminfo)\n",
                   rank, static_cast<unsigned long long>(maxBytes), buffersBytes / (1 << 30),
                   comm.bootstrap().localRanks(), availableBytes / (1 << 30));
    }
    if (anyTooBig) return 2;
    if (rank == 0) {
      std::printf(
          "# nccl-net-bench %s over %s (ncclNet_v%d, %s), %d rank%s, %d channel(s), %d slots of %zu B per "
          "connection%s\n",
          collective.c_str(), comm.net().name(), comm.net().version(), comm.net().path().c_str(), n, n == 1 ? "" : "s",
          comm.channels(), comm.options().slots, comm.options().slotBytes,
          registerBuffers ? ", buffers registered (zero-copy)" : "");
      // The devices the connections use, as the plugin names them, and the variable that picked them where the
      // plugin is one of this project's: with nccl-net-run the socket plugin is on loopback (it sets
      // NCCL_SOCKET_IFNAME=lo unless set), which a reader comparing figures must know; UCX and verbs ignore that one.
      const std::string plugin = comm.net().name();
      const char* selector = plugin == "nns-socket" ? "NCCL_SOCKET_IFNAME"
                             : plugin == "nns-ucx"  ? "UCX_NET_DEVICES"
                             : plugin == "nns-ib"   ? "NCCL_IB_HCA"
                                                    : nullptr;
      const char* selected = selector != nullptr ? std::getenv(selector) : nullptr;
      std::printf("# rank 0's net %s%s\n", comm.devicesDescription().c_str(),
                  selected != nullptr ? ("; " + std::string(selector) + "=" + core::printable(selected)).c_str() : "");
      const std::string where =
          deviceBuffers ? "GPU memory (rank 0 on CUDA device " + std::to_string(gpu) + ")" : std::string("host memory");
      // Host-memory reductions run one ISA variant of the kernels, picked by CPUID (NNS_HOST_ISA caps it).
      const std::string reductions =
          reducing && !deviceBuffers ? std::string("; host reductions ") + coll::hostKernelIsa() : std::string();
      std::printf("# buffers in %s; slots in %s%s\n", where.c_str(), comm.slotMemoryDescription().c_str(),
                  reductions.c_str());
      int cpus = 0;
      const std::string ownCpus = core::ownCpus(&cpus);
      const long online = sysconf(_SC_NPROCESSORS_ONLN);
      std::printf("# %d rank(s) on this machine, %ld CPU(s) online; rank 0 %s CPU(s) %s\n",
                  comm.bootstrap().localRanks(), online, cpus < online ? "bound to" : "unbound, on", ownCpus.c_str());
      if (collective == "allreduce") {
        // -A first, then NNS_ALGO (chooseAllReduce's order); a malformed NNS_ALGO fails the first call, named there.
        coll::Algorithm shown = algorithm;
        const char* env = std::getenv("NNS_ALGO");
        const bool fromEnv = algorithm == coll::Algorithm::Auto && env != nullptr && *env != '\0' &&
                             coll::parseAlgorithm(env, &shown) && shown != coll::Algorithm::Auto;
        // Auto's limits as this communicator has them (knobs applied): which rows ran which algorithm.
        std::string how = fromEnv ? " (from NNS_ALGO)" : "";
        if (shown == coll::Algorithm::Auto) {
          try {
            const coll::AllReduceLimits limits = coll::allReduceLimits(comm);
            const std::string tree =
                comm.size() < limits.treeMinRanks
                    ? "the tree only from " + std::to_string(limits.treeMinRanks) + " ranks"
                : limits.treeMaxBytes <= limits.doublingMaxBytes
                    ? "the tree never (NNS_TREE_MAX_BYTES " + std::to_string(limits.treeMaxBytes) +
                          " B is not above it)"
                    : "the tree up to " + std::to_string(limits.treeMaxBytes) + " B (NNS_TREE_MAX_BYTES)";
            const std::string bySize = "recursive doubling up to " + std::to_string(limits.doublingMaxBytes) +
                                       " B (NNS_DOUBLING_MAX_BYTES), " + tree + ", then the ring";
            how = coll::collNetEnabled() ? " (the collNet for the types and ops it reduces (NCCL_COLLNET_ENABLE=1); "
                                           "the others by size: " +
                                               bySize + ")"
                                         : " (" + bySize + ")";
          } catch (const std::exception& error) {
            how = std::string(" (its limits unknown: ") + error.what() + "; the first call fails on it)";
          }
        }
        std::printf("# algorithm: %s%s\n", coll::algorithmName(shown), how.c_str());
      } else if (ringOrCollNet) {
        // The same order (-A, NNS_ALGO, NCCL_COLLNET_ENABLE); any NNS_ALGO but collnet means the ring here.
        coll::Algorithm fromEnv = coll::Algorithm::Auto;
        const char* env = std::getenv("NNS_ALGO");
        if (env != nullptr && *env != '\0') coll::parseAlgorithm(env, &fromEnv);
        std::string shown;
        if (algorithm != coll::Algorithm::Auto) {
          shown = coll::algorithmName(algorithm);
        } else if (fromEnv != coll::Algorithm::Auto) {
          shown = std::string(fromEnv == coll::Algorithm::CollNet ? "collnet" : "ring") + " (from NNS_ALGO)";
        } else {
          bool enabled = false;
          try {
            enabled = coll::collNetEnabled();
          } catch (const std::exception&) {  // malformed: the first call fails on it, named there
          }
          shown =
              enabled ? "auto (the collNet where it takes the call (NCCL_COLLNET_ENABLE=1), else the ring)" : "ring";
        }
        std::printf("# algorithm: %s\n", shown.c_str());
      }
      static const char* const kTimeReports[] = {"rank 0's", "the average of the ranks'", "the fastest rank's",
                                                 "the slowest rank's"};
      std::printf("# time: %s (-a %d), %s (-I %d)\n", kTimeReports[timeReport], timeReport,
                  inPlace ? "in place" : "out of place", inPlace);
      std::printf("#%11s %12s %8s %6s %5s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "root", "time",
                  "algbw", "busbw", "#wrong");
      std::printf("#%11s %12s %8s %6s %5s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
                  "(GB/s)", "");
      std::fflush(stdout);  // the header says setup is done (a file or pipe would hold it back)
    }
    std::vector<unsigned char> sendBuffer, recvBuffer;
    try {
      sendBuffer.resize(maxBytes + 64);
      recvBuffer.resize(maxBytes + 64);
    } catch (const std::bad_alloc&) {
      throw std::runtime_error("cannot allocate two buffers of -e " + std::to_string(maxBytes) + " bytes");
    }
    // With -G 1 the host vectors are the mirrors where inputs are written and results checked; `onDevice` maps a
    // pointer into them to the same offset of the GPU buffers, and `upload`/`download` move a range.
    coll::KernelLayer* kernels = &coll::hostKernels();
    std::function<unsigned char*(unsigned char*)> onDevice = [](unsigned char* p) { return p; };
    std::function<void(unsigned char*, size_t)> upload = [](unsigned char*, size_t) {};
    std::function<void(unsigned char*, size_t)> download = [](unsigned char*, size_t) {};
#ifdef NNS_BENCH_CUDA
    struct DeviceBuffer {
      void* p = nullptr;
      unsigned char* at(ptrdiff_t offset) const { return static_cast<unsigned char*>(p) + offset; }
      ~DeviceBuffer() {
        if (p != nullptr) cudaFree(p);
      }
    } sendDevice, recvDevice;
    auto checkCuda = [](cudaError_t status, const std::string& what) {
      if (status != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(status));
    };
    if (deviceBuffers) {
      checkCuda(cudaMalloc(&sendDevice.p, sendBuffer.size()),
                "cudaMalloc of " + std::to_string(sendBuffer.size()) + " bytes (send buffer)");
      checkCuda(cudaMalloc(&recvDevice.p, recvBuffer.size()),
                "cudaMalloc of " + std::to_string(recvBuffer.size()) + " bytes (receive buffer)");
      kernels = &cuda::deviceKernels();
      onDevice = [&](unsigned char* p) {
        if (p >= sendBuffer.data() && p <= sendBuffer.data() + sendBuffer.size())
          return sendDevice.at(p - sendBuffer.data());
        return recvDevice.at(p - recvBuffer.data());
      };
      // cudaMemcpy from pageable memory may return before the DMA into the GPU is done, and only work on the legacy
      // default stream is ordered after it. The slots' copies run on a blocking stream of their own (ordered after
      // that work) and the kernels on the per-thread stream; waiting for the device makes the upload complete
      // whatever stream reads it.
      upload = [&, checkCuda](unsigned char* p, size_t bytes) {
        checkCuda(cudaMemcpy(onDevice(p), p, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
        checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the upload");
      };
      download = [&, checkCuda](unsigned char* p, size_t bytes) {
        checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize before the download");
        checkCuda(cudaMemcpy(p, onDevice(p), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
      };
    }
#endif
    if (registerBuffers) {
      // With -G 1 the GPU buffers, as NCCL_PTR_CUDA: the communicator takes them under GPU Direct (its slots in GPU
      // memory, where received pieces are flushed) and refuses them by name otherwise.
      const int type = deviceBuffers ? NCCL_PTR_CUDA : NCCL_PTR_HOST;
      comm.registerBuffer(onDevice(sendBuffer.data()), sendBuffer.size(), type);
      comm.registerBuffer(onDevice(recvBuffer.data()), recvBuffer.size(), type);
    }
    // Rows as nccl-tests steps them: from -b, times -f while -f > 1, else plus -i, up to -e. Sizes round down to
    // whole elements (to a multiple of the ranks for allgather and reduce-scatter); a size that rounds to the row
    // before it is skipped, and after 0 bytes (-b 0 with -f > 1, where multiplying would stay at 0) the next row is
    // one element, as nccl-net-perf steps 0, 1, 2, 4...
    for (const ncclDataType_t type : types) {
      for (const ncclRedOp_t op : ops) {
        const size_t es = coll::typeSize(type);
        size_t previousBytes = SIZE_MAX;
        for (double bytesD = static_cast<double>(minBytes); bytesD <= static_cast<double>(maxBytes);) {
          // At least a byte further each step: a factor just above 1 would otherwise creep up by an ulp at a time.
          const double next = factor > 1
                                  ? (bytesD == 0 ? static_cast<double>(es) : std::max(bytesD * factor, bytesD + 1))
                                  : bytesD + static_cast<double>(stepBytes);
          size_t count = static_cast<size_t>(bytesD) / es;
          if ((collective == "allgather" || collective == "reducescatter")) count -= count % n;
          size_t bytes = count * es;
          if (bytes == previousBytes) {
            bytesD = next;
            continue;
          }
          previousBytes = bytes;
          size_t perRank = count / n;  // allgather send / reducescatter recv
          size_t inputCount = collective == "allgather" ? perRank : count;
          // In place, nccl.h's way: allgather's input is the rank's block of the output, reducescatter's output is the
          // rank's block of the input, every other collective's input is the output buffer itself.
          unsigned char* input = sendBuffer.data();
          unsigned char* output = recvBuffer.data();
          if (inPlace) {
            input = collective == "allgather" ? recvBuffer.data() + rank * perRank * es : recvBuffer.data();
            if (collective == "reducescatter") output = recvBuffer.data() + rank * perRank * es;
          }
          // The inputs. Only the root's are read in a broadcast: a non-root's buffer (in place, its output) is left to
          // the sentinel below, never the root's values, which would pass the check for a broadcast that delivered
          // none.
          auto writeInputs = [&] {
            if (collective == "broadcast" && rank != root) return;
            for (size_t i = 0; i < inputCount; ++i) {
              size_t element = collective == "allgather" ? rank * perRank + i : i;
              store(input, i, type, reducing ? inputValue(rank, element, op, type) : plainValue(rank, element));
            }
            upload(input, inputCount * es);
          };
          // Before the checked run, what it is to write holds a value no input has and no result either
          // (sentinelFor): the results of earlier runs left there (the warmup's, the timed ones', in place the other
          // ranks' blocks of an allgather) must not pass for its own.
          const size_t outputCount = collective == "reducescatter" ? perRank : count;
          auto writeSentinel = [&] {
            const double sentinel = sentinelFor(n, op, type);  // for this run's salt
            for (size_t i = 0; i < outputCount; ++i) store(output, i, type, sentinel);
            upload(output, outputCount * es);
          };
          gSalt = 0;
          writeInputs();
          unsigned char* in = onDevice(input);
          unsigned char* out = onDevice(output);
          // mulsum's scalar, one value of the type (host memory, as the kernel layers take it).
          alignas(8) unsigned char scalar[8] = {};
          store(scalar, 0, type, mulSumScalar(rank));
          const coll::ReduceOp reduceOp = op == kMulSum ? coll::ReduceOp::preMulSum(scalar) : coll::ReduceOp(op);
          auto runOnce = [&] {
            coll::KernelLayer& k = *kernels;
            if (collective == "allreduce")
              coll::allReduce(comm, in, out, count, type, reduceOp, k, algorithm);
            else if (p2p)
              coll::sendRecv(comm,
                             {{coll::P2POp::Send, comm.next(), in, count, type},
                              {coll::P2POp::Recv, comm.prev(), out, count, type}},
                             k);
            else if (collective == "allgather")
              coll::allGather(comm, in, out, perRank, type, k, algorithm);
            else if (collective == "reducescatter")
              coll::reduceScatter(comm, in, out, perRank, type, reduceOp, k, algorithm);
            else if (collective == "broadcast")
              coll::broadcast(comm, in, out, count, type, root, k);
            else
              coll::reduce(comm, in, out, count, type, reduceOp, root, k);
          };
          // The runs are timed, then checked in an untimed run of their own, as nccl-tests does: the sentinel first,
          // so a run that writes nothing cannot pass with what an earlier one left (checking the last timed run
          // out of place, where the sentinel went in before all of them, passed a plugin that dropped the data of
          // every run but the first); then its inputs, salted apart from the timed runs' (gSalt). The further runs of
          // -c N are the same, each salted apart from the one before.
          for (int i = 0; i < warmup; ++i) runOnce();
          comm.bootstrap().barrier();
          auto start = Clock::now();
          for (int i = 0; i < iterations; ++i) runOnce();
          double seconds = std::chrono::duration<double>(Clock::now() - start).count() / std::max(iterations, 1);
          // This rank's wrong elements in the output of the run just done.
          auto countWrong = [&] {
            long wrong = 0;
            const bool reduces = collective == "allreduce" || collective == "reducescatter" || collective == "reduce";
            const bool exact = !reduces || exactIn(type, op, n);
            download(output, (collective == "reducescatter" ? perRank : count) * es);
            for (size_t i = 0; i < count; ++i) {
              double expected, got;
              if (collective == "allreduce") {
                expected = expectedReduction(n, i, op, type);
              } else if (collective == "allgather") {
                expected = plainValue(static_cast<int>(i / perRank), i);
              } else if (collective == "reducescatter") {
                if (i >= perRank) break;
                expected = expectedReduction(n, rank * perRank + i, op, type);
                got = load(output, i, type);
                if (isWrong(got, expected, type, exact)) ++wrong;
                continue;
              } else if (collective == "broadcast") {
                expected = plainValue(root, i);
              } else if (p2p) {
                expected = plainValue(comm.prev(), i);
              } else {
                if (rank != root) break;
                expected = expectedReduction(n, i, op, type);
              }
              got = load(output, i, type);
              if (isWrong(got, expected, type, exact)) ++wrong;
            }
            return wrong;
          };
          // An untimed checked run with inputs of its own (the next salt): the sentinel first (in place the input lies
          // inside the output), then the inputs.
          auto checkedRun = [&] {
            ++gSalt;
            writeSentinel();
            writeInputs();
            runOnce();
            return countWrong();
          };
          long wrong = 0;
          if (check > 0) wrong = checkedRun();
          // The time -a asks for (the slowest rank's by default) and every rank's wrong count.
          char mine[64] = {};  // all 64 bytes travel
          std::snprintf(mine, sizeof(mine), "%.9f %ld", seconds, wrong);
          auto all = comm.bootstrap().allGather(std::string(mine, sizeof(mine)));
          double slowest = 0, fastest = std::numeric_limits<double>::infinity(), sum = 0, rankZero = 0;
          long totalWrong = 0;
          for (size_t r = 0; r < all.size(); ++r) {
            double s = 0;
            long w = 0;
            std::sscanf(all[r].c_str(), "%lf %ld", &s, &w);
            if (r == 0) rankZero = s;
            slowest = std::max(slowest, s);
            fastest = std::min(fastest, s);
            sum += s;
            totalWrong += w;
          }
          const double reported = timeReport == 0   ? rankZero
                                  : timeReport == 1 ? sum / static_cast<double>(all.size())
                                  : timeReport == 2 ? fastest
                                                    : slowest;
          // -c N: nccl-tests' further checked runs, each counted across the ranks so that all stop at the same one.
          for (int c = 1; c < check && totalWrong == 0; ++c) {
            char text[32] = {};  // all 32 bytes travel
            std::snprintf(text, sizeof(text), "%ld", checkedRun());
            totalWrong = 0;
            for (const auto& entry : comm.bootstrap().allGather(std::string(text, sizeof(text))))
              totalWrong += std::strtol(entry.c_str(), nullptr, 10);
          }
          wrongTotal += totalWrong;
          if (rank == 0) {
            double algbw = bytes / reported / 1e9;
            busbwSum += algbw * busFactor;
            ++rows;
            // The count column is nccl-tests': per rank for allgather and reducescatter (the size is the total).
            const size_t shownCount = collective == "allgather" || collective == "reducescatter" ? perRank : count;
            std::printf(" %11zu %12zu %8s %6s %5s %10.1f %8.3f %8.3f %7s\n", bytes, shownCount, coll::typeName(type),
                        reducing ? reductionName(op) : "none", std::to_string(rooted ? root : -1).c_str(),
                        reported * 1e6, algbw, algbw * busFactor, check ? std::to_string(totalWrong).c_str() : "N/A");
            std::fflush(stdout);
          }
          bytesD = next;
        }
      }
    }
    if (rank == 0) {
      // nccl-tests' closing lines, which scripts look for: both always, as nccl-tests prints them (0 OK with -c 0).
      std::printf("# Out of bounds values : %ld %s\n", wrongTotal, wrongTotal == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %g \n", rows > 0 ? busbwSum / rows : 0.0);
      std::fflush(stdout);
    }
    // No rank leaves before rank 0 has printed everything, closing lines included: a launcher stops the others when
    // one exits non-zero, as every rank does after wrong results (printed after this barrier, they were lost in 13 of
    // 24 failing runs, exactly when a script looks for "FAILED").
    comm.bootstrap().barrier();
  } catch (const core::CommError& e) {
    std::fprintf(stderr, "nccl-net-bench: %s\n", e.what());  // names the rank already
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl-net-bench: rank %d: %s\n", launch.rank, e.what());
    return 1;
  }
  if (wrongTotal > 0) {
    std::fprintf(stderr, "nccl-net-bench: rank %d: %ld wrong elements in all\n", launch.rank, wrongTotal);
    return 3;
  }
  return 0;
}

int main(int argc, char** argv) {
  return nns::tools::guardedMain("nccl-net-bench", argc, argv, runTool);
}
