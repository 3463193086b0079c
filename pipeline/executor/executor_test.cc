#include "pipeline/executor/executor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "core/tensor.h"
#include "pipeline/executor/stage_module.h"
#include "pipeline/executor/tiny_mlp.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int64_t kLayers = 12;

// Uneven layers per stage for every stage count the tests use, with an empty
// stage where there are six or eight: the module passes its input through.
std::vector<int64_t> LayersPerStage(int64_t num_stages) {
  static const std::map<int64_t, std::vector<int64_t>> kSplits = {
      {1, {12}},
      {2, {5, 7}},
      {3, {3, 5, 4}},
      {4, {2, 4, 3, 3}},
      {6, {2, 3, 1, 2, 0, 4}},
      {8, {2, 1, 2, 1, 1, 2, 0, 3}},
  };
  return kSplits.at(num_stages);
}

// Widths that change from layer to layer, none equal to the row count, so a
// tensor sent to the wrong stage or transposed has the wrong shape.
MlpConfig MakeConfig(int64_t num_microbatches) {
  MlpConfig config;
  config.widths.clear();
  for (int64_t l = 0; l <= kLayers; ++l) config.widths.push_back(4 + (l * 5) % 7);
  config.rows = 3;
  config.num_microbatches = num_microbatches;
  config.seed = 2024;
  return config;
}

ExecutorOptions PatientOptions() {
  ExecutorOptions options;
  options.timeout = absl::Seconds(60);  // A bug fails within a minute, not at the default.
  return options;
}

// Endpoints of an inproc group, kept across steps as a training loop keeps them.
std::vector<std::unique_ptr<Transport>> MakeEndpoints(int size) {
  std::shared_ptr<InprocGroup> group = *InprocGroup::Create(size);
  std::vector<std::unique_ptr<Transport>> endpoints;
  for (int r = 0; r < size; ++r) endpoints.push_back(*group->Endpoint(r));
  return endpoints;
}

