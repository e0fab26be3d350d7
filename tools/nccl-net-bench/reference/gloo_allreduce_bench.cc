// gloo_allreduce_bench.cc: the Gloo reference for nccl-net-bench allreduce: gloo::AllreduceRing or
// AllreduceRingChunked (float, sum) over Gloo's TCP transport, timed like mpi_allreduce_bench.c (warm-up, then the
// mean of N iterations, the slowest rank's time), printing size, time, algbw and nccl-tests' bus bandwidth.
//
// One process per rank, started by the caller (compare.py starts them all on this host):
//   gloo_allreduce_bench --rank R --size N --store DIR [--algo ring|ring_chunked] [--host 127.0.0.1]
//                        [-b 8] [-e 64M] [-f 8] [-n 20] [-w 5]
// rank and size may come from RANK/WORLD_SIZE or OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE instead (so mpirun can
// start it too); DIR is a directory every rank can see (gloo::rendezvous::FileStore), from GLOO_STORE_DIR if absent.
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

struct Options {
  int rank = -1, size = -1;
  std::string store, algo = "ring", host = "127.0.0.1";
  size_t minBytes = 8, maxBytes = 64u << 20;
  int factor = 8, iterations = 20, warmup = 5;
};

// "64M", "8K", "1G" or plain bytes.
size_t parseBytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k': value *= 1024; break;
    case 'M':
    case 'm': value *= 1024 * 1024; break;
    case 'G':
    case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(value);
}

int envInt(const char* a, const char* b) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return -1;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gloo_allreduce_bench: %s needs a value\n", arg.c_str());
      return false;
    }
    const char* value = argv[++i];
    if (arg == "--rank")
      o->rank = std::atoi(value);
    else if (arg == "--size")
      o->size = std::atoi(value);
    else if (arg == "--store")
      o->store = value;
    else if (arg == "--algo")
      o->algo = value;
    else if (arg == "--host")
      o->host = value;
    else if (arg == "-b")
      o->minBytes = parseBytes(value);
    else if (arg == "-e")
      o->maxBytes = parseBytes(value);
    else if (arg == "-f")
      o->factor = std::atoi(value);
    else if (arg == "-n")
      o->iterations = std::atoi(value);
    else if (arg == "-w")
      o->warmup = std::atoi(value);
    else {
      std::fprintf(stderr, "gloo_allreduce_bench: unknown option %s\n", arg.c_str());
      return false;
    }
  }
  if (o->rank < 0) o->rank = envInt("RANK", "OMPI_COMM_WORLD_RANK");
  if (o->size < 0) o->size = envInt("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
  if (o->store.empty() && std::getenv("GLOO_STORE_DIR")) o->store = std::getenv("GLOO_STORE_DIR");
  // A minimum below one float would stay 0 under the factor: rows of 0 bytes for ever.
  if (o->rank < 0 || o->size < 1 || o->rank >= o->size || o->store.empty() || o->factor < 2 ||
      o->minBytes < sizeof(float) || o->iterations < 1 || o->warmup < 0 ||
      (o->algo != "ring" && o->algo != "ring_chunked")) {
    std::fprintf(stderr,
                 "usage: gloo_allreduce_bench --rank R --size N --store DIR [--algo ring|ring_chunked] "
                 "[--host ADDR] [-b 8 (>= 4)] [-e 64M] [-f 8 (>= 2)] [-n 20 (>= 1)] [-w 5]\n");
    return false;
  }
  return true;
}

int run(const Options& o) {
  gloo::transport::tcp::attr attr;
  attr.hostname = o.host;  // loopback: every rank on this host
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
  gloo::rendezvous::FileStore fileStore(o.store);
  gloo::rendezvous::PrefixStore store("gloo_allreduce_bench", fileStore);
  context->connectFullMesh(store, device);

  std::vector<float> data(o.maxBytes / sizeof(float) + 1);
  std::vector<float*> ptrs{data.data()};
  double mine = 0;
  std::vector<double*> timePtrs{&mine};
  gloo::BarrierAllToAll barrier(context);
  // The slowest rank's time, as MPI_Reduce(MAX) in the MPI reference.
  gloo::AllreduceRing<double> slowest(context, timePtrs, 1, gloo::ReductionFunction<double>::max);

  if (o.rank == 0)
    std::printf("# gloo::%s float sum, %d ranks, TCP on %s\n#%11s %10s %8s %8s\n",
                o.algo == "ring" ? "AllreduceRing" : "AllreduceRingChunked", o.size, o.host.c_str(), "size(B)",
                "time(us)", "algbw", "busbw");
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= static_cast<size_t>(o.factor)) {
    const int count = static_cast<int>(bytes / sizeof(float));
    for (int i = 0; i < count; ++i) data[i] = static_cast<float>((o.rank * 7 + i * 3) % 9) - 4;
    // Built once per size outside the timing: the constructor sets up the pairs' buffers, as a user would reuse it.
    std::unique_ptr<gloo::Algorithm> allreduce;
    if (o.algo == "ring")
      allreduce = std::make_unique<gloo::AllreduceRing<float>>(context, ptrs, count);
    else
      allreduce = std::make_unique<gloo::AllreduceRingChunked<float>>(context, ptrs, count);
    for (int i = 0; i < o.warmup; ++i) allreduce->run();
    barrier.run();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iterations; ++i) allreduce->run();
    mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / o.iterations;
    slowest.run();
    if (o.rank == 0) {
      double algbw = static_cast<double>(count) * sizeof(float) / mine / 1e9;
      std::printf(" %11zu %10.1f %8.3f %8.3f\n", static_cast<size_t>(count) * sizeof(float), mine * 1e6, algbw,
                  algbw * 2.0 * (o.size - 1) / o.size);
      std::fflush(stdout);
    }
  }
  barrier.run();  // nobody closes its pairs while a peer still sends
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, &options)) return 2;
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_bench: rank %d: %s\n", options.rank, e.what());
    return 1;
  }
}
