#include "pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"
#include "topology/memory_estimate.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

SimulationCosts Uniform(double forward, double backward) {
  SimulationCosts costs;
  costs.uniform.forward = forward;
  costs.uniform.backward = backward;
  return costs;
}

// F = I = W = `cost`, B = 2 * cost: the zero-bubble paper's setting.
SimulationCosts Split(double cost) {
  SimulationCosts costs;
  costs.uniform = {cost, 2 * cost, cost, cost};
  return costs;
}

bool SameTiming(const TimedAction& a, const TimedAction& b) {
  return a.action == b.action && a.start == b.start && a.end == b.end;
}

TEST(SimulatorTest, HeaderExample) {
  SimulationCosts costs;
  costs.uniform.backward = 1;
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(*Make1F1BSchedule(4, 8), costs));
  EXPECT_EQ(run.makespan, 22);
  EXPECT_DOUBLE_EQ(run.bubble_ratio, 3.0 / 11);
  EXPECT_EQ(run.ranks[1].peak_activations, 3);
  EXPECT_TRUE(SameTiming(run.ranks[0].actions[0], {*ParseAction("0F0"), 0, 1}));
}

// Every action's times on the smallest pipeline with messages.
TEST(SimulatorTest, Timeline) {
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(*Make1F1BSchedule(2, 1), Uniform(1, 2)));
  const std::vector<TimedAction> rank0 = {{*ParseAction("0F0"), 0, 1},
                                          {*ParseAction("0SEND_F0"), 1, 1},
                                          {*ParseAction("0RECV_B0"), 1, 1},
                                          {*ParseAction("0B0"), 4, 6}};
  const std::vector<TimedAction> rank1 = {{*ParseAction("1RECV_F0"), 0, 0},
                                          {*ParseAction("1F0"), 1, 2},
                                          {*ParseAction("1B0"), 2, 4},
                                          {*ParseAction("1SEND_B0"), 4, 4}};
  ASSERT_EQ(run.ranks[0].actions.size(), rank0.size());
  ASSERT_EQ(run.ranks[1].actions.size(), rank1.size());
  for (size_t i = 0; i < rank0.size(); ++i) {
    EXPECT_TRUE(SameTiming(run.ranks[0].actions[i], rank0[i])) << i;
    EXPECT_TRUE(SameTiming(run.ranks[1].actions[i], rank1[i])) << i;
  }
  EXPECT_EQ(run.makespan, 6);
  EXPECT_EQ(run.ranks[0].busy, 3);
  EXPECT_EQ(run.ranks[0].idle, 3);
  EXPECT_DOUBLE_EQ(run.ranks[0].bubble_ratio, 0.5);
  EXPECT_EQ(run.Summary(),
            "rank 0: busy 3 idle 3 bubble 50.0% peak activations 1\n"
            "rank 1: busy 3 idle 3 bubble 50.0% peak activations 1\n"
            "makespan 6, bubble 50.0%\n");
}

// GPipe and 1F1B: every rank is busy m(t_F + t_B) and idle (p-1)(t_F + t_B), so the
// bubble is exactly (p-1)/(m+p-1), for t_B = t_F and for t_B = 2 t_F alike.
TEST(SimulatorTest, GPipeAnd1F1BMatchTheFormula) {
  for (const auto& [forward, backward] :
       std::vector<std::pair<double, double>>{{1, 1}, {1, 2}, {2, 3}}) {
    for (int64_t p = 1; p <= 8; ++p) {
      for (int64_t m = 1; m <= 16; ++m) {
        for (const Schedule& schedule : {*MakeGPipeSchedule(p, m), *Make1F1BSchedule(p, m)}) {
          LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run,
                                    Simulate(schedule, Uniform(forward, backward)));
          const double step = forward + backward;
          EXPECT_EQ(run.makespan, static_cast<double>(m + p - 1) * step)
              << schedule.name << " p=" << p << " m=" << m;
          for (const RankTimeline& rank : run.ranks) {
            EXPECT_EQ(rank.busy, static_cast<double>(m) * step);
            EXPECT_EQ(rank.idle, static_cast<double>(p - 1) * step);
          }
          EXPECT_DOUBLE_EQ(run.bubble_ratio,
                           static_cast<double>(p - 1) / static_cast<double>(m + p - 1))
              << schedule.name << " p=" << p << " m=" << m;
        }
      }
    }
  }
}

