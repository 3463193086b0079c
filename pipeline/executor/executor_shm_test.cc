// The executor over shm ranks that are real processes, sending its payloads from
// SendBuffers (the transport's communication memory, which the receiving process
// maps) and, for comparison, from the tensors: three SGD steps of every schedule
// kind equal the unpipelined reference bit for bit either way, and only the staged
// runs' payloads arrive mapped.
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/shared_regions.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "pipeline/executor/executor.h"
#include "pipeline/executor/send_buffers.h"
#include "pipeline/executor/tiny_mlp.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

constexpr int64_t kLayers = 6;

// 600 rows: every payload (600 x 4..10 floats) is above shm's 8 KiB eager size, so
// it travels as a large message (mapped or pulled), not inline.
MlpConfig MakeConfig(int64_t num_microbatches) {
  MlpConfig config;
  config.widths.clear();
  for (int64_t l = 0; l <= kLayers; ++l) config.widths.push_back(4 + (l * 5) % 7);
  config.rows = 600;
  config.num_microbatches = num_microbatches;
  config.seed = 77;
  return config;
}

absl::Status Differs(int64_t step, const std::string& what) {
  return absl::InternalError(absl::StrCat("step ", step, ": ", what, " differs from the reference"));
}

// TrainRank runs three SGD steps on this process's rank and checks its layers'
// gradients, the losses (on the last stage's rank) and the updated weights against
// the reference, which every rank computes for itself.
absl::Status TrainRank(Transport& t, PipelineScheduleKind kind, int64_t p, int64_t m,
                       bool staged) {
  const int64_t virtual_stages = kind == PipelineScheduleKind::kZeroBubbleV ? 2 : 1;
  LOOM_ASSIGN_OR_RETURN(Schedule schedule, MakeSchedule(kind, p, m, virtual_stages));
  const int64_t stages = schedule.layout.num_stages();
  std::vector<int64_t> layers(static_cast<size_t>(stages), kLayers / stages);
  layers.back() += kLayers % stages;
  LOOM_ASSIGN_OR_RETURN(const StageLayout layout, schedule.layout.WithLayers(kLayers, layers));
  ExecutorOptions options;
  options.timeout = absl::Seconds(60);
  LOOM_ASSIGN_OR_RETURN(const PipelineExecutor executor, PipelineExecutor::Create(schedule, options));

  const MlpConfig config = MakeConfig(m);
  const MlpData data = MakeMlpData(config);
  MlpParameters reference = MakeMlpParameters(config);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<MlpStageModule> module,
                        MlpStageModule::Create(config, layout, t.rank(), reference, data));
  SendBuffers send_buffers;
  const shm_internal::MappedReceiveCounts before = shm_internal::MappedReceives();
  for (int64_t step = 0; step < 3; ++step) {
    const MlpGradients expected = MlpReference(config, reference, data);
    module->BeginStep();
    LOOM_RETURN_IF_ERROR(executor.Run(t, *module, staged ? &send_buffers : nullptr).status());
    for (int64_t l : module->layers()) {
      if (module->weight_grads(l) != expected.grads.weights[l] ||
          module->bias_grads(l) != expected.grads.biases[l]) {
        return Differs(step, absl::StrCat("layer ", l, "'s gradient"));
      }
    }
    if (module->holds_loss() && module->microbatch_losses() != expected.microbatch_losses) {
      return Differs(step, "the microbatch losses");
    }
    module->ApplySgd(0.5f);
    ApplySgd(0.5f, expected.grads, reference);
    for (int64_t l : module->layers()) {
      if (module->weights(l) != reference.weights[l] || module->biases(l) != reference.biases[l]) {
        return Differs(step, absl::StrCat("layer ", l, "'s updated parameters"));
      }
    }
  }
  const shm_internal::MappedReceiveCounts after = shm_internal::MappedReceives();
  const uint64_t mapped = after.mapped + after.fell_back - before.mapped - before.fell_back;
  // Every rank sends and receives in a training pipeline of two or more ranks.
  if (staged && (send_buffers.staged() == 0 || mapped == 0)) {
    return absl::InternalError(absl::StrCat("rank ", t.rank(), " staged ", send_buffers.staged(),
                                            " payloads and received ", mapped, " mapped"));
  }
  if (!staged && mapped != 0) {
    return absl::InternalError(
        absl::StrCat("rank ", t.rank(), " received ", mapped, " mapped payloads unstaged"));
  }
  return absl::OkStatus();
}

using ShmParam = std::tuple<PipelineScheduleKind, int64_t /*p*/, int64_t /*m*/>;

class ExecutorShmTest : public ::testing::TestWithParam<ShmParam> {};

TEST_P(ExecutorShmTest, StagedAndUnstagedTrainBitwiseLikeTheReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto kind = std::get<0>(GetParam());
  const auto p = std::get<1>(GetParam());
  const auto m = std::get<2>(GetParam());
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "unstaged");
    ShmHarness harness;
    const std::vector<absl::Status> results = harness.Run(
        static_cast<int>(p), [&](Transport& t) { return TrainRank(t, kind, p, m, staged); });
    for (int64_t r = 0; r < p; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
    EXPECT_TRUE(harness.last_leftovers().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ExecutorShmTest,
    ::testing::Values(ShmParam{PipelineScheduleKind::k1F1B, 2, 4},
                      ShmParam{PipelineScheduleKind::kGPipe, 3, 3},
                      ShmParam{PipelineScheduleKind::kZeroBubbleV, 2, 4}),
    [](const ::testing::TestParamInfo<ShmParam>& param_info) {
      std::string name(PipelineScheduleName(std::get<0>(param_info.param)));
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return absl::StrCat(name, "_p", std::get<1>(param_info.param));
    });

}  // namespace
}  // namespace loom
