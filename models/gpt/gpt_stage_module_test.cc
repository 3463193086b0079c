// The GPT model cut into pipeline stages and run by the pipeline executor on 2
// ranks (threads over inproc) against the whole model run microbatch after
// microbatch on one rank: the same loss and the same gradients, bit for bit.
// Bitwise holds because a stage runs the whole model's arithmetic on the same
// values (activations cross ranks as raw f32), the backwards of each stage come in
// ascending microbatch order (stage_module.h), and each microbatch's backward uses
// the state its own forward saved (its context), with no forward run twice.
#include "models/gpt/gpt_stage_module.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/internal/train_testing.h"
#include "pipeline/executor/executor.h"
#include "pipeline/generators.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using train_testing::ExpectAllOk;
using tp_layers_testing::RunTpCp;
using tp_layers_testing::TpCpRank;
using train_testing::RunTp;

GptConfig SmallConfig() {
  GptConfig config;
  config.vocab = 32;
  config.seq_len = 8;
  config.hidden = 32;
  config.heads = 4;
  config.layers = 4;
  return config;
}

constexpr int64_t kMicroBatch = 2;
constexpr int64_t kMicrobatches = 4;

BatchLayout Layout() {
  BatchLayout layout;
  layout.micro_batch = kMicroBatch;
  layout.num_microbatches = kMicrobatches;
  return layout;
}

MarkovData Data(const GptConfig& config) {
  MarkovOptions options;
  options.vocab = config.vocab;
  options.seq_len = config.seq_len;
  return *MarkovData::Create(options);
}

struct Gradients {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

// The whole model on one rank, microbatch after microbatch, loss averaged.
Gradients Reference(const GptConfig& config, int64_t step) {
  const MarkovData data = Data(config);
  Gradients out;
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    float sum = 0;
    for (int64_t mb = 0; mb < kMicrobatches; ++mb) {
      LOOM_ASSIGN_OR_RETURN(GptBatch batch, data.Microbatch(Layout(), step, mb, 0));
      LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(batch.tokens, batch.targets));
      sum += loss;
      LOOM_RETURN_IF_ERROR(model->Backward(1.0f / kMicrobatches));
    }
    out.loss = sum / kMicrobatches;
    for (const GptParameter& p : model->Parameters()) {
      out.grads[p.name].assign(p.grad.begin(), p.grad.end());
    }
    return absl::OkStatus();
  }));
  return out;
}

enum class Kind { kGPipe, k1F1B, kInterleaved, kZeroBubbleH1, kZeroBubbleV };

absl::StatusOr<Schedule> MakeScheduleOf(Kind kind) {
  switch (kind) {
    case Kind::kGPipe:
      return MakeGPipeSchedule(2, kMicrobatches);
    case Kind::k1F1B:
      return Make1F1BSchedule(2, kMicrobatches);
    case Kind::kInterleaved:
      return MakeInterleaved1F1BSchedule(2, kMicrobatches, 2);
    case Kind::kZeroBubbleH1:
      return MakeZeroBubbleH1Schedule(2, kMicrobatches);
    case Kind::kZeroBubbleV:
      return MakeZeroBubbleVSchedule(2, kMicrobatches);
  }
  return absl::InvalidArgumentError("unknown kind");
}

class GptPipelineTest : public ::testing::TestWithParam<std::tuple<Kind, Recompute>> {};

