#include "tools/planner/search.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/planner/device.h"
#include "tools/planner/memory_model.h"
#include "tools/planner/step_model.h"

namespace loom {
namespace planner {
namespace {

using ::testing::HasSubstr;

// A 1.3B-class GPT on 16 A100s: small enough to simulate every candidate.
PlanRequest SmallRequest() {
  PlanRequest req;
  req.shape.layers = 24;
  req.shape.hidden = 2048;
  req.shape.heads = 16;
  req.shape.seq_len = 2048;
  req.shape.vocab = 51200;
  req.global_batch = 64;
  req.world = 16;
  req.gpus_per_node = 8;
  req.device = *FindDevice("a100-80gb");
  req.max_microbatch_size = 4;
  req.max_virtual_stages = 3;
  return req;
}

TEST(SearchTest, RankingEqualsSimulatingEveryCandidate) {
  PlanRequest req = SmallRequest();
  req.keep = 1000000;  // every fitting candidate simulated and ranked
  LOOM_ASSERT_OK_AND_ASSIGN(const PlanResult all, Plan(req));
  ASSERT_GT(all.ranked.size(), 50u);
  EXPECT_EQ(all.simulated, static_cast<int64_t>(all.ranked.size()));
  EXPECT_EQ(all.enumerated - all.too_large, static_cast<int64_t>(all.ranked.size()));
  for (size_t i = 1; i < all.ranked.size(); ++i) {
    EXPECT_LE(all.ranked[i - 1].prediction.step_seconds, all.ranked[i].prediction.step_seconds);
  }
  // The pruned search (simulating only candidates whose bound can still rank) gives
  // the same top ten, and simulates fewer.
  req.keep = 10;
  LOOM_ASSERT_OK_AND_ASSIGN(const PlanResult top, Plan(req));
  ASSERT_EQ(top.ranked.size(), 10u);
  EXPECT_LT(top.simulated, all.simulated);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_DOUBLE_EQ(top.ranked[i].prediction.step_seconds, all.ranked[i].prediction.step_seconds);
  }
  // Every bound is at most its simulated step.
  for (const Candidate& c : all.ranked) {
    StepInput in;
    in.shape = req.shape;
    in.global_batch = req.global_batch;
    in.device = req.device;
    in.gpus_per_node = req.gpus_per_node;
    in.config = c.config;
    LOOM_ASSERT_OK_AND_ASSIGN(const double bound, StepLowerBound(in));
    EXPECT_LE(bound, c.prediction.step_seconds * (1 + 1e-12)) << c.config.ToString();
  }
}

TEST(SearchTest, FixedChoicesAreHonoured) {
  PlanRequest req = SmallRequest();
  req.fixed.tp = 4;
  req.fixed.pp = 2;
  req.fixed.zero = 1;
  req.fixed.recompute = Recompute::kSelective;
  req.fixed.schedule = PipelineScheduleKind::kZeroBubbleH1;
  LOOM_ASSERT_OK_AND_ASSIGN(const PlanResult plan, Plan(req));
  ASSERT_FALSE(plan.ranked.empty());
  for (const Candidate& c : plan.ranked) {
    EXPECT_EQ(c.config.tp, 4);
    EXPECT_EQ(c.config.pp, 2);
    EXPECT_EQ(c.config.dp * c.config.cp, 2);
    EXPECT_EQ(c.config.zero, 1);
    EXPECT_EQ(c.config.recompute, Recompute::kSelective);
    EXPECT_EQ(c.config.schedule, PipelineScheduleKind::kZeroBubbleH1);
  }
}

TEST(SearchTest, WhatDoesNotFitIsDroppedAndCounted) {
  PlanRequest req = SmallRequest();
  req.device.memory_bytes = 12e9;
  LOOM_ASSERT_OK_AND_ASSIGN(const PlanResult plan, Plan(req));
  EXPECT_GT(plan.too_large, 0);
  for (const Candidate& c : plan.ranked) EXPECT_LE(c.memory.total(), 12e9);
}

TEST(SearchTest, MemoryFollowsTheZeroStages) {
  StepInput in;
  in.shape = SmallRequest().shape;
  in.global_batch = 64;
  in.device = *FindDevice("a100-80gb");
  in.config.dp = 8;
  in.config.tp = 2;
  double previous = 1e30;
  for (int zero = 0; zero <= 3; ++zero) {
    in.config.zero = zero;
    LOOM_ASSERT_OK_AND_ASSIGN(const MemoryEstimate m, MemoryPerDevice(in));
    EXPECT_LT(m.model_states, previous) << zero;
    previous = m.model_states;
  }
  // ZeRO-0, mixed precision: 16 bytes per local parameter.
  in.config.zero = 0;
  LOOM_ASSERT_OK_AND_ASSIGN(const MemoryEstimate m, MemoryPerDevice(in));
  EXPECT_NEAR(m.model_states, 16 * ParameterCount(in.shape) / 2, 64);
}

TEST(SearchTest, BadRequestsNameTheValue) {
  PlanRequest req = SmallRequest();
  req.world = 0;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 0 devices")));
  req = SmallRequest();
  req.shape.heads = 30;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("heads 30 do not divide hidden 2048")));
  req = SmallRequest();
  req.fixed.tp = 3;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("tp=3 does not divide the 16 devices")));
  req = SmallRequest();
  req.world = 24;
  req.fixed.tp = 3;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("tp=3 does not divide the 16 heads")));
  req = SmallRequest();
  req.device.memory_bytes = 1e9;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("the model fits nowhere on 16 x a100-80gb")));
  req = SmallRequest();
  req.global_batch = 0;
  EXPECT_THAT(Plan(req), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("global batch 0")));
}

