// A GptModel that borrows its weights from a ParameterSource computes bitwise
// what the model that owns the same values computes: losses, input gradients and
// parameter gradients, at tp 1 and 2, with and without full recompute, with the
// gradients sent to the source or kept in the model, with the split backward of
// the zero-bubble schedules, and in bf16 with the source's bf16 copies multiplied
// as they are. The source here is a test store that checks the protocol (acquire
// only inside an acquiring pass, gradients only in a pass that takes them) and
// records the passes.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/parameter_source.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/internal/own_parameter_store.h"
#include "models/gpt/internal/train_testing.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using train_testing::ExpectAllOk;
using train_testing::RandomizeParameters;
using train_testing::RunTp;
using train_testing::SeededIds;
using train_testing::TinyConfig;

// TestStore: every parameter whole in memory, gradients summed in memory, and the
// protocol checked on every call.
class TestStore : public ParameterSource {
 public:
  // keep_bf16: also keep each parameter's bf16 rounding and lend it (AcquireBf16),
  // as a mixed-precision source does.
  explicit TestStore(const std::vector<GptParameter>& params, bool keep_bf16 = false)
      : keep_bf16_(keep_bf16) {
    for (const GptParameter& p : params) {
      values_.emplace_back(p.values.begin(), p.values.end());
      grads_.emplace_back(p.values.size(), 0.0f);
      values16_.emplace_back();
      for (const float v : p.values) values16_.back().push_back(ToBFloat16(v));
    }
  }

  absl::Status BeginParameterPass(ParameterPass pass) override {
    if (in_pass_) return absl::FailedPreconditionError("TestStore: BeginParameterPass in a pass");
    in_pass_ = true;
    pass_ = pass;
    passes_.push_back(pass);
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Span<const float>> Acquire(int param) override {
    if (!in_pass_ || pass_ == ParameterPass::kGradients) {
      return absl::FailedPreconditionError(absl::StrCat("TestStore: Acquire(", param, ") outside an acquiring pass"));
    }
    if (fail_acquire_ == param) return absl::UnavailableError("TestStore: injected failure");
    ++acquires_;
    return absl::MakeConstSpan(values_.at(static_cast<size_t>(param)));
  }
  absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param) override {
    if (!keep_bf16_) return ParameterSource::AcquireBf16(param);
    if (!in_pass_ || pass_ == ParameterPass::kGradients) {
      return absl::FailedPreconditionError("TestStore: AcquireBf16 outside an acquiring pass");
    }
    ++bf16_acquires_;
    return absl::MakeConstSpan(values16_.at(static_cast<size_t>(param)));
  }
  absl::Status AddGrad(int param, absl::Span<const float> grad) override {
    if (!in_pass_ || (pass_ != ParameterPass::kBackward && pass_ != ParameterPass::kGradients)) {
      return absl::FailedPreconditionError(absl::StrCat("TestStore: AddGrad(", param, ") outside a gradient pass"));
    }
    std::vector<float>& g = grads_.at(static_cast<size_t>(param));
    if (g.size() != grad.size()) return absl::InvalidArgumentError("TestStore: gradient size");
    for (size_t i = 0; i < g.size(); ++i) g[i] += grad[i];
    return absl::OkStatus();
  }
  absl::Status EndPass() override {
    if (!in_pass_) return absl::FailedPreconditionError("TestStore: EndPass outside a pass");
    in_pass_ = false;
    return absl::OkStatus();
  }

  const std::vector<float>& grad(size_t k) const { return grads_[k]; }
  const std::vector<ParameterPass>& passes() const { return passes_; }
  int64_t acquires() const { return acquires_; }
  int64_t bf16_acquires() const { return bf16_acquires_; }
  bool in_pass() const { return in_pass_; }
  void FailAcquireOf(int param) { fail_acquire_ = param; }

 private:
  bool keep_bf16_;
  std::vector<std::vector<float>> values_, grads_;
  std::vector<std::vector<BFloat16>> values16_;
  std::vector<ParameterPass> passes_;
  ParameterPass pass_ = ParameterPass::kForward;
  bool in_pass_ = false;
  int64_t acquires_ = 0;
  int64_t bf16_acquires_ = 0;
  int fail_acquire_ = -1;
};

struct Case {
  int tp;
  Recompute recompute;
  GptModel::GradientHome home;
  bool split;  // BackwardStageInput + BackwardStageWeight
  bool bf16 = false;  // a kBf16 model; the source lends bf16 copies too
};

std::string Name(const Case& c) {
  return absl::StrCat("tp ", c.tp, c.recompute == Recompute::kFull ? " recompute" : "",
                      c.home == GptModel::GradientHome::kSource ? " grads to source"
                                                                : " grads in model",
                      c.split ? " split backward" : "", c.bf16 ? " bf16" : "");
}