TEST_P(GptPipelineTest, TwoRanksEqualTheWholeModelBitwise) {
  const auto [kind, recompute] = GetParam();
  const GptConfig config = SmallConfig();
  const MarkovData data = Data(config);
  LOOM_ASSERT_OK_AND_ASSIGN(const Schedule schedule, MakeScheduleOf(kind));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor, PipelineExecutor::Create(schedule));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> pp, InprocGroup::Create(2));
  GptStageModuleOptions options;
  options.micro_batch = kMicroBatch;
  options.num_microbatches = kMicrobatches;
  options.recompute = recompute;
  const int64_t kStep = 3;
  std::vector<absl::Status> status(2);
  std::vector<float> losses(2, -1.0f);
  std::vector<std::map<std::string, std::vector<float>>> grads(2);
  std::vector<int64_t> forwards(2), stages(2), saved(2), pending(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      // Each pipeline rank has its own (tp = 1) tensor-parallel group.
      status[r] = RunTp(1, [&](Communicator& tp) -> absl::Status {
        auto data_fn = [&](int64_t step, int64_t mb) {
          return data.Microbatch(Layout(), step, mb, 0);
        };
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> module,
                              GptStageModule::Create(config, schedule.layout, r, tp, data_fn,
                                                     options));
        module->BeginStep(kStep);
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, pp->Endpoint(r));
        LOOM_RETURN_IF_ERROR(executor.Run(*endpoint, *module).status());
        if (module->holds_loss()) losses[r] = module->loss();
        for (const GptParameter& p : module->Parameters()) {
          grads[r][p.name].assign(p.grad.begin(), p.grad.end());
        }
        forwards[r] = module->training_forwards();
        stages[r] = static_cast<int64_t>(module->stages().size());
        saved[r] = module->SavedContexts();
        pending[r] = module->PendingWeightWorks();
        return absl::OkStatus();
      })[0];
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectAllOk(status);
  const Gradients expected = Reference(config, kStep);
  // The last stage is on rank 1 in the loop layouts, on rank 0 in ZB-V's V.
  EXPECT_EQ(losses[kind == Kind::kZeroBubbleV ? 0 : 1], expected.loss);
  std::map<std::string, std::vector<float>> got = grads[0];
  for (const auto& [name, g] : grads[1]) {
    EXPECT_EQ(got.count(name), 0u) << name << " on both ranks";
    got[name] = g;
  }
  EXPECT_EQ(got.size(), expected.grads.size());
  for (const auto& [name, g] : expected.grads) {
    EXPECT_EQ(got[name], g) << name;
  }
  EXPECT_EQ(saved[0] + saved[1], 0) << "every microbatch context was consumed";
  EXPECT_EQ(pending[0] + pending[1], 0) << "every weight-gradient work was consumed";
  // Every schedule (GPipe's all forwards first included) runs each stage's forward
  // once per microbatch: backwards restore their microbatch's context.
  for (int r = 0; r < 2; ++r) EXPECT_EQ(forwards[r], stages[r] * kMicrobatches) << "rank " << r;
}

const char* KindName(Kind kind) {
  static const char* const kNames[] = {"GPipe", "OneFOneB", "Interleaved", "ZeroBubbleH1",
                                       "ZeroBubbleV"};
  return kNames[static_cast<int>(kind)];
}

