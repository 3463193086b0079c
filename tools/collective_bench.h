// collective_bench: the measurement loop and the nccl-tests-style report of
// //tools:collective_bench, as a library so its arithmetic is tested.
//
// One row per message size:
//   size(B) count type redop algo time(us) algbw(GB/s) busbw(GB/s) #wrong
// with nccl-tests' definitions: `size` is the bytes of the largest buffer of the
// call (all_reduce, broadcast, reduce: the vector; reduce_scatter, all_gather,
// all_to_all: the n blocks together); algbw = size / time; busbw = algbw times the
// collective's bus factor (all_reduce 2(n-1)/n; reduce_scatter, all_gather,
// all_to_all (n-1)/n; broadcast, reduce 1), which makes busbw comparable with the
// hardware's link bandwidth whatever the rank count. `time` is the slowest rank's
// mean over the timed iterations. The report closes with "# Avg bus bandwidth".
//
// Example (each rank, with its communicator):
//   BenchOptions options;   // all_reduce, f32, sum, 4 KiB .. 64 MiB
//   LOOM_ASSIGN_OR_RETURN(std::vector<BenchRow> rows, RunCollectiveBench(comm, options));
//   if (comm.rank() == 0) std::cout << FormatBenchTable(rows, comm.size(), options);
#ifndef LOOM_TOOLS_COLLECTIVE_BENCH_H_
#define LOOM_TOOLS_COLLECTIVE_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "core/byte_size.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {

struct BenchOptions {
  CollectiveKind op = CollectiveKind::kAllReduce;
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{64} << 20;
  int step_factor = 2;
  int iters = 20;
  // When > 0, each size runs more than `iters` calls where they take less than this
  // long: the count is sized from one timed call after the warm-up (the slowest
  // rank's), so small sizes are judged over many calls, not a few microseconds.
  double min_seconds = 0;
  int warmup = 5;
  bool check = false;
  bool in_place = false;
  int root = 0;
  // Inputs and outputs from Communicator::AllocateBuffer (comm_buffer.h): over shm
  // SharedBuffers, which the peers copy from by mapping them rather than with CMA.
  bool shared_buffers = false;
};

struct BenchRow {
  size_t bytes = 0;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp redop = ReduceOp::kSum;
  bool reduces = true;
  Algorithm algorithm = Algorithm::kRing;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = -1;  // -1: not checked
  int iters = 0;       // timed calls (at least BenchOptions::iters)
};

// The longest --min_time a size may ask for, and the most calls it may take for it.
inline constexpr double kMostMinSeconds = 60;
inline constexpr int kMostIters = 1'000'000;

// ItersForMinSeconds is how many calls fill `min_seconds` when one takes
// `call_seconds`: at least `iters`, at most kMostIters (a call measured as 0 s gets
// the most).
int ItersForMinSeconds(int iters, double min_seconds, double call_seconds);

// BusFactor returns nccl-tests' bus bandwidth factor of `op` on `ranks` ranks.
double BusFactor(CollectiveKind op, int ranks);

// ValidateBenchOptions checks `options` before any rank starts, for a run on `ranks`
// ranks (0: not known yet, as under an mpirun the user started) of which
// `ranks_per_host` share this machine's memory. InvalidArgument naming the flag and
// its value for --min_bytes 0, --max_bytes below --min_bytes, --step_factor below 2,
// --iters below 1, --warmup below 0, --min_time outside 0..kMostMinSeconds, --root outside [0, ranks), and for buffers (an
// input and an output of --max_bytes on every rank of the host) whose byte count
// overflows or passes this machine's physical memory.
absl::Status ValidateBenchOptions(const BenchOptions& options, int ranks, int ranks_per_host);

// RunCollectiveBench runs the sizes min_bytes, min_bytes * step_factor, ... up to
// max_bytes on every rank of `comm` (collectively). InvalidArgument for options that
// make no sizes or an op the bench does not drive; otherwise the communicator's error.
absl::StatusOr<std::vector<BenchRow>> RunCollectiveBench(Communicator& comm,
                                                         const BenchOptions& options);

// FormatBenchTable formats rows as nccl-tests does, with a header naming the
// transport-independent settings and the closing average bus bandwidth line.
std::string FormatBenchTable(const std::vector<BenchRow>& rows, int ranks,
                             const BenchOptions& options);
// FormatBenchJson formats rows as a JSON array of objects with the table's columns.
std::string FormatBenchJson(const std::vector<BenchRow>& rows, int ranks,
                            const BenchOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_COLLECTIVE_BENCH_H_
