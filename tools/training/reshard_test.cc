// --zero 3 --reshard block: the stage models borrow their weights from the ZeRO
// engines, which gather each unit (a block, the embeddings, the head) just before
// use and free it after, in every forward and backward.
//   - With the deferred reduce-scatter the job trains to exactly the bits of
//     --reshard step and of --zero 0 (two data-parallel ranks: an average is one
//     addition whatever the collective), in f32 and bf16, for 1F1B, interleaved
//     1F1B and ZB-V, and with the state checkpointed and resumed halfway.
//   - Reducing per microbatch stays within the one-rank reference bound.
//   - It holds less model state than --reshard step.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/training/internal/summary_testing.h"
#include "tools/training/reference.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using training_testing::ByName;

TrainJobOptions Small() {
  TrainJobOptions options;  // dp 2, tp 2, pp 2, 4 microbatches
  options.steps = 3;
  options.offload = OffloadKind::kNone;
  return options;
}

TEST(ReshardTest, DeferredBlockReshardIsBitwiseStepAndPlainDataParallel) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const PipelineScheduleKind schedule :
         {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kInterleaved1F1B,
          PipelineScheduleKind::kZeroBubbleV}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", PipelineScheduleName(schedule)));
      TrainJobOptions options = Small();
      options.dtype = dtype;
      options.schedule = schedule;
      options.zero = 0;
      LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
      options.zero = 3;
      options.reshard = Reshard::kStep;
      LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary step, RunTrainJob(options, nullptr));
      options.reshard = Reshard::kBlock;
      options.defer_reduce_scatter = true;
      LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary block, RunTrainJob(options, nullptr));
      EXPECT_EQ(ByName(block), ByName(plain));
      EXPECT_EQ(ByName(block), ByName(step));
      EXPECT_EQ(block.final_loss, plain.final_loss);
      std::printf("%s %s: model state per rank: zero 0 %lld, step %lld, block %lld bytes\n",
                  std::string(DTypeName(dtype)).c_str(),
                  std::string(PipelineScheduleName(schedule)).c_str(),
                  static_cast<long long>(plain.peak_model_state_bytes_per_rank),
                  static_cast<long long>(step.peak_model_state_bytes_per_rank),
                  static_cast<long long>(block.peak_model_state_bytes_per_rank));
    }
  }
}

// Each backward reduce-scatters its blocks: the microbatches' gradients are
// summed after the average instead of before, so the bits move, within the bound
// the default mesh keeps against one rank (1e-5 of the largest parameter).
TEST(ReshardTest, PerMicrobatchBlockReshardMatchesOneRank) {
  for (const PipelineScheduleKind schedule :
       {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZeroBubbleV}) {
    SCOPED_TRACE(PipelineScheduleName(schedule));
    TrainJobOptions options = Small();
    options.steps = 6;
    options.schedule = schedule;
    options.reshard = Reshard::kBlock;
    options.recompute = Recompute::kFull;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
    LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                              CompareWithReference(options, summary));
    EXPECT_GT(reference.max_abs_param, 0.01);
    EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
    EXPECT_NEAR(reference.reference_final_loss, summary.final_loss, 1e-4);
  }
}