// RunRanks runs executors[r]->Run(endpoint r, modules[r]) on one thread per rank
// and returns every rank's result.
std::vector<absl::StatusOr<RankExecution>> RunRanks(
    const std::vector<const PipelineExecutor*>& executors,
    std::vector<std::unique_ptr<Transport>>& endpoints, const std::vector<StageModule*>& modules) {
  std::vector<absl::StatusOr<RankExecution>> results(
      executors.size(), absl::StatusOr<RankExecution>(absl::UnknownError("did not run")));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < executors.size(); ++r) {
    threads.emplace_back(
        [&, r] { results[r] = executors[r]->Run(*endpoints[r], *modules[r]); });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

std::vector<const PipelineExecutor*> Same(const PipelineExecutor& executor, int64_t ranks) {
  return std::vector<const PipelineExecutor*>(static_cast<size_t>(ranks), &executor);
}

std::vector<std::unique_ptr<MlpStageModule>> MakeModules(const MlpConfig& config,
                                                         const StageLayout& layout,
                                                         const MlpParameters& params,
                                                         const MlpData& data, bool split) {
  std::vector<std::unique_ptr<MlpStageModule>> modules;
  for (int64_t r = 0; r < layout.num_ranks(); ++r) {
    modules.push_back(*MlpStageModule::Create(config, layout, r, params, data, split));
  }
  return modules;
}

template <typename T>
std::vector<StageModule*> Pointers(const std::vector<std::unique_ptr<T>>& modules) {
  std::vector<StageModule*> pointers;
  for (const auto& module : modules) pointers.push_back(module.get());
  return pointers;
}

std::vector<const MlpStageModule*> ConstPointers(
    const std::vector<std::unique_ptr<MlpStageModule>>& modules) {
  std::vector<const MlpStageModule*> pointers;
  for (const auto& module : modules) pointers.push_back(module.get());
  return pointers;
}

// ---------------------------------------------------------------------------
// Every generator, trained for a few SGD steps, against the unpipelined model.

using ScheduleParam = std::tuple<PipelineScheduleKind, int64_t /*p*/, int64_t /*m*/>;

int64_t VirtualStages(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kInterleaved1F1B || kind == PipelineScheduleKind::kZeroBubbleV
             ? 2
             : 1;
}

bool IsZeroBubble(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kZeroBubbleH1 || kind == PipelineScheduleKind::kZeroBubbleV;
}

class ExecutorScheduleTest : public ::testing::TestWithParam<ScheduleParam> {};

// Three SGD steps: every step's gradients and losses, and the parameters after
// it, equal the single-threaded reference bit for bit. Bitwise holds because the
// module adds weight gradients in call order, every schedule calls each stage's
// backwards in ascending microbatch order (BackwardsRunInMicrobatchOrder below),
// and the reference adds them in that order too.
TEST_P(ExecutorScheduleTest, TrainsLikeTheUnpipelinedModel) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto kind = std::get<0>(GetParam());
  const auto p = std::get<1>(GetParam());
  const auto m = std::get<2>(GetParam());
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule schedule, MakeSchedule(kind, p, m, VirtualStages(kind)));
  LOOM_ASSERT_OK_AND_ASSIGN(
      const StageLayout layout,
      schedule.layout.WithLayers(kLayers, LayersPerStage(schedule.layout.num_stages())));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(schedule, PatientOptions()));

  const MlpConfig config = MakeConfig(m);
  const MlpData data = MakeMlpData(config);
  MlpParameters reference_params = MakeMlpParameters(config);
  // Zero-bubble schedules need I and W; the others run on modules without them.
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(config, layout, reference_params, data, /*split=*/IsZeroBubble(kind));
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(static_cast<int>(p));

  const float learning_rate = 0.5f;
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const MlpGradients expected = MlpReference(config, reference_params, data);
    for (auto& module : modules) module->BeginStep();
    const std::vector<absl::StatusOr<RankExecution>> results =
        RunRanks(Same(executor, p), endpoints, Pointers(modules));
    for (int64_t r = 0; r < p; ++r) {
      ASSERT_THAT(results[r], IsOk()) << "rank " << r;
      // The report lists the rank's whole program in order, with sane times.
      const std::vector<Action>& program = executor.schedule().ranks[r];
      ASSERT_EQ(results[r]->actions.size(), program.size());
      for (size_t i = 0; i < program.size(); ++i) {
        EXPECT_EQ(results[r]->actions[i].action, program[i]);
        EXPECT_LE(results[r]->actions[i].start, results[r]->actions[i].end);
      }
      EXPECT_LE(results[r]->start, results[r]->end);
      EXPECT_EQ(modules[r]->SavedActivations(), 0) << "rank " << r;
    }
    const MlpGradients got = GatherGradients(config, ConstPointers(modules));
    EXPECT_EQ(got.grads, expected.grads);
    EXPECT_EQ(got.microbatch_losses, expected.microbatch_losses);
    EXPECT_EQ(got.loss, expected.loss);
    losses.push_back(got.loss);

    for (auto& module : modules) module->ApplySgd(learning_rate);
    ApplySgd(learning_rate, expected.grads, reference_params);
    EXPECT_EQ(GatherParameters(config, ConstPointers(modules)), reference_params);
  }
  EXPECT_LT(losses[1], losses[0]);
  EXPECT_LT(losses[2], losses[1]);
}

std::vector<ScheduleParam> ScheduleParams() {
  std::vector<ScheduleParam> params;
  for (PipelineScheduleKind kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
        PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
        PipelineScheduleKind::kZeroBubbleV}) {
    for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {2, 4}, {3, 6}, {4, 8}, {2, 1}, {3, 2}}) {
      // Interleaved 1F1B takes microbatches in groups of p.
      if (kind == PipelineScheduleKind::kInterleaved1F1B && m % p != 0) continue;
      params.emplace_back(kind, p, m);
    }
  }
  return params;
}

std::string ScheduleParamName(const ::testing::TestParamInfo<ScheduleParam>& param_info) {
  std::string name(PipelineScheduleName(std::get<0>(param_info.param)));
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return absl::StrCat(name, "_p", std::get<1>(param_info.param), "_m",
                      std::get<2>(param_info.param));
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, ExecutorScheduleTest, ::testing::ValuesIn(ScheduleParams()),
                         ScheduleParamName);

// ---------------------------------------------------------------------------
// Forward-only runs (an evaluation) on a training schedule's layout.