TEST(SearchTest, PredictStepChecksItsInput) {
  StepInput in;
  in.shape = SmallRequest().shape;
  in.global_batch = 64;
  in.device = *FindDevice("a100-80gb");
  in.config.dp = 3;
  EXPECT_THAT(PredictStep(in), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("global batch 64 does not split")));
  in.config.dp = 1;
  in.config.pp = 2;
  in.config.schedule = PipelineScheduleKind::kInterleaved1F1B;
  EXPECT_THAT(PredictStep(in), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("needs virtual_stages >= 2")));
  in.config.schedule = PipelineScheduleKind::k1F1B;
  in.device.memory_bandwidth = 0;
  EXPECT_THAT(PredictStep(in), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("each must be positive")));
}

TEST(SearchTest, UnevenLayersGoToTheInnerStages) {
  EXPECT_EQ(StageLayerCounts(126, 16),
            (std::vector<int64_t>{7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7}));
  EXPECT_EQ(StageLayerCounts(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(StageLayerCounts(7, 3), (std::vector<int64_t>{2, 3, 2}));
  EXPECT_EQ(StageLayerCounts(5, 2), (std::vector<int64_t>{3, 2}));
  // Loom's job splits evenly only.
  StepInput in;
  in.shape = SmallRequest().shape;
  in.shape.layers = 25;
  in.global_batch = 64;
  in.device = *FindDevice("a100-80gb");
  in.config.pp = 2;
  LOOM_EXPECT_OK(PredictStep(in));
  in.even_layers_only = true;
  EXPECT_THAT(PredictStep(in), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("layers 25 do not split over pp=2")));
}

TEST(SearchTest, FlashAttentionAndSequenceParallelismShrinkActivations) {
  StepInput in;
  in.shape = SmallRequest().shape;
  in.global_batch = 64;
  in.device = *FindDevice("a100-80gb");
  in.config.tp = 4;
  LOOM_ASSERT_OK_AND_ASSIGN(const MemoryEstimate scores, MemoryPerDevice(in));
  in.device.flash_attention = true;
  LOOM_ASSERT_OK_AND_ASSIGN(const MemoryEstimate flash, MemoryPerDevice(in));
  in.device.sequence_parallel = true;
  LOOM_ASSERT_OK_AND_ASSIGN(const MemoryEstimate both, MemoryPerDevice(in));
  // Korthikanti et al. per layer: sbh (10 + 24/t + 5as/(ht)) with the scores,
  // sbh (10 + 24/t) without, 34 sbh / t with sequence parallelism too.
  const double a = 16, s = 2048, h = 2048, t = 4;
  EXPECT_NEAR(flash.activations / scores.activations, (10 + 24 / t) / (10 + 24 / t + 5 * a * s / (h * t)),
              1e-9);
  EXPECT_NEAR(both.activations / flash.activations, (34 / t) / (10 + 24 / t), 1e-9);
  // Without stored scores, selective recompute costs nothing more than none.
  in.config.recompute = Recompute::kSelective;
  LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction selective, PredictStep(in));
  in.config.recompute = Recompute::kNone;
  LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction none, PredictStep(in));
  EXPECT_DOUBLE_EQ(selective.step_seconds, none.step_seconds);
}