// Forward-only on one stage per rank is GPipe's forward half: (m + p - 1) t_F.
// Nothing frees an activation, so the count is every forward of the rank.
TEST(SimulatorTest, ForwardOnlyIsGPipesForwardHalf) {
  for (int64_t p = 1; p <= 4; ++p) {
    for (int64_t m = 1; m <= 6; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run,
                                Simulate(*MakeForwardOnlySchedule(p, m), Uniform(2, 3)));
      EXPECT_EQ(run.makespan, static_cast<double>(m + p - 1) * 2) << "p=" << p << " m=" << m;
      for (const RankTimeline& rank : run.ranks) {
        EXPECT_EQ(rank.busy, static_cast<double>(m) * 2);
        EXPECT_EQ(rank.peak_activations, m);
      }
    }
  }
}

// Interleaved 1F1B with per-chunk costs t_F = t_B: the bubble of one chunk,
// (p-1)(t_F + t_B), against v*m chunk-steps of work: (p-1)/(v*m + p-1) exactly.
TEST(SimulatorTest, InterleavedMatchesTheFormula) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t v = 1; v <= 4; ++v) {
      for (int64_t m = p; m <= 4 * p; m += p) {
        LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run,
                                  Simulate(*MakeInterleaved1F1BSchedule(p, m, v), Uniform(1, 1)));
        EXPECT_EQ(run.makespan, static_cast<double>(v * m + p - 1) * 2)
            << "p=" << p << " m=" << m << " v=" << v;
        EXPECT_DOUBLE_EQ(run.bubble_ratio,
                         static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1))
            << "p=" << p << " m=" << m << " v=" << v;
      }
    }
  }
}

// ZB-H1 with t_F = t_I = t_W (1F1B's t_B = 2 t_F): once m >= p every rank is idle
// exactly (p-1) t_F, a third of 1F1B's (p-1)(t_F + t_B); as a share of the run,
// (p-1)/(3m + p-1).
TEST(SimulatorTest, ZeroBubbleH1IsAThirdOf1F1B) {
  for (int64_t p = 2; p <= 8; ++p) {
    for (int64_t m = 1; m <= 24; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult zb,
                                Simulate(*MakeZeroBubbleH1Schedule(p, m), Split(1)));
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult base, Simulate(*Make1F1BSchedule(p, m), Split(1)));
      const double base_idle = base.ranks[0].idle;
      ASSERT_EQ(base_idle, static_cast<double>(3 * (p - 1)));
      for (const RankTimeline& rank : zb.ranks) {
        // Never worse than 1F1B, for any m.
        EXPECT_LE(rank.idle, base_idle) << "p=" << p << " m=" << m;
        if (m >= p) {
          EXPECT_EQ(rank.idle, static_cast<double>(p - 1)) << "p=" << p << " m=" << m;
          EXPECT_LE(rank.idle, 0.4 * base_idle);
        }
      }
      if (m >= p) {
        EXPECT_DOUBLE_EQ(zb.bubble_ratio,
                         static_cast<double>(p - 1) / static_cast<double>(3 * m + p - 1));
      }
      // As ratios of the run: (m+p-1)/(3m+p-1) of 1F1B's, at most 0.4 once
      // m >= 3(p-1).
      if (m >= 3 * (p - 1)) {
        EXPECT_LE(zb.bubble_ratio, 0.4 * base.bubble_ratio) << "p=" << p << " m=" << m;
      }
    }
  }
}