// LastStageOutputs passes every call on to `inner` and keeps what Loss is given:
// the last stage's output of each microbatch.
class LastStageOutputs : public StageModule {
 public:
  explicit LastStageOutputs(StageModule& inner) : inner_(inner) {}

  std::vector<int64_t> InputShape(int64_t stage, int64_t microbatch) const override {
    return inner_.InputShape(stage, microbatch);
  }
  std::vector<int64_t> OutputShape(int64_t stage, int64_t microbatch) const override {
    return inner_.OutputShape(stage, microbatch);
  }
  absl::StatusOr<Tensor> Input(int64_t microbatch) override { return inner_.Input(microbatch); }
  absl::StatusOr<Tensor> Loss(int64_t microbatch, const Tensor& output) override {
    outputs[microbatch] = output.ToF32();
    return inner_.Loss(microbatch, output);
  }
  absl::StatusOr<Tensor> Forward(int64_t stage, int64_t microbatch,
                                    const Tensor& input) override {
    return inner_.Forward(stage, microbatch, input);
  }
  absl::StatusOr<Tensor> Backward(int64_t stage, int64_t microbatch,
                                     const Tensor& output_grad) override {
    return inner_.Backward(stage, microbatch, output_grad);
  }
  bool SupportsSplitBackward() const override { return inner_.SupportsSplitBackward(); }
  absl::StatusOr<Tensor> BackwardInput(int64_t stage, int64_t microbatch,
                                          const Tensor& output_grad) override {
    return inner_.BackwardInput(stage, microbatch, output_grad);
  }
  absl::Status BackwardWeight(int64_t stage, int64_t microbatch) override {
    return inner_.BackwardWeight(stage, microbatch);
  }

  std::map<int64_t, std::vector<float>> outputs;

 private:
  StageModule& inner_;
};

class ExecutorForwardOnlyTest : public ::testing::TestWithParam<ScheduleParam> {};

// An evaluation before a training step computes that step's last-stage outputs
// and losses bit for bit and no gradient; the step after it is the reference's;
// an evaluation after the step leaves its gradients alone, and the next step is
// the reference's again.
TEST_P(ExecutorForwardOnlyTest, EvaluatesLikeTheForwardOfATrainingStep) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto kind = std::get<0>(GetParam());
  const auto p = std::get<1>(GetParam());
  const auto m = std::get<2>(GetParam());
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule training, MakeSchedule(kind, p, m, VirtualStages(kind)));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule evaluation, MakeForwardOnlySchedule(training.layout, m));
  LOOM_ASSERT_OK_AND_ASSIGN(
      const StageLayout layout,
      training.layout.WithLayers(kLayers, LayersPerStage(training.layout.num_stages())));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor train,
                            PipelineExecutor::Create(training, PatientOptions()));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor eval,
                            PipelineExecutor::Create(evaluation, PatientOptions()));
  EXPECT_FALSE(train.forward_only());
  EXPECT_TRUE(eval.forward_only());
  for (const std::vector<Action>& program : eval.schedule().ranks) {
    for (const Action& a : program) {
      EXPECT_TRUE(a.kind == ActionKind::kForward || a.kind == ActionKind::kSendForward ||
                  a.kind == ActionKind::kRecvForward)
          << a;
    }
  }

  const MlpConfig config = MakeConfig(m);
  const MlpData data = MakeMlpData(config);
  MlpParameters params = MakeMlpParameters(config);
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(config, layout, params, data, /*split=*/IsZeroBubble(kind));
  std::vector<std::unique_ptr<LastStageOutputs>> recorders;
  for (const auto& module : modules) {
    recorders.push_back(std::make_unique<LastStageOutputs>(*module));
  }
  LastStageOutputs& last = *recorders[layout.RankOf(layout.num_stages() - 1)];
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(static_cast<int>(p));
  const auto run = [&](const PipelineExecutor& executor) {
    const std::vector<absl::StatusOr<RankExecution>> results =
        RunRanks(Same(executor, p), endpoints, Pointers(recorders));
    for (int64_t r = 0; r < p; ++r) ASSERT_THAT(results[r], IsOk()) << "rank " << r;
  };
  const MlpParameters zero = GatherGradients(config, ConstPointers(modules)).grads;
  MlpGradients expected = MlpReference(config, params, data);

  for (auto& module : modules) module->BeginStep();
  run(eval);
  const std::map<int64_t, std::vector<float>> evaluated = last.outputs;
  EXPECT_EQ(evaluated.size(), static_cast<size_t>(m));
  MlpGradients got = GatherGradients(config, ConstPointers(modules));
  EXPECT_EQ(got.microbatch_losses, expected.microbatch_losses);
  EXPECT_EQ(got.loss, expected.loss);
  EXPECT_EQ(got.grads, zero);

  for (auto& module : modules) module->BeginStep();
  last.outputs.clear();
  run(train);
  EXPECT_EQ(last.outputs, evaluated);
  got = GatherGradients(config, ConstPointers(modules));
  EXPECT_EQ(got.grads, expected.grads);
  EXPECT_EQ(got.loss, expected.loss);

  run(eval);
  got = GatherGradients(config, ConstPointers(modules));
  EXPECT_EQ(got.grads, expected.grads);
  EXPECT_EQ(got.microbatch_losses, expected.microbatch_losses);

  for (auto& module : modules) module->ApplySgd(0.5f);
  ApplySgd(0.5f, expected.grads, params);
  expected = MlpReference(config, params, data);
  for (auto& module : modules) module->BeginStep();
  run(train);
  got = GatherGradients(config, ConstPointers(modules));
  EXPECT_EQ(got.grads, expected.grads);
  EXPECT_EQ(got.loss, expected.loss);
}

