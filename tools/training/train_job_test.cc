#include "tools/training/train_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/sanitizers.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/training/internal/summary_testing.h"
#include "tools/training/reference.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using training_testing::ByName;

TrainJobOptions Small(int64_t steps) { return training_testing::SmallJob(steps); }
TrainJobOptions SmallPlain(int64_t steps) { return training_testing::SmallPlainJob(steps); }

// The default mesh learns, and ends where one rank training the same model on
// the same global batch ends: within 1e-5 of the largest parameter.
TEST(TrainJobTest, DefaultMeshLearnsAndMatchesOneRank) {
  const TrainJobOptions options = Small(12);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  ASSERT_EQ(summary.steps.size(), 12u);
  EXPECT_LT(summary.final_loss, summary.steps.front().loss - 0.3);
  EXPECT_NEAR(summary.uniform_loss, std::log(64.0), 1e-12);
  EXPECT_GT(summary.sharded_state_bytes_per_rank, 0);
  EXPECT_GT(summary.peak_model_state_bytes_per_rank, summary.sharded_state_bytes_per_rank);
  EXPECT_GT(summary.comm_bytes_per_rank_per_step, 0);
  EXPECT_EQ(summary.final_params.size(), 8u);
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, summary));
  EXPECT_GT(reference.max_abs_param, 0.01);
  EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
  EXPECT_NEAR(reference.reference_final_loss, summary.final_loss, 1e-4);
}

using training_testing::RankValues;

// With two data-parallel ranks an average is one addition whatever the algorithm,
// so every ZeRO stage (reduce-scatter of shards, with or without the state on
// disk) and plain data parallelism (all-reduce) step to the same bits (zero 3's
// default block reshard with its reduce-scatter deferred to the step's end, which
// sums the microbatches before averaging, as zero 0 does). The engine's state
// shrinks with each stage; the state on disk leaves memory.
TEST(TrainJobTest, EveryZeroStageAndPlainDataParallelAgreeBitwise) {
  TrainJobOptions options = SmallPlain(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  int64_t previous = 0;
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    options.zero = zero;
    options.defer_reduce_scatter = zero == 3;
    options.offload = OffloadKind::kCpu;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary sharded, RunTrainJob(options, nullptr));
    EXPECT_EQ(RankValues(sharded), RankValues(plain));
    EXPECT_EQ(sharded.final_loss, plain.final_loss);
    EXPECT_EQ(sharded.disk_state_bytes_per_rank, 0);
    if (zero > 1) {
      EXPECT_LT(sharded.sharded_state_bytes_per_rank, previous);
    }
    previous = sharded.sharded_state_bytes_per_rank;
    options.offload = OffloadKind::kNvme;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary nvme, RunTrainJob(options, nullptr));
    EXPECT_EQ(RankValues(nvme), RankValues(plain));
    EXPECT_GT(nvme.disk_state_bytes_per_rank, 0);
    EXPECT_EQ(nvme.sharded_state_bytes_per_rank,
              sharded.sharded_state_bytes_per_rank - nvme.disk_state_bytes_per_rank);
  }
  // ZeRO-3 keeps less than plain data parallelism's whole state.
  EXPECT_LT(previous, plain.peak_model_state_bytes_per_rank);
  // Parameters on NVMe too (--offload_params nvme): the same bits again; the
  // parameter shards (4 bytes per sharded element in f32) leave memory for the
  // disk, and a budget of one unit bounds the gathered bytes.
  options.offload_params = OffloadKind::kNvme;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary params_too, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(params_too), RankValues(plain));
  // The job's own check against one rank runs with parameters offloaded (its
  // reference is plain one-rank training whatever the placement).
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, params_too));
  EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
  options.offload_params = OffloadKind::kNone;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary optimizer_only, RunTrainJob(options, nullptr));
  const int64_t moved =
      params_too.disk_state_bytes_per_rank - optimizer_only.disk_state_bytes_per_rank;
  EXPECT_GT(moved, 0);
  EXPECT_EQ(params_too.sharded_state_bytes_per_rank,
            optimizer_only.sharded_state_bytes_per_rank - moved);
  EXPECT_EQ(moved, optimizer_only.disk_state_bytes_per_rank / 2);  // m and v: 8 bytes
  // Gradients on NVMe too (--offload_grads nvme): the same bits; the gradient
  // shards (4 bytes per sharded element in f32, as many as the parameters')
  // leave memory for the disk, less one staging shard.
  options.offload_params = OffloadKind::kNvme;
  options.offload_grads = OffloadKind::kNvme;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary grads_too, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(grads_too), RankValues(plain));
  EXPECT_EQ(grads_too.disk_state_bytes_per_rank,
            params_too.disk_state_bytes_per_rank + moved);
  EXPECT_LT(grads_too.peak_model_state_bytes_per_rank,
            params_too.peak_model_state_bytes_per_rank);
  options.offload_grads = OffloadKind::kNone;
  options.offload_params = OffloadKind::kNone;
}