// ZB-V with per-chunk F = I = W = 1 (a chunk is half a stage): once m >= 2p every
// rank is idle exactly p-1 chunk forwards, half of ZB-H1's at the same stage costs.
TEST(SimulatorTest, ZeroBubbleVHalvesZbH1) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t m = 2 * p; m <= 2 * p + 8; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run,
                                Simulate(*MakeZeroBubbleVSchedule(p, m), Split(1)));
      for (const RankTimeline& rank : run.ranks) {
        EXPECT_EQ(rank.busy, static_cast<double>(6 * m));
        EXPECT_EQ(rank.idle, static_cast<double>(p - 1)) << "p=" << p << " m=" << m;
      }
    }
  }
}

// Peak in-flight activations, exact, and the same as topology's memory estimate.
TEST(SimulatorTest, PeakActivations) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t m = 1; m <= 16; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult gpipe,
                                Simulate(*MakeGPipeSchedule(p, m), Split(1)));
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult one, Simulate(*Make1F1BSchedule(p, m), Split(1)));
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult zb,
                                Simulate(*MakeZeroBubbleH1Schedule(p, m), Split(1)));
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult zbv,
                                Simulate(*MakeZeroBubbleVSchedule(p, m), Split(1)));
      int64_t zbv_peak = 0;
      for (int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(gpipe.ranks[r].peak_activations, m);
        EXPECT_EQ(one.ranks[r].peak_activations, std::min(p - r, m)) << "p=" << p << " m=" << m;
        EXPECT_EQ(one.ranks[r].peak_activations_before_input_grad, std::min(p - r, m));
        // ZB-H1: 1F1B's full activations; the W-only remainders add up to p.
        EXPECT_EQ(zb.ranks[r].peak_activations_before_input_grad, std::min(p - r, m));
        EXPECT_EQ(zb.ranks[r].peak_activations, std::min(p, m)) << "p=" << p << " m=" << m;
        EXPECT_EQ(gpipe.ranks[r].peak_activations,
                  *InFlightMicrobatches(PipelineScheduleKind::kGPipe, p, r, m));
        EXPECT_EQ(one.ranks[r].peak_activations,
                  *InFlightMicrobatches(PipelineScheduleKind::k1F1B, p, r, m));
        EXPECT_EQ(zb.ranks[r].peak_activations_before_input_grad,
                  *InFlightMicrobatches(PipelineScheduleKind::kZeroBubbleH1, p, r, m));
        // ZB-V: at most 2p chunk activations (1F1B's first rank, in half-size chunks).
        EXPECT_LE(zbv.ranks[r].peak_activations, 2 * p);
        zbv_peak = std::max(zbv_peak, zbv.ranks[r].peak_activations);
      }
      EXPECT_EQ(zbv_peak, *InFlightMicrobatches(PipelineScheduleKind::kZeroBubbleV, p, 0, m))
          << "p=" << p << " m=" << m;
    }
  }
  for (int64_t p = 1; p <= 6; ++p) {
    for (int64_t v = 1; v <= 4; ++v) {
      for (int64_t m = p; m <= 3 * p; m += p) {
        LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run,
                                  Simulate(*MakeInterleaved1F1BSchedule(p, m, v), Split(1)));
        for (int64_t r = 0; r < p; ++r) {
          EXPECT_EQ(run.ranks[r].peak_activations,
                    std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v));
          EXPECT_EQ(run.ranks[r].peak_activations,
                    *InFlightMicrobatches(PipelineScheduleKind::kInterleaved1F1B, p, r, m, v));
        }
      }
    }
  }
}

// Each hop of the pipeline costs the latency once forward and once backward.
TEST(SimulatorTest, LatencyAddsPerHop) {
  for (int64_t p = 1; p <= 6; ++p) {
    for (int64_t m = 1; m <= 8; ++m) {
      SimulationCosts costs = Uniform(1, 2);
      costs.p2p_latency = 0.5;
      LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(*MakeGPipeSchedule(p, m), costs));
      EXPECT_EQ(run.makespan,
                static_cast<double>(m + p - 1) * 3 + static_cast<double>(2 * (p - 1)) * 0.5)
          << "p=" << p << " m=" << m;
    }
  }
}