// One or two stages per rank, loop and V-shape, one rank and several.
std::vector<ScheduleParam> ForwardOnlyParams() {
  return {{PipelineScheduleKind::k1F1B, 1, 2},
          {PipelineScheduleKind::k1F1B, 3, 4},
          {PipelineScheduleKind::kZeroBubbleH1, 2, 3},
          {PipelineScheduleKind::kInterleaved1F1B, 2, 4},
          {PipelineScheduleKind::kZeroBubbleV, 2, 3}};
}

INSTANTIATE_TEST_SUITE_P(TrainingLayouts, ExecutorForwardOnlyTest,
                         ::testing::ValuesIn(ForwardOnlyParams()), ScheduleParamName);

// The premise of the bitwise comparison above: every generator runs each stage's
// weight-gradient actions (B, or W) in ascending microbatch order.
TEST(ExecutorTest, BackwardsRunInMicrobatchOrder) {
  int checked = 0;
  for (PipelineScheduleKind kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
        PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
        PipelineScheduleKind::kZeroBubbleV}) {
    for (int64_t p = 1; p <= 6; ++p) {
      for (int64_t m = 1; m <= 16; ++m) {
        for (int64_t v = 1; v <= (kind == PipelineScheduleKind::kInterleaved1F1B ? 3 : 1); ++v) {
          if (kind == PipelineScheduleKind::kInterleaved1F1B && m % p != 0) continue;
          const int64_t stages_per_rank = kind == PipelineScheduleKind::kZeroBubbleV ? 2 : v;
          LOOM_ASSERT_OK_AND_ASSIGN(Schedule schedule, MakeSchedule(kind, p, m, stages_per_rank));
          std::map<int64_t, int64_t> next;  // stage -> next microbatch expected
          for (const std::vector<Action>& program : schedule.ranks) {
            for (const Action& action : program) {
              if (action.kind != ActionKind::kBackward &&
                  action.kind != ActionKind::kBackwardWeight) {
                continue;
              }
              EXPECT_EQ(action.microbatch, next[action.stage]++)
                  << schedule.name << " p=" << p << " m=" << m << " v=" << v << ": "
                  << action.ToString();
            }
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

// ---------------------------------------------------------------------------
// Refusals and failures: each names its values, and nothing waits past its
// deadline.

struct Fixture {
  MlpConfig config;
  MlpParameters params;
  MlpData data;
  StageLayout layout;
};

Fixture TwoRankFixture(int64_t m) {
  Fixture f;
  f.config = MakeConfig(m);
  f.params = MakeMlpParameters(f.config);
  f.data = MakeMlpData(f.config);
  f.layout = *StageLayout::Loop(2)->WithLayers(kLayers, LayersPerStage(2));
  return f;
}

TEST(ExecutorTest, ZeroBubbleNeedsASplitBackward) {
  const Fixture f = TwoRankFixture(4);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*MakeZeroBubbleH1Schedule(2, 4)));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, /*split=*/false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const auto results = RunRanks(Same(executor, 2), endpoints, Pointers(modules));
  // Both refuse before sending anything, so each reports its own refusal.
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("zb-h1 rank 0 step 5 (0I0): the schedule splits "
                                             "backwards into I and W, and this rank's stage "
                                             "module does not support that")));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("zb-h1 rank 1 step 2 (1I0)")));
}