// Two microbatches, forward and backward each, on both models.
absl::Status RunBoth(const Case& c, Communicator& tp) {
  const GptConfig config = TinyConfig();
  GptModelOptions options;
  options.recompute = c.recompute;
  options.precision = c.bf16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> owner, GptModel::Create(config, tp, options));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> borrower,
                        GptModel::Create(config, tp, options));
  std::vector<GptParameter> owned = owner->Parameters();
  LOOM_RETURN_IF_ERROR(RandomizeParameters(absl::MakeSpan(owned), 11, 0.5f, c.tp, tp.rank()));
  if (c.bf16) {
    // A bf16 model's weights are bf16 values (in f32 storage): the owner rounds them
    // inside every product, the borrower multiplies the store's bf16 copies.
    for (GptParameter& p : owned) {
      for (float& v : p.values) v = ToFloat(ToBFloat16(v));
    }
  }
  TestStore store(owned, c.bf16);
  LOOM_RETURN_IF_ERROR(borrower->UseParameterSource(&store, c.home));
  const std::vector<GptParameter> lent = borrower->Parameters();
  EXPECT_EQ(lent.size(), owned.size());
  for (size_t k = 0; k < lent.size(); ++k) {
    EXPECT_EQ(lent[k].name, owned[k].name);
    EXPECT_EQ(lent[k].shape, owned[k].shape);
    EXPECT_TRUE(lent[k].values.empty()) << lent[k].name << ": the model holds no weights";
    EXPECT_EQ(lent[k].grad.empty(), c.home == GptModel::GradientHome::kSource) << lent[k].name;
  }
  const int64_t batch = 2;
  LOOM_ASSIGN_OR_RETURN(Tensor loss_grad, Tensor::FromValues({1}, {0.5f}));
  for (uint64_t mb = 0; mb < 2; ++mb) {
    const std::vector<int64_t> tokens = SeededIds(batch * config.seq_len, config.vocab, 21 + mb);
    const std::vector<int64_t> targets = SeededIds(batch * config.seq_len, config.vocab, 41 + mb);
    GptStageInput input;
    input.tokens = tokens;
    input.targets = targets;
    LOOM_ASSIGN_OR_RETURN(Tensor owner_loss, owner->ForwardStage(input));
    LOOM_ASSIGN_OR_RETURN(Tensor borrower_loss, borrower->ForwardStage(input));
    EXPECT_EQ(owner_loss.ToF32(), borrower_loss.ToF32()) << "microbatch " << mb;
    if (c.split) {
      GptWeightGradWork owner_work, borrower_work;
      LOOM_RETURN_IF_ERROR(owner->BackwardStageInput(loss_grad, owner_work).status());
      LOOM_RETURN_IF_ERROR(borrower->BackwardStageInput(loss_grad, borrower_work).status());
      LOOM_RETURN_IF_ERROR(owner->BackwardStageWeight(owner_work));
      LOOM_RETURN_IF_ERROR(borrower->BackwardStageWeight(borrower_work));
    } else {
      LOOM_RETURN_IF_ERROR(owner->BackwardStage(loss_grad).status());
      LOOM_RETURN_IF_ERROR(borrower->BackwardStage(loss_grad).status());
    }
  }
  owned = owner->Parameters();
  const std::vector<GptParameter> borrowed = borrower->Parameters();
  for (size_t k = 0; k < owned.size(); ++k) {
    const std::vector<float> expected(owned[k].grad.begin(), owned[k].grad.end());
    const std::vector<float> got =
        c.home == GptModel::GradientHome::kSource
            ? store.grad(k)
            : std::vector<float>(borrowed[k].grad.begin(), borrowed[k].grad.end());
    EXPECT_EQ(got, expected) << owned[k].name << ": gradients differ";
  }
  EXPECT_FALSE(store.in_pass());
  EXPECT_GT(store.acquires(), 0);
  // Four projections per block and the LM head, per acquiring pass; none in f32.
  if (c.bf16) {
    EXPECT_GT(store.bf16_acquires(), 0);
  } else {
    EXPECT_EQ(store.bf16_acquires(), 0);
  }
  return absl::OkStatus();
}

TEST(GptBorrowedWeightsTest, BorrowingModelIsBitwiseTheOwningModel) {
  for (const int tp : {1, 2}) {
    for (const Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
      for (const GptModel::GradientHome home :
           {GptModel::GradientHome::kSource, GptModel::GradientHome::kModel}) {
        for (const bool split : {false, true}) {
          for (const bool bf16 : {false, true}) {
            const Case c{tp, recompute, home, split, bf16};
            SCOPED_TRACE(Name(c));
            ExpectAllOk(RunTp(tp, [&](Communicator& comm) { return RunBoth(c, comm); }));
          }
        }
      }
    }
  }
}