// The one-rank reference takes the mathematics of a run (model, data, batch,
// optimizer) and none of its placement: a job with every placement, memory and
// restart option away from its default has the reference of a job with none.
TEST(TrainJobTest, TheReferenceIgnoresEveryPlacementOption) {
  TrainJobOptions plain = Small(3);
  plain.lr = 1e-3f;
  plain.clip_grad_norm = 0.5f;
  TrainJobOptions placed = plain;
  placed.zero = 3;
  placed.offload = OffloadKind::kNvme;
  placed.offload_params = OffloadKind::kNvme;
  placed.offload_grads = OffloadKind::kNvme;
  placed.param_budget = 1 << 20;
  placed.prefetch_depth = 5;
  placed.reshard = Reshard::kBlock;
  placed.defer_reduce_scatter = true;
  placed.nvme_dir = "/nonexistent";
  placed.recompute = Recompute::kFull;
  placed.schedule = PipelineScheduleKind::kZeroBubbleV;
  placed.adamw_threads = 7;
  placed.checkpoint_dir = "/nonexistent";
  placed.checkpoint_every = 1;
  placed.resume_dir = "/nonexistent";
  placed.testing_halt_after_step = 1;
  const TrainJobOptions a = ReferenceOptions(plain), b = ReferenceOptions(placed);
  for (const TrainJobOptions* one : {&a, &b}) {
    EXPECT_EQ(one->dp * one->pp * one->tp, 1);
    EXPECT_EQ(one->zero, 0);
    EXPECT_EQ(one->offload_params, OffloadKind::kNone);
    EXPECT_EQ(one->offload_grads, OffloadKind::kNone);
    EXPECT_EQ(one->param_budget, 0);
    EXPECT_TRUE(one->checkpoint_dir.empty() && one->resume_dir.empty());
    EXPECT_EQ(one->testing_halt_after_step, 0);
    EXPECT_EQ(one->microbatches, plain.microbatches * plain.dp);
    EXPECT_EQ(one->lr, 1e-3f);
    EXPECT_EQ(one->clip_grad_norm, 0.5f);
  }
  EXPECT_EQ(b.nvme_dir, a.nvme_dir);
  EXPECT_EQ(b.prefetch_depth, a.prefetch_depth);
  EXPECT_EQ(b.recompute, a.recompute);
  EXPECT_EQ(b.adamw_threads, a.adamw_threads);
  EXPECT_EQ(b.defer_reduce_scatter, a.defer_reduce_scatter);
}

// At zero 1 and 2 the models borrow the engine's whole weights in both reshard
// modes (the weights are held once, by the engine): step and block with the
// reduce-scatter deferred keep the gradients in the model and have the bits of
// plain data parallelism, and step holds exactly what deferred block holds (the
// engine gathers nothing at these stages, so the window does not matter); block
// handing each microbatch's gradients to the engine holds less than zero 0.
TEST(TrainJobTest, StagesOneAndTwoBorrowTheEnginesWeights) {
  TrainJobOptions options = SmallPlain(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  options.offload = OffloadKind::kCpu;
  for (const int zero : {1, 2}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    options.zero = zero;
    options.reshard = Reshard::kStep;
    options.defer_reduce_scatter = false;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary step, RunTrainJob(options, nullptr));
    options.reshard = Reshard::kBlock;
    options.defer_reduce_scatter = true;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary deferred, RunTrainJob(options, nullptr));
    EXPECT_EQ(RankValues(deferred), RankValues(plain));
    EXPECT_EQ(RankValues(step), RankValues(plain));
    EXPECT_EQ(step.peak_model_state_bytes_per_rank, deferred.peak_model_state_bytes_per_rank);
    options.defer_reduce_scatter = false;  // each microbatch's gradients to the engine
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary per_microbatch, RunTrainJob(options, nullptr));
    EXPECT_LT(per_microbatch.peak_model_state_bytes_per_rank,
              deferred.peak_model_state_bytes_per_rank);
    EXPECT_LT(per_microbatch.peak_model_state_bytes_per_rank,
              plain.peak_model_state_bytes_per_rank);
    EXPECT_NEAR(per_microbatch.final_loss, plain.final_loss, 1e-4);
  }
}