// Rank 0 runs 1F1B with its first two forwards swapped, rank 1 the plain 1F1B.
// Each schedule verifies on its own; together they disagree on the order of the
// activations rank 0 sends, which rank 1 sees in the first header.
Schedule SwappedOneFOneB(int64_t m) {
  Schedule swapped = *Make1F1BSchedule(2, m);
  std::swap(swapped.ranks[0][0], swapped.ranks[0][1]);  // 0F1 before 0F0
  return swapped;
}

TEST(ExecutorTest, RanksRunningDifferentOrdersFailAtTheFirstMessage) {
  const Fixture f = TwoRankFixture(4);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor swapped,
                            PipelineExecutor::Create(SwappedOneFOneB(4), PatientOptions()));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor plain,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 4), PatientOptions()));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const absl::Time start = absl::Now();
  const auto results = RunRanks({&swapped, &plain}, endpoints, Pointers(modules));
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("1f1b rank 1 step 0 (1RECV_F0) expects rank 0's 0SEND_F0, but "
                                 "rank 0 sent 0SEND_F1: the ranks run different schedules")));
  // Rank 1 aborted its endpoint with that error, so rank 0 learns it at once.
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable,
                                   AllOf(HasSubstr("1f1b rank 0"), HasSubstr("rank 1 aborted"),
                                         HasSubstr("expects rank 0's 0SEND_F0"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));  // Not the 60 s deadline.
}

TEST(ExecutorTest, WithoutAbortThePeerTimesOutNamingTheActionAndPeer) {
  const Fixture f = TwoRankFixture(4);
  ExecutorOptions options;
  options.timeout = absl::Milliseconds(500);
  options.abort_on_error = false;
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor swapped,
                            PipelineExecutor::Create(SwappedOneFOneB(4), options));
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor plain,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 4), options));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const absl::Time start = absl::Now();
  const auto results = RunRanks({&swapped, &plain}, endpoints, Pointers(modules));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("expects rank 0's 0SEND_F0")));
  // Rank 0 sent F1 and F0 without waiting, then waits at its first receive for
  // B0's gradient, which rank 1 never sends.
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1f1b rank 0 step 4 (0RECV_B0) waiting for rank 1's 1SEND_B0")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(ExecutorTest, APeerThatNeverRunsIsDeadlineExceeded) {
  const Fixture f = TwoRankFixture(2);
  ExecutorOptions options;
  options.timeout = absl::Milliseconds(300);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 2), options));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  // Rank 0 alone: it sends F0 and F1 without waiting, then waits for B0.
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  EXPECT_THAT(executor.Run(*endpoints[0], *modules[0]),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("1f1b rank 0 step 4 (0RECV_B0) waiting for rank 1's "
                                         "1SEND_B0"),
                             HasSubstr("receive from rank 1"))));
  // Rank 1 alone: its first action waits for rank 0's activation.
  endpoints = MakeEndpoints(2);
  EXPECT_THAT(executor.Run(*endpoints[1], *modules[1]),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1f1b rank 1 step 0 (1RECV_F0) waiting for rank 0's 0SEND_F0")));
}

// A receive posted after the peer aborted fails at once, and says where.
TEST(ExecutorTest, AReceiveAfterThePeerAbortedNamesTheAction) {
  const Fixture f = TwoRankFixture(2);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 2), PatientOptions()));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  endpoints[0]->Abort(absl::InternalError("rank 0 gave up"));
  EXPECT_THAT(executor.Run(*endpoints[1], *modules[1]),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("1f1b rank 1 step 0 (1RECV_F0) waiting for rank 0's 0SEND_F0: "
                                 "rank 0 aborted: rank 0 gave up")));
}