TEST(SearchTest, ThePipelineBubbleIsTheSimulators) {
  // With the rest fixed, 1F1B on pp = 4 and m microbatches idles (p-1)/(m+p-1) of the
  // device time when the stages cost the same (no logits on a tiny vocabulary) and
  // the activations cross between them at once.
  StepInput in;
  in.shape = SmallRequest().shape;
  in.shape.vocab = 1;
  in.global_batch = 16;
  in.device = *FindDevice("a100-80gb");
  in.device.intra_node_latency = 0;
  in.device.intra_node_bandwidth = 1e30;
  in.gpus_per_node = 8;
  in.config.pp = 4;
  in.config.schedule = PipelineScheduleKind::k1F1B;
  LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction p, PredictStep(in));
  EXPECT_EQ(p.microbatches, 16);
  EXPECT_NEAR(p.bubble_ratio, 3.0 / 19.0, 0.01);
}

TEST(SearchTest, GradientAllReduceHidesBehindTheLastBackward) {
  // ZeRO 0 at dp = 2 across nodes. With dp_overlaps_last_backward, the exposed part is
  // the all-reduce less rank 0's last backward, and never below the last unit's share
  // (1 / (layers + 1)); with a fraction, that fraction of it; at ZeRO 1 the fraction.
  StepInput in;
  in.shape = SmallRequest().shape;
  in.global_batch = 8;
  in.device = *FindDevice("a100-80gb");
  in.gpus_per_node = 1;
  in.config.dp = 2;
  in.config.zero = 0;
  in.config.microbatch_size = 4;
  for (const double gbs : {0.05, 100.0}) {
    SCOPED_TRACE(gbs);
    in.device.inter_node_bandwidth = gbs * 1e9;
    in.device.dp_overlap = 0;
    in.device.dp_overlaps_last_backward = false;
    LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction none, PredictStep(in));
    EXPECT_DOUBLE_EQ(none.dp_exposed_seconds, none.dp_seconds);
    in.device.dp_overlap = 0.25;
    LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction quarter, PredictStep(in));
    EXPECT_DOUBLE_EQ(quarter.dp_exposed_seconds, 0.75 * quarter.dp_seconds);
    in.device.dp_overlap = 0;
    in.device.dp_overlaps_last_backward = true;
    LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction last, PredictStep(in));
    const double backward = 24 * last.layer_backward_seconds + 2 * last.logits_seconds / 3;
    EXPECT_NEAR(last.dp_exposed_seconds, std::max(last.dp_seconds - backward, last.dp_seconds / 25),
                1e-9 * last.dp_seconds);
    EXPECT_LT(last.step_seconds, none.step_seconds);
    in.config.zero = 1;
    LOOM_ASSERT_OK_AND_ASSIGN(const StepPrediction zero1, PredictStep(in));
    EXPECT_DOUBLE_EQ(zero1.dp_exposed_seconds, zero1.dp_seconds);
    in.config.zero = 0;
  }
}

}  // namespace
}  // namespace planner
}  // namespace loom