std::string TestName(const ::testing::TestParamInfo<std::tuple<Kind, Recompute>>& info) {
  return absl::StrCat(KindName(std::get<0>(info.param)),
                      std::get<1>(info.param) == Recompute::kFull ? "Recompute" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, GptPipelineTest,
    ::testing::Combine(::testing::Values(Kind::kGPipe, Kind::k1F1B, Kind::kInterleaved,
                                         Kind::kZeroBubbleH1, Kind::kZeroBubbleV),
                       ::testing::Values(Recompute::kNone, Recompute::kFull)),
    TestName);

std::string KindTestName(const ::testing::TestParamInfo<Kind>& info) {
  return KindName(info.param);
}

// What one rank saw in ForwardOnlyRunLeavesTrainingAlone.
struct RankRecord {
  std::vector<float> train_losses;  // loss() after each training step
  std::vector<std::map<std::string, std::vector<float>>> train_grads;
  std::map<std::string, std::vector<float>> grads_after_eval;
  std::vector<float> eval_microbatch_losses;
  float eval_loss = -1, eval_again_loss = -1, eval_two_loss = -1;
  int64_t saved_after_eval = -1;
  size_t held_after_eval = 1;
  bool holds_loss = false;
};

// A training step; an evaluation on held-out data (the same microbatches run
// twice, then only two of them); the same training step again. The evaluation
// leaves the gradients alone and keeps no forward state, and the step after it is
// bitwise the step before it and the whole model's.
class GptForwardOnlyTest : public ::testing::TestWithParam<Kind> {};

TEST_P(GptForwardOnlyTest, ForwardOnlyRunLeavesTrainingAlone) {
  const GptConfig config = SmallConfig();
  const MarkovData data = Data(config);
  LOOM_ASSERT_OK_AND_ASSIGN(const Schedule training, MakeScheduleOf(GetParam()));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor train, PipelineExecutor::Create(training));
  LOOM_ASSERT_OK_AND_ASSIGN(
      const PipelineExecutor eval,
      PipelineExecutor::Create(*MakeForwardOnlySchedule(training.layout, kMicrobatches)));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor eval_two,
                            PipelineExecutor::Create(*MakeForwardOnlySchedule(training.layout, 2)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> pp, InprocGroup::Create(2));
  GptStageModuleOptions options;
  options.micro_batch = kMicroBatch;
  options.num_microbatches = kMicrobatches;
  const int64_t kStep = 3;
  const int64_t kHeldOut = 1000;  // the held-out data: steps the training never reads
  std::vector<absl::Status> status(2);
  std::vector<RankRecord> records(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = RunTp(1, [&](Communicator& tp) -> absl::Status {
        auto data_fn = [&](int64_t step, int64_t mb) {
          return data.Microbatch(Layout(), step, mb, 0);
        };
        auto held_out_fn = [&](int64_t step, int64_t mb) {
          return data.Microbatch(Layout(), kHeldOut + step, mb, 0);
        };
        LOOM_ASSIGN_OR_RETURN(
            std::unique_ptr<GptStageModule> module,
            GptStageModule::Create(config, training.layout, r, tp, data_fn, options));
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, pp->Endpoint(r));
        RankRecord& record = records[r];
        record.holds_loss = module->holds_loss();
        const auto grads = [&] {
          std::map<std::string, std::vector<float>> out;
          for (const GptParameter& p : module->Parameters()) {
            out[p.name].assign(p.grad.begin(), p.grad.end());
          }
          return out;
        };
        const auto train_step = [&]() -> absl::Status {
          module->BeginStep(kStep);
          LOOM_RETURN_IF_ERROR(train.Run(*endpoint, *module).status());
          record.train_losses.push_back(module->loss());
          record.train_grads.push_back(grads());
          return absl::OkStatus();
        };
        LOOM_RETURN_IF_ERROR(train_step());

        module->BeginForwardOnly(kStep, held_out_fn);
        LOOM_RETURN_IF_ERROR(eval.Run(*endpoint, *module).status());
        record.eval_loss = module->loss();
        record.eval_microbatch_losses = module->microbatch_losses();
        LOOM_RETURN_IF_ERROR(eval.Run(*endpoint, *module).status());
        record.eval_again_loss = module->loss();
        record.saved_after_eval = module->SavedContexts();
        record.held_after_eval = 0;
        for (const int64_t stage : module->stages()) {
          record.held_after_eval += module->model(stage).held_activation_bytes();
          EXPECT_THAT(module->Backward(stage, 0, *Tensor::Create(module->OutputShape(stage, 0))),
                      StatusIs(absl::StatusCode::kFailedPrecondition,
                               HasSubstr(absl::StrCat("Backward of stage ", stage,
                                                      " microbatch 0 in a forward-only run"))));
        }
        record.grads_after_eval = grads();
        module->BeginForwardOnly(kStep, held_out_fn);
        LOOM_RETURN_IF_ERROR(eval_two.Run(*endpoint, *module).status());
        record.eval_two_loss = module->loss();

        return train_step();
      })[0];
    });
  }
  for (std::thread& t : threads) t.join();
  ExpectAllOk(status);
  const Gradients expected = Reference(config, kStep);
  const Gradients held_out = Reference(config, kHeldOut + kStep);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    const RankRecord& record = records[r];
    ASSERT_EQ(record.train_grads.size(), 2u);
    EXPECT_EQ(record.grads_after_eval, record.train_grads[0]) << "the evaluation left them";
    EXPECT_EQ(record.train_grads[1], record.train_grads[0]);
    for (const auto& [name, g] : record.train_grads[1]) EXPECT_EQ(g, expected.grads.at(name));
    EXPECT_EQ(record.saved_after_eval, 0);
    EXPECT_EQ(record.held_after_eval, 0u);
    if (!record.holds_loss) continue;
    EXPECT_EQ(record.train_losses[0], expected.loss);
    EXPECT_EQ(record.train_losses[1], expected.loss);
    EXPECT_EQ(record.eval_loss, held_out.loss);
    EXPECT_NE(record.eval_loss, expected.loss);
    EXPECT_EQ(record.eval_again_loss, held_out.loss);
    EXPECT_EQ(record.eval_two_loss,
              (record.eval_microbatch_losses[0] + record.eval_microbatch_losses[1]) / 2.0f);
  }
  EXPECT_NE(records[0].holds_loss, records[1].holds_loss);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GptForwardOnlyTest,
                         ::testing::Values(Kind::k1F1B, Kind::kInterleaved, Kind::kZeroBubbleV),
                         KindTestName);