// --param_budget bounds the gathered parameter bytes (the peak model state drops
// by the units it no longer prefetches, and the bits stay); a budget below one
// unit is ResourceExhausted naming the unit's parameters.
TEST(TrainJobTest, ParameterBudgetBoundsTheGatheredUnits) {
  TrainJobOptions options = Small(2);
  options.tp = 1;
  options.pp = 1;
  options.zero = 3;
  options.offload = OffloadKind::kNone;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary free, RunTrainJob(options, nullptr));
  options.param_budget = 1;
  const absl::StatusOr<TrainSummary> refused = RunTrainJob(options, nullptr);
  EXPECT_THAT(refused,
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("Zero3Engine rank "), HasSubstr("parameter \"blocks."),
                             HasSubstr("the budget (max_live_gathered_bytes) is 1"))));
  // A budget of exactly the one unit the message says it needs.
  const std::string message(refused.status().message());
  const size_t at = message.find(") needs ");
  ASSERT_NE(at, std::string::npos) << message;
  ASSERT_TRUE(absl::SimpleAtoi(
      message.substr(at + 8, message.find(' ', at + 8) - (at + 8)), &options.param_budget))
      << message;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary bounded, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(bounded), RankValues(free));
  EXPECT_LT(bounded.peak_model_state_bytes_per_rank, free.peak_model_state_bytes_per_rank);
}

// topology/memory_estimate's model-state bytes beside the measured peak (memory
// and disk) agree within 10% on every ZeRO stage and reshard mode, in f32 and
// bf16: the estimate counts the engine's buffers (gathered units, gradient
// buffers) and what the layers keep themselves (whole weights and gradients at
// --reshard step, the gradient sums when the reduce-scatter is deferred).
TEST(TrainJobTest, ModelStateEstimateBesideTheMeasurement) {
  struct Mode {
    int zero;
    Reshard reshard;
    bool defer;
    OffloadKind offload;
  };
  const Mode modes[] = {
      {0, Reshard::kAuto, false, OffloadKind::kNone},
      {1, Reshard::kAuto, false, OffloadKind::kCpu},
      {2, Reshard::kAuto, false, OffloadKind::kCpu},
      {1, Reshard::kBlock, false, OffloadKind::kCpu},
      {2, Reshard::kBlock, true, OffloadKind::kNvme},
      {3, Reshard::kStep, false, OffloadKind::kCpu},
      {3, Reshard::kBlock, false, OffloadKind::kNvme},
      {3, Reshard::kBlock, true, OffloadKind::kNone},
  };
  // Under ThreadSanitizer f32 only: bf16 runs the same threads (and every mode here
  // under AddressSanitizer and in the suite).
  const std::vector<DType> dtypes = kThreadSanitizer ? std::vector<DType>{DType::kF32}
                                                     : std::vector<DType>{DType::kF32, DType::kBF16};
  for (const DType dtype : dtypes) {
    for (const Mode& mode : modes) {
      TrainJobOptions options = Small(2);
      options.dtype = dtype;
      options.zero = mode.zero;
      options.reshard = mode.reshard;
      options.defer_reduce_scatter = mode.defer;
      options.offload = mode.offload;
      const std::string what =
          absl::StrCat(DTypeName(dtype), " zero ", mode.zero, " reshard ",
                       ReshardName(EffectiveReshard(options)), mode.defer ? " deferred" : "",
                       " offload ", OffloadName(mode.offload));
      SCOPED_TRACE(what);
      LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
      const int64_t measured =
          summary.peak_model_state_bytes_per_rank + summary.disk_state_bytes_per_rank;
      const double ratio =
          static_cast<double>(measured) / summary.estimated_model_state_bytes_per_rank;
      std::printf("%s: measured %lld, estimated %lld (%.3f)\n", what.c_str(),
                  static_cast<long long>(measured),
                  static_cast<long long>(summary.estimated_model_state_bytes_per_rank), ratio);
      EXPECT_NEAR(ratio, 1.0, 0.10);
    }
  }
}