// The passes a step makes: a forward pass, then a backward pass that takes the
// gradients (kSource) or regathers only (kModel); the split backward regathers
// and then hands the weight gradients over in a gradients-only pass.
TEST(GptBorrowedWeightsTest, EachCallIsOnePassOfTheRightKind) {
  ExpectAllOk(RunTp(1, [&](Communicator& comm) -> absl::Status {
    const GptConfig config = TinyConfig();
    const std::vector<int64_t> tokens = SeededIds(2 * config.seq_len, config.vocab, 5);
    GptStageInput input;
    input.tokens = tokens;
    input.targets = tokens;
    LOOM_ASSIGN_OR_RETURN(Tensor one, Tensor::FromValues({1}, {1.0f}));
    for (const GptModel::GradientHome home :
         {GptModel::GradientHome::kSource, GptModel::GradientHome::kModel}) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, comm));
      TestStore store(model->Parameters());
      LOOM_RETURN_IF_ERROR(model->UseParameterSource(&store, home));
      LOOM_RETURN_IF_ERROR(model->ForwardStage(input).status());
      LOOM_RETURN_IF_ERROR(model->BackwardStage(one).status());
      LOOM_RETURN_IF_ERROR(model->ForwardStage(input).status());
      GptWeightGradWork work;
      LOOM_RETURN_IF_ERROR(model->BackwardStageInput(one, work).status());
      LOOM_RETURN_IF_ERROR(model->BackwardStageWeight(work));
      if (home == GptModel::GradientHome::kSource) {
        EXPECT_THAT(store.passes(),
                    ElementsAre(ParameterPass::kForward, ParameterPass::kBackward,
                                ParameterPass::kForward, ParameterPass::kRegather,
                                ParameterPass::kGradients));
      } else {
        EXPECT_THAT(store.passes(),
                    ElementsAre(ParameterPass::kForward, ParameterPass::kRegather,
                                ParameterPass::kForward, ParameterPass::kRegather));
      }
      EXPECT_THAT(model->UseParameterSource(&store, home),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("twice")));
    }
    return absl::OkStatus();
  }));
}

// A source that fails mid-pass: the call returns its error, the pass still ends
// (nothing stays lent), and the model runs again once the source recovers.
TEST(GptBorrowedWeightsTest, ASourceErrorEndsThePassAndNamesTheCause) {
  ExpectAllOk(RunTp(1, [&](Communicator& comm) -> absl::Status {
    const GptConfig config = TinyConfig();
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, comm));
    TestStore store(model->Parameters());
    LOOM_RETURN_IF_ERROR(model->UseParameterSource(&store, GptModel::GradientHome::kSource));
    const std::vector<int64_t> tokens = SeededIds(config.seq_len, config.vocab, 5);
    GptStageInput input;
    input.tokens = tokens;
    input.targets = tokens;
    store.FailAcquireOf(2 + GptBlock::kNumParameters + 3);  // block 1's qkv bias
    EXPECT_THAT(model->ForwardStage(input),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
    EXPECT_FALSE(store.in_pass());
    store.FailAcquireOf(-1);
    LOOM_RETURN_IF_ERROR(model->ForwardStage(input).status());
    EXPECT_THAT(GptModel::Create(config, comm).value()->UseParameterSource(
                    nullptr, GptModel::GradientHome::kSource),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nullptr")));
    return absl::OkStatus();
  }));
}

// The owning model is a borrowing model whose source is a store of its own: a
// value written through Parameters() is what the next forward computes with, and
// the store refuses calls outside the protocol with a message naming them.
TEST(GptBorrowedWeightsTest, TheOwningModelBorrowsFromAStoreOfItsOwn) {
  ExpectAllOk(RunTp(1, [&](Communicator& comm) -> absl::Status {
    const GptConfig config = TinyConfig();
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, comm));
    EXPECT_FALSE(model->borrows_weights());
    const std::vector<int64_t> tokens = SeededIds(config.seq_len, config.vocab, 5);
    LOOM_ASSIGN_OR_RETURN(const float before, model->Forward(tokens, tokens));
    std::vector<GptParameter> params = model->Parameters();
    GptParameter& head = params.back();
    EXPECT_EQ(head.name, "head.weight");
    for (float& w : head.values) w = 0.0f;  // uniform logits: the loss is log V
    LOOM_ASSIGN_OR_RETURN(const float after, model->Forward(tokens, tokens));
    EXPECT_NE(before, after);
    EXPECT_NEAR(after, std::log(static_cast<float>(config.vocab)), 1e-5);
    TestStore store(model->Parameters());
    LOOM_RETURN_IF_ERROR(model->UseParameterSource(&store, GptModel::GradientHome::kModel));
    EXPECT_TRUE(model->borrows_weights());
    EXPECT_TRUE(model->Parameters().back().values.empty());
    return absl::OkStatus();
  }));
  const std::vector<float> a = {1, 2}, b = {3};
  const std::vector<absl::Span<const float>> initial = {a, b};
  gpt_internal::OwnParameterStore store(initial);
  EXPECT_THAT(store.Acquire(0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("outside a pass")));
  LOOM_ASSERT_OK(store.BeginParameterPass(ParameterPass::kForward));
  EXPECT_THAT(store.BeginParameterPass(ParameterPass::kForward),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("inside a pass")));
  LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const float> got, store.Acquire(1));
  EXPECT_THAT(got, ElementsAre(3.0f));
  EXPECT_THAT(store.Acquire(2), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("holds 2")));
  EXPECT_THAT(store.AddGrad(0, a), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("keeps its gradients")));
  LOOM_ASSERT_OK(store.EndPass());
  EXPECT_THAT(store.EndPass(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("outside a pass")));
}

}  // namespace
}  // namespace loom