// Under context parallelism the module gives each cp rank its positions of the data
// function's whole sequences, its stage works on them, and the cp ranks' losses and
// gradients add up to the cp = 1 module's (a one-stage layout; the microbatches run
// one after another as any schedule would on one stage).
struct CpStepResult {
  float loss = 0;
  std::vector<std::vector<double>> grads;  // summed over cp
};

CpStepResult RunCpStep(const GptConfig& config, const MarkovData& data, int cp) {
  CpStepResult result;
  Mutex mu;
  ExpectAllOk(RunTpCp(1, cp, [&](const TpCpRank& at) -> absl::Status {
    auto data_fn = [&](int64_t step, int64_t mb) { return data.Microbatch(Layout(), step, mb, 0); };
    GptStageModuleOptions options;
    options.micro_batch = kMicroBatch;
    options.num_microbatches = kMicrobatches;
    options.context_parallel.group = at.cp;
    LOOM_ASSIGN_OR_RETURN(StageLayout layout, StageLayout::Loop(1));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> module,
                          GptStageModule::Create(config, layout, 0, *at.tp, data_fn, options));
    LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> positions,
                          LocalPositions(config.seq_len, options.context_parallel));
    module->BeginStep(0);
    for (int64_t mb = 0; mb < kMicrobatches; ++mb) {
      LOOM_ASSIGN_OR_RETURN(const Tensor input, module->Input(mb));
      EXPECT_EQ(input.shape(), (std::vector<int64_t>{kMicroBatch, module->InputShape(0, mb)[1]}));
      EXPECT_EQ(input.dtype(), DType::kI64);
      // The tokens are the whole sequences' at this rank's positions.
      LOOM_ASSIGN_OR_RETURN(const GptBatch whole, data_fn(0, mb));
      std::vector<int64_t> expected;
      for (int64_t j = 0; j < kMicroBatch; ++j) {
        for (const int64_t p : positions) expected.push_back(whole.tokens[j * config.seq_len + p]);
      }
      LOOM_ASSIGN_OR_RETURN(const absl::Span<const int64_t> ids, input.As<int64_t>());
      EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), expected) << "microbatch " << mb;
      LOOM_ASSIGN_OR_RETURN(const Tensor out, module->Forward(0, mb, input));
      LOOM_ASSIGN_OR_RETURN(const Tensor grad, module->Loss(mb, out));
      LOOM_RETURN_IF_ERROR(module->Backward(0, mb, grad).status());
    }
    const MutexLock lock(&mu);
    result.loss += module->loss();
    const std::vector<GptParameter> params = module->Parameters();
    result.grads.resize(params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      if (result.grads[p].empty()) result.grads[p].assign(params[p].grad.size(), 0.0);
      for (size_t i = 0; i < params[p].grad.size(); ++i) {
        result.grads[p][i] += static_cast<double>(params[p].grad[i]);
      }
    }
    return absl::OkStatus();
  }));
  return result;
}

TEST(GptStageModuleTest, ContextParallelRanksAddUpToOneRank) {
  const GptConfig config = SmallConfig();
  const MarkovData data = Data(config);
  const CpStepResult one = RunCpStep(config, data, 1);
  for (int cp : {2, 3}) {
    SCOPED_TRACE(absl::StrCat("cp ", cp));
    const CpStepResult split = RunCpStep(config, data, cp);
    EXPECT_NEAR(split.loss, one.loss, 1e-5 * std::fabs(static_cast<double>(one.loss)));
    ASSERT_EQ(split.grads.size(), one.grads.size());
    for (size_t p = 0; p < one.grads.size(); ++p) {
      const std::vector<float> got(split.grads[p].begin(), split.grads[p].end());
      const std::vector<float> want(one.grads[p].begin(), one.grads[p].end());
      train_testing::ExpectClose(got, want, absl::StrCat("parameter ", p), 1e-5);
    }
  }
}