// bf16 with plain data parallelism rounds the averaged gradient once to bf16 and
// keeps an f32 master, as the ZeRO engine does, so it steps to ZeRO-3's bits (its
// products multiply the store's bf16 copy of the weights, ZeRO-3's the rounding of the
// gathered f32 values: the same numbers); its state is 22 bytes per element (weights
// and gradients 8, the weights' bf16 copy 2, master 4, moments 8) against f32's 16.
TEST(TrainJobTest, Bf16PlainDataParallelEqualsZero3Bitwise) {
  TrainJobOptions options = SmallPlain(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary f32, RunTrainJob(options, nullptr));
  options.dtype = DType::kBF16;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  options.zero = 3;
  options.defer_reduce_scatter = true;  // the microbatches summed before the average
  options.offload = OffloadKind::kCpu;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary zero3, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(plain), RankValues(zero3));
  EXPECT_EQ(plain.final_loss, zero3.final_loss);
  EXPECT_NE(RankValues(plain), RankValues(f32));
  EXPECT_EQ(plain.peak_model_state_bytes_per_rank * 16, f32.peak_model_state_bytes_per_rank * 22);
}

// Recomputing activations drops them in forward and gives the same gradients.
TEST(TrainJobTest, FullRecomputeHoldsLessAndChangesNothing) {
  TrainJobOptions options = Small(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary none, RunTrainJob(options, nullptr));
  options.recompute = Recompute::kFull;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary full, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(none), RankValues(full));
  EXPECT_LT(full.peak_activation_bytes_per_rank, none.peak_activation_bytes_per_rank);
  // topology/memory_estimate's fused-attention estimate, walked over the schedule, is
  // exact for both (dp 2, tp 2, pp 2, 1F1B: stage 0 holds 2 microbatches' contexts).
  EXPECT_EQ(none.estimated_activation_bytes_per_rank, none.peak_activation_bytes_per_rank);
  EXPECT_EQ(full.estimated_activation_bytes_per_rank, full.peak_activation_bytes_per_rank);
}

TEST(TrainJobTest, Bf16AndInterleavedTrain) {
  TrainJobOptions options = Small(8);
  options.dtype = DType::kBF16;
  options.schedule = PipelineScheduleKind::kInterleaved1F1B;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  EXPECT_LT(summary.final_loss, summary.steps.front().loss - 0.2);
  // The one-rank reference trains in bf16 too (plain, with its f32 master).
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, summary));
  EXPECT_NEAR(reference.reference_final_loss, summary.final_loss, 0.05);
  // Measured 7.6e-3: 2^-7, one bf16 step of a parameter near 1 (the largest is 1.02)
  // rounded the other way, now that the products round their inputs to bf16 too and
  // the meshes' different f32 sums can tip a rounding (2.4e-4 when they multiplied in
  // f32). The same with oneDNN and with the OpenBLAS fallback.
  EXPECT_LT(reference.max_abs_param_diff, 0.01 * reference.max_abs_param);
}