// The data-parallel communicator's counters for one step equal each mode's
// formula exactly (tools/docs/memory.md, "Reshard"), per rank, with U the padded bucket
// elements of the rank's engine, P its persistent elements (units below
// --persist_below: here the embeddings and the final norm with the head), m
// microbatches, r the forwards the stage module ran again (0: every microbatch
// keeps its own context for its backward), b bytes per gathered element
// (f32 4, bf16 2; gradients travel as f32) and q = (dp - 1) / dp:
//   zero 0            all-reduce of the whole gradient (dp 2: 4 Psi bytes), one call
//                     per unit of the stage model (overlapped with the backward), or
//                     1 call with --overlap_grad_reduce=false
//   step              all-gather b U q once (the stage is one unit, gathered at the
//                     first forward and handed over to every later pass: K is
//                     (2 m + r - 1) U), reduce-scatter 4 U q once, 1 all-reduce
//   block             all-gather (2 m + r) b U q (each forward, recomputed ones
//                     included, and each backward) less b K q, reduce-scatter
//                     m 4 U q, m all-reduces of P
//   block, deferred   all-gather ((2 m + r) U - K) b q, reduce-scatter 4 U q, 1
//                     all-reduce
// where K is the elements of the units a pass took over still gathered from the
// pass before (the engine's last window: prefetch depth + 1 units). With pp 1
// the passes alternate forward and backward, and each of the 2 m - 1 changes
// hands 3 units over. With dp 2 every all-reduce algorithm sends each element
// once: 4 P bytes a call.
// One stage model per rank (1f1b); with several (interleaved, zb-v) the same holds
// per model.
TEST(ReshardTest, TrafficEqualsEachModesFormula) {
  struct Case {
    int dp, pp;
    PipelineScheduleKind schedule;
    DType dtype;
  };
  for (const Case& c : {Case{2, 2, PipelineScheduleKind::k1F1B, DType::kF32},
                        Case{2, 1, PipelineScheduleKind::k1F1B, DType::kBF16},
                        Case{4, 1, PipelineScheduleKind::k1F1B, DType::kF32}}) {
    TrainJobOptions options = Small();
    options.steps = 2;
    options.dp = c.dp;
    options.pp = c.pp;
    options.tp = 1;
    options.schedule = c.schedule;
    options.dtype = c.dtype;
    // The embeddings (24,576 bytes) and the head unit (16,896) stay whole.
    options.persist_below_bytes = 32 << 10;
    const int64_t m = options.microbatches;
    const int64_t b = c.dtype == DType::kBF16 ? 2 : 4;
    const auto q = [&](int64_t bytes) { return bytes * (c.dp - 1) / c.dp; };
    for (int mode = -1; mode < 4; ++mode) {
      SCOPED_TRACE(absl::StrCat("dp ", c.dp, " pp ", c.pp, " ", PipelineScheduleName(c.schedule),
                                " ", DTypeName(c.dtype), " mode ", mode));
      // Mode -1: zero 0 without the overlap.
      options.zero = mode <= 0 ? 0 : 3;
      options.overlap_grad_reduce = mode == 0;
      options.reshard = mode == 1 ? Reshard::kStep : Reshard::kAuto;
      options.defer_reduce_scatter = mode == 3;
      if (mode <= 0 && c.dtype == DType::kBF16) continue;  // bf16 needs zero 1-3
      LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
      const DpTraffic& t = summary.dp_traffic;
      const int64_t u = t.zero_bucket_numel, p = t.zero_persistent_numel;
      if (mode <= 0) {
        // The stage model's units: the embeddings, its blocks, the head unit.
        const int64_t units = (c.pp == 1 ? 2 : 1) + options.model.layers / c.pp;
        EXPECT_EQ(t.zero_units, units);
        EXPECT_EQ(t.all_reduce_calls, mode == 0 ? units : 1);
        EXPECT_EQ(t.all_gather_calls + t.reduce_scatter_calls, 0);
        if (c.dp == 2) {
          int64_t psi = 0;
          for (const auto& v : summary.final_params[0].values) {
            psi += static_cast<int64_t>(v.size());
          }
          EXPECT_EQ(t.all_reduce_bytes, 4 * psi);
        }
        continue;
      }
      ASSERT_GT(u, 0);
      ASSERT_GT(p, 0);
      EXPECT_EQ(t.recomputed_forwards, 0);
      const int64_t gathers = 2 * m + t.recomputed_forwards;
      const int64_t reductions = mode == 2 ? m : 1;
      const int64_t all_reduces = reductions;
      // Step mode: one unit per stage model, gathered once per step; every pass
      // after the first takes it over.
      if (mode == 1) {
        EXPECT_EQ(t.all_gather_calls, t.zero_units);
        EXPECT_EQ(t.zero_kept_units, (gathers - 1) * t.zero_units);
      }
      if (mode > 1 && c.pp == 1) {
        ASSERT_GT(t.zero_units, 3);
        EXPECT_EQ(t.zero_kept_units, (2 * m - 1) * 3);
      }
      if (mode > 1) {
        EXPECT_GT(t.zero_kept_numel, 0);
      }
      EXPECT_EQ(t.all_gather_calls, gathers * t.zero_units - t.zero_kept_units);
      EXPECT_EQ(t.all_gather_bytes, q(b * (gathers * u - t.zero_kept_numel)));
      EXPECT_EQ(t.reduce_scatter_bytes, reductions * q(4 * u));
      EXPECT_EQ(t.all_reduce_calls, all_reduces);
      if (c.dp == 2) {
        EXPECT_EQ(t.all_reduce_bytes, all_reduces * 4 * p);
      }
      // Every backward (or the deferred pass) reduces every unit once.
      EXPECT_EQ(t.reduce_scatter_calls, reductions * t.zero_units);
    }
  }
}

TEST(ReshardTest, BlockReshardNeedsAZeroEngine) {
  TrainJobOptions options = Small();
  options.zero = 0;
  options.reshard = Reshard::kBlock;
  EXPECT_THAT(RunTrainJob(options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--reshard block needs --zero 1, 2 or 3")));
  options.zero = 3;
  options.reshard = Reshard::kStep;
  options.defer_reduce_scatter = true;
  EXPECT_THAT(RunTrainJob(options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--defer_reduce_scatter")));
}

}  // namespace
}  // namespace loom
