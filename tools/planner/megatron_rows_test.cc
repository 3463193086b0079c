// The at-scale check: the Megatron-LM paper (Narayanan et al., 2021, "Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"), Table 1:
// GPT models of 1.7B to 1T parameters on A100-80GB GPUs (8 per node, NVLink inside,
// 8 x 200 Gb/s InfiniBand per node), sequence 2048, vocabulary 51,200, full
// recompute, the interleaved schedule where there is a pipeline. Given each row's
// model, batch and mesh, the planner (free to choose the microbatch size and the
// virtual stages, as the paper's runs did) predicts the achieved TFLOP/s per GPU
// within 15% of the published figure.
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tools/planner/device.h"
#include "tools/planner/search.h"
#include "tools/planner/step_model.h"

namespace loom {
namespace planner {
namespace {

struct Row {
  double billions;
  int64_t heads, hidden, layers, tp, pp, gpus, batch;
  double tflops;  // achieved per GPU, published
};

// Table 1, every row.
constexpr Row kTable1[] = {
    {1.7, 24, 2304, 24, 1, 1, 32, 512, 137},      {3.6, 32, 3072, 30, 2, 1, 64, 512, 138},
    {7.5, 32, 4096, 36, 4, 1, 128, 512, 142},     {18.4, 48, 6144, 40, 8, 1, 256, 1024, 135},
    {39.1, 64, 8192, 48, 8, 2, 512, 1536, 138},   {76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148}, {310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163},
};

PlanRequest RequestFor(const Row& row) {
  PlanRequest req;
  req.shape.layers = row.layers;
  req.shape.hidden = row.hidden;
  req.shape.heads = row.heads;
  req.shape.seq_len = 2048;
  req.shape.vocab = 51200;
  req.global_batch = row.batch;
  req.world = row.gpus;
  req.gpus_per_node = 8;
  req.device = *FindDevice("a100-80gb");
  req.fixed.tp = row.tp;
  req.fixed.pp = row.pp;
  req.fixed.cp = 1;
  req.fixed.zero = 0;
  req.fixed.recompute = Recompute::kFull;
  req.fixed.schedule =
      row.pp > 1 ? PipelineScheduleKind::kInterleaved1F1B : PipelineScheduleKind::k1F1B;
  req.keep = 1;
  return req;
}

TEST(MegatronRowsTest, AchievedTflopsPerGpuWithin15Percent) {
  for (const Row& row : kTable1) {
    SCOPED_TRACE(row.billions);
    LOOM_ASSERT_OK_AND_ASSIGN(const PlanResult plan, Plan(RequestFor(row)));
    ASSERT_FALSE(plan.ranked.empty());
    const Candidate& best = plan.ranked[0];
    const double predicted = best.prediction.tflops_per_device;
    std::printf("%7.1fB  %-70s  predicted %6.1f  published %5.1f  ratio %.3f  memory %s\n",
                row.billions, best.config.ToString().c_str(), predicted, row.tflops,
                predicted / row.tflops, best.memory.ToString().c_str());
    EXPECT_LE(std::abs(predicted / row.tflops - 1), 0.15)
        << best.config.ToString() << "\n" << best.prediction.Breakdown();
  }
}

}  // namespace
}  // namespace planner
}  // namespace loom
