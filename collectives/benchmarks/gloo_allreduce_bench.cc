// The Gloo side of compare_openmpi.sh: gloo::allreduce of floats (sum, out of
// place) over a range of sizes, timed like mpi_allreduce_bench.c and
// collective_bench (warm-up, barrier, timed iterations, the slowest rank's
// mean), with the same inputs and correctness check, printing
//   size_bytes time_us busbw_gbps wrong
// per size on rank 0. busbw = size / time * 2 (n - 1) / n, as nccl-tests.
//
// Gloo has no launcher, so this program is its own: rank 0 is the parent and
// forks RANKS - 1 children. Every rank uses Gloo's TCP device bound to
// 127.0.0.1 (loopback sockets: Gloo has no shared-memory transport) and meets
// the others through a FileStore in a fresh temporary directory.
//
// The all-reduce is the new-style gloo::allreduce(AllreduceOptions) with the
// ring algorithm (reduce-scatter then all-gather around the ring, in segments
// of at most 1 MiB with two in flight). That API takes separate input and
// output buffers, so it is out of place like MPI_Allreduce and nothing outside
// the library has to be copied or re-seeded between timed iterations.
//
// Usage: gloo_allreduce_bench RANKS MIN_BYTES MAX_BYTES ITERS WARMUP
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// All-reduce one double in place; used for the slowest mean and the wrong count.
void AllreduceScalar(const std::shared_ptr<gloo::Context>& ctx, double* value, ReduceFn fn) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(value, 1);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
}

int RunRank(int rank, int size, const std::string& dir, size_t min_bytes, size_t max_bytes,
            int iters, int warmup) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  // Every blocking call below fails with an exception after this long, so a
  // rank that died cannot leave the others waiting forever.
  ctx->setTimeout(std::chrono::seconds(60));
  ctx->connectFullMesh(store, device);

  // gloo::sum and gloo::max are overloaded; pick the untyped (void*) forms.
  const ReduceFn sum_f = &gloo::sum<float>, sum_d = &gloo::sum<double>, max_d = &gloo::max<double>;
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    const size_t count = bytes / sizeof(float);
    if (count == 0) continue;
    // The same small integers as collective_bench and the MPI bench: sums are exact.
    std::vector<float> in(count), out(count, 0.0f);
    for (size_t i = 0; i < count; ++i) in[i] = (float)((long)((i * 7 + rank * 13) % 17) - 8);

    // One options object for the whole size: the buffers are registered once,
    // as MPI would do implicitly, and every call reads in and writes out.
    gloo::AllreduceOptions opts(ctx);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setInput(in.data(), count);
    opts.setOutput(out.data(), count);
    opts.setReduceFunction(sum_f);
    for (int i = 0; i < warmup; ++i) gloo::allreduce(opts);
    gloo::BarrierOptions barrier(ctx);
    gloo::barrier(barrier);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gloo::allreduce(opts);
    double slowest = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    AllreduceScalar(ctx, &slowest, max_d);

    double wrong = 0;  // a double so Gloo's stock sum can add it; exact up to 2^53
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += (double)((long)((i * 7 + r * 13) % 17) - 8);
      if ((double)out[i] != want) ++wrong;
    }
    AllreduceScalar(ctx, &wrong, sum_d);
    if (rank == 0) {
      const double busbw = (double)bytes / slowest / 1e9 * 2.0 * (size - 1) / size;
      printf("%zu %.3f %.4f %ld\n", bytes, slowest * 1e6, busbw, (long)wrong);
      fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s RANKS MIN_BYTES MAX_BYTES ITERS WARMUP\n", argv[0]);
    return 2;
  }
  const int size = atoi(argv[1]);
  const size_t min_bytes = strtoull(argv[2], nullptr, 10), max_bytes = strtoull(argv[3], nullptr, 10);
  const int iters = atoi(argv[4]), warmup = atoi(argv[5]);
  if (size < 1 || min_bytes == 0 || iters < 1 || warmup < 0) {
    fprintf(stderr, "%s: bad arguments\n", argv[0]);
    return 2;
  }
  // A fresh rendezvous directory per run: stale keys from an earlier run would
  // hand out dead addresses.
  char dir[] = "/tmp/gloo_allreduce_XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    perror("mkdtemp");
    return 1;
  }

  // Fork before touching Gloo: its TCP device runs a thread, which fork would not copy.
  std::vector<pid_t> children;
  int rank = 0;
  for (int r = 1; r < size; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      break;  // the ranks already started fail at rendezvous, within the timeout
    }
    if (pid == 0) {
      rank = r;
      children.clear();
      break;
    }
    children.push_back(pid);
  }
  int rc = (rank == 0 && (int)children.size() != size - 1) ? 1 : 0;
  if (rc == 0) {
    try {
      rc = RunRank(rank, size, dir, min_bytes, max_bytes, iters, warmup);
    } catch (const std::exception& e) {
      fprintf(stderr, "gloo_allreduce rank %d: %s\n", rank, e.what());
      rc = 1;
    }
  }
  if (rank != 0) _exit(rc);  // skip the parent's cleanup and atexit handlers

  for (const pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  // The FileStore leaves one file per key; remove them and the directory.
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return rc;
}