// The zero-bubble schedules split each backward into its input part (I) and its
// weight part (W), run later; every stage still adds its microbatches' weight
// gradients in ascending order, so ZB-H1 (1F1B's stages) and ZB-V (two stages per
// rank, in a V) train to 1F1B's bits on the default mesh (dp 2, tp 2, pp 2,
// ZeRO-3). W's pending inputs are counted in the peak activations.
TEST(TrainJobTest, ZeroBubbleSchedulesTrainToOneFOneBsBits) {
  TrainJobOptions options = Small(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary one_f_one_b, RunTrainJob(options, nullptr));
  for (const PipelineScheduleKind kind :
       {PipelineScheduleKind::kZeroBubbleH1, PipelineScheduleKind::kZeroBubbleV}) {
    SCOPED_TRACE(std::string(PipelineScheduleName(kind)));
    options.schedule = kind;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary zb, RunTrainJob(options, nullptr));
    EXPECT_EQ(ByName(zb), ByName(one_f_one_b));
    EXPECT_EQ(zb.final_loss, one_f_one_b.final_loss);
    EXPECT_GT(zb.peak_activation_bytes_per_rank, 0);
    std::printf("%s: peak activations %lld bytes per rank (1f1b %lld)\n",
                std::string(PipelineScheduleName(kind)).c_str(),
                static_cast<long long>(zb.peak_activation_bytes_per_rank),
                static_cast<long long>(one_f_one_b.peak_activation_bytes_per_rank));
    // The schedule-walked estimate holds the weight works between each I and W.
    EXPECT_EQ(zb.estimated_activation_bytes_per_rank, zb.peak_activation_bytes_per_rank);
    // With full recompute too: each block is recomputed on top of the works of the
    // blocks after it; the same bits.
    options.recompute = Recompute::kFull;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary full, RunTrainJob(options, nullptr));
    EXPECT_EQ(ByName(full), ByName(one_f_one_b));
    EXPECT_EQ(full.estimated_activation_bytes_per_rank, full.peak_activation_bytes_per_rank);
    options.recompute = Recompute::kNone;
  }
}

TEST(TrainJobTest, BadOptionsAreOneClearLine) {
  TrainJobOptions options = Small(1);
  options.pp = 3;
  options.model.layers = 2;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers 2 is fewer than the 3 pipeline stages (--pp 3)")));
  options = Small(1);
  options.microbatches = 1;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--microbatches 1 is fewer than --pp 2")));
  options = Small(1);
  options.tp = 3;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model: ")));
  options = Small(1);
  options.zero = 4;
  EXPECT_THAT(ValidateTrainJob(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("--zero 4 must be 0, 1, 2 or 3")));
  options = Small(1);
  options.cp = 0;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--dp 2 --pp 2 --cp 0 --tp 2: each must be >= 1")));
  options = Small(1);
  options.cp = 4;
  options.model.seq_len = 3;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--seq_len 3 is shorter than --cp 4: every cp rank needs a "
                                 "position")));
  options = Small(1);
  options.cp = 16;  // 2 x 2 x 16 x 2 = 128 ranks
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--dp 2 x --pp 2 x --cp 16 x --tp 2 = 128 thread ranks; at "
                                 "most 64")));
  options = Small(1);
  options.zero = 0;
  options.offload = OffloadKind::kNvme;
  EXPECT_THAT(ValidateTrainJob(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("--offload nvme needs --zero")));
  options = Small(1);
  options.offload = OffloadKind::kNvme;
  options.nvme_dir = "/nonexistent/loom";
  EXPECT_THAT(RunTrainJob(options, nullptr),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("--nvme_dir: ")));
  options = Small(1);
  options.schedule = PipelineScheduleKind::kZeroBubbleV;
  options.model.layers = 3;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers 3 is fewer than the 4 pipeline stages (--pp 2 x 2 "
                                 "stages per rank for zb-v)")));
}

// Layers that do not divide the stages are balanced (the inner stages take the
// extra ones: StageLayout::WithBalancedLayers) and train to the one-rank
// reference: 5 layers over 1F1B's 2 stages (3 + 2), 6 over interleaved 1F1B's 4
// (1 + 2 + 2 + 1), 5 over zb-v's 4 (1 + 2 + 1 + 1). The activation estimate
// follows the uneven stages exactly.
TEST(TrainJobTest, UnevenLayersMatchOneRank) {
  struct Case {
    PipelineScheduleKind schedule;
    int64_t layers;
  };
  for (const Case& c : {Case{PipelineScheduleKind::k1F1B, 5},
                        Case{PipelineScheduleKind::kInterleaved1F1B, 6},
                        Case{PipelineScheduleKind::kZeroBubbleV, 5}}) {
    SCOPED_TRACE(absl::StrCat(PipelineScheduleName(c.schedule), " layers ", c.layers));
    TrainJobOptions options = Small(3);
    options.schedule = c.schedule;
    options.model.layers = c.layers;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
    LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                              CompareWithReference(options, summary));
    EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
    EXPECT_EQ(summary.estimated_activation_bytes_per_rank, summary.peak_activation_bytes_per_rank);
  }
}