// Lowering first or letting Simulate do it gives the same timeline.
TEST(SimulatorTest, ComputeOnlyAndLoweredAgree) {
  const Schedule schedule = *MakeInterleaved1F1BSchedule(4, 8, 2);
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult a, Simulate(schedule, Split(1)));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult b, Simulate(*Lower(schedule), Split(1)));
  EXPECT_EQ(a.makespan, b.makespan);
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    ASSERT_EQ(a.ranks[r].actions.size(), b.ranks[r].actions.size());
    for (size_t i = 0; i < a.ranks[r].actions.size(); ++i) {
      EXPECT_TRUE(SameTiming(a.ranks[r].actions[i], b.ranks[r].actions[i]));
    }
  }
}

// Uneven layers: costs per stage in proportion to its layers.
TEST(SimulatorTest, CostsScaledByLayers) {
  Schedule schedule = *Make1F1BSchedule(2, 1);
  schedule.layout = *schedule.layout.WithLayers(4, {1, 3});
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationCosts costs,
                            SimulationCosts::ScaledByLayers(schedule.layout, {1, 2, 1, 1}));
  ASSERT_EQ(costs.per_stage.size(), 2u);
  EXPECT_EQ(costs.ForStage(1).forward, 3);
  EXPECT_EQ(costs.ForStage(1).backward, 6);
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(schedule, costs));
  EXPECT_EQ(run.makespan, 1 + 3 + 6 + 2);
  EXPECT_EQ(run.ranks[0].busy, 3);
  EXPECT_EQ(run.ranks[1].busy, 9);
  EXPECT_THAT(SimulationCosts::ScaledByLayers(*StageLayout::Loop(2), {}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ScaledByLayers needs a layout with layers (WithLayers / "
                                 "WithEvenLayers); loop p=2 v=1 has none")));
}

TEST(SimulatorTest, RejectsBadCosts) {
  const Schedule schedule = *Make1F1BSchedule(2, 2);
  SimulationCosts costs;
  costs.uniform.backward_weight = -1;
  EXPECT_THAT(
      Simulate(schedule, costs),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("uniform.backward_weight=-1 must be a finite, non-negative time")));
  costs = SimulationCosts();
  costs.p2p_latency = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(Simulate(schedule, costs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("p2p_latency=nan")));
  costs = SimulationCosts();
  costs.per_stage.resize(3);
  EXPECT_THAT(Simulate(schedule, costs),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("per_stage has 3 entries, the layout loop p=2 v=1 has 2 stages")));
  costs.per_stage.resize(2);
  costs.per_stage[1].forward = std::numeric_limits<double>::infinity();
  EXPECT_THAT(Simulate(schedule, costs),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("per_stage[1].forward=inf")));
}

TEST(SimulatorTest, RejectsBrokenSchedules) {
  Schedule duplicate = *Make1F1BSchedule(2, 2);
  duplicate.ranks[0][1] = duplicate.ranks[0][0];
  EXPECT_THAT(Simulate(duplicate, SimulationCosts()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears a second time")));
  // Deadlocks only with blocking sends: the simulator, whose sends never block,
  // runs it.
  Schedule rendezvous_only = *Lower(*Make1F1BSchedule(2, 2));
  std::swap(rendezvous_only.ranks[1][3], rendezvous_only.ranks[1][4]);
  EXPECT_THAT(Simulate(rendezvous_only, SimulationCosts()), IsOk());
}

TEST(SimulatorTest, ZeroCostsGiveZeroRatios) {
  SimulationCosts costs;
  costs.uniform = {0, 0, 0, 0};
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(*Make1F1BSchedule(3, 3), costs));
  EXPECT_EQ(run.makespan, 0);
  EXPECT_EQ(run.bubble_ratio, 0);
  EXPECT_EQ(run.ranks[2].bubble_ratio, 0);
}

}  // namespace
}  // namespace loom
