// The job's steady state takes no page faults: under its allocator policy
// (malloc_policy.h) each step's temporaries land on pages an earlier step touched.
//
// In a process of its own, as //tools:train runs. Beside flat_memory_test's 8-rank
// job in one process it failed now and then on a loaded host (3 of about 45 runs
// with 3 copies and 2 busy loops on 2 cores; 4 to 32 faults a step): the rank
// thread's malloc arena reached a new top in attention's per-head temporaries at the
// third or fourth step. glibc hands a new thread an arena that an exited thread left,
// and those the earlier job's dozens of threads left settle more slowly. Alone, the
// same load gave no fault in 30 runs, nor in 72 runs of this job repeated in one
// process.
#include <cstdint>

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tools/training/malloc_policy.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

// Issue 56's model (hidden 256, 4 blocks, 128 tokens a sequence) on one rank with
// two threads, zero 0, f32: no page faults from the third step on (the job leaves
// the last one out). Other configurations keep a few (tools/docs/memory.md, "Page
// faults in the steady state"): with more thread ranks than cores OpenBLAS hands a
// new concurrent caller a packing buffer of its pool, touched on first use; and at
// zero 3 the engine's communication thread allocates beside the rank's, so a
// busy host's interleaving can find the heaps a new high-water mark now and then.
// One rank with two threads, f32, no offload, at `zero` and the model's size.
TrainJobOptions OneRank(int zero, int64_t hidden, int64_t layers, int64_t seq_len, int steps) {
  TrainJobOptions options;
  options.dp = 1;
  options.tp = 1;
  options.pp = 1;
  options.zero = zero;
  options.offload = OffloadKind::kNone;
  options.threads_per_rank = 2;
  options.model.vocab = 256;
  options.model.hidden = hidden;
  options.model.heads = 8;
  options.model.layers = layers;
  options.model.seq_len = seq_len;
  options.steps = steps;
  return options;
}

TEST(SteadyStateFaultsTest, TheSteadyStateTakesNoPageFaults) {
  ASSERT_TRUE(ReuseFreedMemory());
  const TrainJobOptions options = OneRank(/*zero=*/0, /*hidden=*/256, /*layers=*/4,
                                          /*seq_len=*/128, /*steps=*/6);
  absl::StatusOr<TrainSummary> summary = RunTrainJob(options, nullptr);
  LOOM_ASSERT_OK(summary.status());
  EXPECT_EQ(summary->page_faults_per_step, 0.0);
}

// ZeRO-3 with a bucket above glibc's largest heap block (32 MiB; a hidden-1024
// block is 12.6 M parameters, 50 MB in f32): the engine's reduce-scatter used to
// average each bucket into a fresh shard-sized vector, which malloc mapped, the
// zero fill faulted in and free unmapped again, every bucket of every step (12,300
// faults a step here; 393,664 at hidden 1024 with 8 blocks). It now averages in
// place, into the bucket's recycled buffer. The bound leaves room for the few
// faults a busy host's interleaving can still give the communication thread's heap
// (above), not for a bucket's worth.
TEST(SteadyStateFaultsTest, ZeroThreeBucketsAboveTheHeapLimitTakeNoFreshPages) {
  ASSERT_TRUE(ReuseFreedMemory());
  const TrainJobOptions options = OneRank(/*zero=*/3, /*hidden=*/1024, /*layers=*/1,
                                          /*seq_len=*/16, /*steps=*/5);
  absl::StatusOr<TrainSummary> summary = RunTrainJob(options, nullptr);
  LOOM_ASSERT_OK(summary.status());
  EXPECT_LT(summary->page_faults_per_step, 1000.0);
}

}  // namespace
}  // namespace loom