// Rank 1's model has another width where the two stages meet: its module expects
// activations of 9 columns, rank 0's sends 8.
TEST(ExecutorTest, ShapesThatDisagreeAcrossRanksFailNamingBoth) {
  const Fixture f = TwoRankFixture(2);
  MlpConfig other = f.config;
  other.widths[5] = 9;  // The input width of stage 1 (layers 5..11).
  const MlpParameters other_params = MakeMlpParameters(other);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 2), PatientOptions()));
  std::vector<std::unique_ptr<StageModule>> modules;
  modules.push_back(*MlpStageModule::Create(f.config, f.layout, 0, f.params, f.data));
  modules.push_back(*MlpStageModule::Create(other, f.layout, 1, other_params, f.data));
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const auto results = RunRanks(Same(executor, 2), endpoints, Pointers(modules));
  ASSERT_EQ(f.config.widths[5], 8);
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("1f1b rank 1 step 0 (1RECV_F0): rank 0 sent 0SEND_F0 with shape "
                                 "[3,8] (96 bytes), but rank 1's stage module declares [3,9] as "
                                 "stage 1's input for microbatch 0")));
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("[3,9]")));
}

// With verification off, a program that lost its receive fails where the data is
// missing; with it on, Create refuses the schedule.
TEST(ExecutorTest, UnverifiedBrokenScheduleFailsCleanly) {
  const Fixture f = TwoRankFixture(2);
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule broken, Lower(*Make1F1BSchedule(2, 2)));
  ASSERT_EQ(broken.ranks[1][0].ToString(), "1RECV_F0");
  broken.ranks[1].erase(broken.ranks[1].begin());
  EXPECT_THAT(PipelineExecutor::Create(broken),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1RECV_F0")));

  ExecutorOptions options = PatientOptions();
  options.verify = false;
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(broken, options));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const auto results = RunRanks(Same(executor, 2), endpoints, Pointers(modules));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr("1f1b rank 1 step 0 (1F0): the input of stage 1 for "
                                             "microbatch 0 is not there")));
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 1 aborted")));
}

// A module whose Forward hands the next stage on the same rank a tensor of the
// wrong shape is caught before the next stage runs.
class WrongShapeModule : public StageModule {
 public:
  std::vector<int64_t> InputShape(int64_t stage, int64_t) const override {
    return {2, stage == 0 ? 3 : 4};
  }
  std::vector<int64_t> OutputShape(int64_t, int64_t) const override { return {2, 4}; }
  absl::StatusOr<Tensor> Input(int64_t) override { return *Tensor::Create({2, 3}); }
  absl::StatusOr<Tensor> Loss(int64_t, const Tensor& y) override { return y.Clone(); }
  absl::StatusOr<Tensor> Forward(int64_t, int64_t, const Tensor&) override {
    return *Tensor::Create({2, 5});  // Not the declared [2,4].
  }
  absl::StatusOr<Tensor> Backward(int64_t, int64_t, const Tensor&) override {
    return *Tensor::Create({2, 3});
  }
};

TEST(ExecutorTest, LocalHandOffOfTheWrongShapeIsCaught) {
  // Interleaved 1F1B on one rank: stages 0 and 1 both live on rank 0.
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*MakeInterleaved1F1BSchedule(1, 1, 2)));
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(1);
  WrongShapeModule module;
  EXPECT_THAT(executor.Run(*endpoints[0], module),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("interleaved-1f1b rank 0 step 1 (1F0): stage 1's input for "
                                 "microbatch 0 has shape [2,5], the stage module declares [2,4]")));
}