// Global-norm clipping counts every element of the model once across tp (its
// replicated parameters on one rank), pp and dp, so the mesh clips exactly as one
// rank does: the result matches the one-rank reference with clipping, and the
// clipping was active (every step's norm above the bound, the end far from the
// unclipped run's).
TEST(TrainJobTest, ClippingMatchesTheOneRankReference) {
  for (const int zero : {3, 0}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    TrainJobOptions options = Small(6);
    options.zero = zero;
    options.offload = zero == 0 ? OffloadKind::kNone : OffloadKind::kCpu;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary free, RunTrainJob(options, nullptr));
    options.clip_grad_norm = 0.5f;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary clipped, RunTrainJob(options, nullptr));
    for (const StepReport& step : clipped.steps) EXPECT_GT(step.grad_norm, 0.5) << step.step;
    LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                              CompareWithReference(options, clipped));
    EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
    double moved = 0;
    const auto a = RankValues(free), b = RankValues(clipped);
    for (size_t i = 0; i < a.size(); ++i) {
      for (size_t k = 0; k < a[i].size(); ++k) {
        moved =
            std::max(moved, std::fabs(static_cast<double>(a[i][k]) - static_cast<double>(b[i][k])));
      }
    }
    EXPECT_GT(moved, 1e-3 * reference.max_abs_param) << "clipping changed nothing";
    // The norm itself, step by step, against one rank's: an element counted twice
    // (a tp-replicated parameter, a dp copy) or missed would show here.
    TrainJobOptions one = options;
    one.dp = one.tp = one.pp = 1;
    one.zero = 0;
    one.offload = OffloadKind::kNone;
    one.microbatches = options.microbatches * options.dp;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary single, RunTrainJob(one, nullptr));
    for (size_t k = 0; k < single.steps.size(); ++k) {
      EXPECT_NEAR(clipped.steps[k].grad_norm, single.steps[k].grad_norm,
                  1e-5 * single.steps[k].grad_norm)
          << "step " << k + 1;
    }
  }
}

// --eval_every: the held-out loss on the steps asked for (and the last), the same
// on every mesh up to rounding, and training unchanged by it (bitwise).
TEST(TrainJobTest, EvaluationIsTheSameOnEveryMeshAndLeavesTrainingAlone) {
  TrainJobOptions options = Small(5);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  options.eval_every = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary evaluated, RunTrainJob(options, nullptr));
  EXPECT_EQ(RankValues(evaluated), RankValues(plain));
  ASSERT_EQ(evaluated.steps.size(), 5u);
  for (const StepReport& step : evaluated.steps) {
    EXPECT_EQ(step.eval_loss.has_value(), step.step % 2 == 0 || step.step == 5) << step.step;
    EXPECT_EQ(step.loss, plain.steps[static_cast<size_t>(step.step - 1)].loss);
  }
  ASSERT_TRUE(evaluated.final_eval_loss.has_value());
  EXPECT_GT(*evaluated.final_eval_loss, 0.5);
  EXPECT_LT(*evaluated.final_eval_loss, evaluated.uniform_loss);
  // One rank, the same global batch: the same held-out sequences.
  TrainJobOptions one = options;
  one.dp = one.tp = one.pp = 1;
  one.microbatches = options.microbatches * options.dp;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary single, RunTrainJob(one, nullptr));
  for (size_t k = 0; k < single.steps.size(); ++k) {
    ASSERT_EQ(single.steps[k].eval_loss.has_value(), evaluated.steps[k].eval_loss.has_value());
    if (!single.steps[k].eval_loss.has_value()) continue;
    EXPECT_NEAR(*single.steps[k].eval_loss, *evaluated.steps[k].eval_loss, 1e-4);
  }
}

}  // namespace
}  // namespace loom