TEST(GptStageModuleTest, ShapesAndErrors) {
  const GptConfig config = SmallConfig();
  const MarkovData data = Data(config);
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    auto data_fn = [&](int64_t step, int64_t mb) { return data.Microbatch(Layout(), step, mb, 0); };
    GptStageModuleOptions options;
    options.micro_batch = kMicroBatch;
    options.num_microbatches = kMicrobatches;
    LOOM_ASSIGN_OR_RETURN(StageLayout layout, StageLayout::Loop(2));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> first,
                          GptStageModule::Create(config, layout, 0, tp, data_fn, options));
    EXPECT_EQ(first->InputShape(0, 0), (std::vector<int64_t>{2, 8}));
    EXPECT_EQ(first->OutputShape(0, 0), (std::vector<int64_t>{8, 2, 32}));
    EXPECT_EQ(first->OutputShape(1, 0), (std::vector<int64_t>{1}));
    EXPECT_FALSE(first->holds_loss());
    EXPECT_EQ(first->stages(), std::vector<int64_t>{0});
    LOOM_ASSIGN_OR_RETURN(Tensor input, first->Input(1));
    LOOM_ASSIGN_OR_RETURN(GptBatch batch, data.Microbatch(Layout(), 0, 1, 0));
    LOOM_ASSIGN_OR_RETURN(const absl::Span<const int64_t> ids, std::as_const(input).As<int64_t>());
    EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), batch.tokens);
    // Token ids are refused as floats: stage 0 takes i64.
    EXPECT_THAT(first->Forward(0, 1, *Tensor::Create(first->InputShape(0, 1))),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("takes i64 token ids")));
    EXPECT_THAT(first->Forward(1, 0, input),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stage 1 is not on rank 0")));
    EXPECT_THAT(first->Input(4), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("microbatch 4 is outside [0, 4)")));
    EXPECT_THAT(first->Backward(0, 0, *Tensor::Create({8, 2, 32})),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before its Forward")));
    EXPECT_TRUE(first->SupportsSplitBackward());
    EXPECT_THAT(first->BackwardInput(0, 0, *Tensor::Create({8, 2, 32})),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("BackwardInput of stage 0 microbatch 0 before its Forward")));
    EXPECT_THAT(first->BackwardWeight(0, 0),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("BackwardWeight of stage 0 microbatch 0 before its "
                                   "BackwardInput")));
    // I then W holds the work in between, counted as held activations.
    LOOM_RETURN_IF_ERROR(first->Forward(0, 1, input).status());
    // The forward's state is in microbatch 1's context, not in the model.
    EXPECT_EQ(first->SavedContexts(), 1);
    EXPECT_EQ(first->model(0).held_activation_bytes(), 0u);
    const size_t after_forward = first->held_activation_bytes();
    EXPECT_GT(after_forward, 0u);
    LOOM_ASSIGN_OR_RETURN(const Tensor dx,
                          first->BackwardInput(0, 1, *Tensor::Create({8, 2, 32})));
    EXPECT_EQ(dx.numel(), 0) << "stage 0 has no input gradient";
    EXPECT_EQ(first->PendingWeightWorks(), 1);
    EXPECT_EQ(first->SavedContexts(), 0);
    EXPECT_GT(first->held_activation_bytes(), 0u);
    EXPECT_LT(first->held_activation_bytes(), after_forward);
    LOOM_RETURN_IF_ERROR(first->BackwardWeight(0, 1));
    EXPECT_EQ(first->PendingWeightWorks(), 0);
    EXPECT_EQ(first->model(0).held_activation_bytes(), 0u);
    EXPECT_THAT(first->BackwardWeight(0, 1),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before its")));
    EXPECT_THAT(GptStageModule::Create(config, layout, 2, tp, data_fn, options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 is outside")));
    // 4 blocks over 3 stages: balanced, the inner stage takes the extra one.
    LOOM_ASSIGN_OR_RETURN(StageLayout three, StageLayout::Loop(3));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> middle,
                          GptStageModule::Create(config, three, 1, tp, data_fn, options));
    EXPECT_EQ(middle->model(1).options().first_block, 1);
    EXPECT_EQ(middle->model(1).options().end_block, 3);
    LOOM_ASSIGN_OR_RETURN(StageLayout five, StageLayout::Loop(5));
    EXPECT_THAT(GptStageModule::Create(config, five, 0, tp, data_fn, options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("num_layers=4 is fewer than the 5 stages")));
    LOOM_ASSIGN_OR_RETURN(StageLayout uneven, layout.WithLayers(3, {1, 2}));
    EXPECT_THAT(GptStageModule::Create(config, uneven, 0, tp, data_fn, options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has 3 layers, the model 4")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