TEST(ExecutorTest, CreateRefusesBadOptionsAndSchedules) {
  const Schedule schedule = *Make1F1BSchedule(2, 2);
  ExecutorOptions options;
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(PipelineExecutor::Create(schedule, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ExecutorOptions.timeout 0 is not positive")));
  options = ExecutorOptions();
  options.max_pending_sends = 0;
  EXPECT_THAT(PipelineExecutor::Create(schedule, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ExecutorOptions.max_pending_sends 0 is below 1")));

  // Verify's deadlock (sends pinned in the wrong order) comes back as it is.
  Schedule deadlock = *Lower(schedule);
  std::swap(deadlock.ranks[1][3], deadlock.ranks[1][4]);
  EXPECT_THAT(PipelineExecutor::Create(deadlock),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("deadlock under rendezvous semantics")));

  // Some backwards but not all: neither training nor forward-only.
  Schedule partial = *MakeForwardOnlySchedule(2, 2);
  partial.ranks[1].push_back({ActionKind::kBackward, 1, 1});
  EXPECT_THAT(PipelineExecutor::Create(partial),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stage 0 microbatch 0 has no backward: neither 0B0 nor 0I0 is "
                                 "on rank 0")));

  // Even unverified, an action outside the layout is refused.
  Schedule outside = *Lower(schedule);
  outside.ranks[0].push_back({ActionKind::kForward, 1, 0});
  options = ExecutorOptions();
  options.verify = false;
  EXPECT_THAT(PipelineExecutor::Create(outside, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1f1b rank 0 step 8 (1F0): stage 1 is not on this rank")));

  // Its two tags must stay below the Communicators' range (transport.h).
  options = ExecutorOptions();
  options.tag_base = kCommunicatorTagsBegin - 1;
  EXPECT_THAT(PipelineExecutor::Create(schedule, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must lie below 1099511627776 (2^40)")));
}

// Run holds its two tags on the endpoint: another user of them is refused by name.
TEST(ExecutorTest, TagsHeldByAnotherUserOfTheEndpointAreRefused) {
  const Fixture f = TwoRankFixture(2);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 2)));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(2);
  const Tag base = ExecutorOptions().tag_base;
  LOOM_ASSERT_OK_AND_ASSIGN(const TagReservation held,
                            endpoints[0]->ReserveTags(base + 1, base + 5, "another pipeline"));
  EXPECT_THAT(executor.Run(*endpoints[0], *modules[0]),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("which another pipeline holds on this endpoint")));
}

TEST(ExecutorTest, TransportOfAnotherSizeIsRefused) {
  const Fixture f = TwoRankFixture(2);
  LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                            PipelineExecutor::Create(*Make1F1BSchedule(2, 2)));
  std::vector<std::unique_ptr<MlpStageModule>> modules =
      MakeModules(f.config, f.layout, f.params, f.data, false);
  std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(3);
  EXPECT_THAT(executor.Run(*endpoints[0], *modules[0]),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("schedule 1f1b has 2 ranks, the inproc transport's group has 3")));
}

// One outstanding send at a time still runs every schedule: waiting for a send
// later than a blocking send would never deadlocks a verified schedule.
TEST(ExecutorTest, OnePendingSendIsEnough) {
  for (PipelineScheduleKind kind :
       {PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleV}) {
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule schedule, MakeSchedule(kind, 3, 6, 2));
    LOOM_ASSERT_OK_AND_ASSIGN(const StageLayout layout,
                              schedule.layout.WithLayers(kLayers, LayersPerStage(6)));
    ExecutorOptions options = PatientOptions();
    options.max_pending_sends = 1;
    LOOM_ASSERT_OK_AND_ASSIGN(const PipelineExecutor executor,
                              PipelineExecutor::Create(schedule, options));
    const MlpConfig config = MakeConfig(6);
    const MlpParameters params = MakeMlpParameters(config);
    const MlpData data = MakeMlpData(config);
    std::vector<std::unique_ptr<MlpStageModule>> modules =
        MakeModules(config, layout, params, data, true);
    std::vector<std::unique_ptr<Transport>> endpoints = MakeEndpoints(3);
    const auto results = RunRanks(Same(executor, 3), endpoints, Pointers(modules));
    for (int r = 0; r < 3; ++r) EXPECT_THAT(results[r], IsOk()) << schedule.name << " rank " << r;
    EXPECT_EQ(GatherGradients(config, ConstPointers(modules)).grads,
              MlpReference(config, params, data).grads);
  }
}

}  // namespace
}  // namespace loom
