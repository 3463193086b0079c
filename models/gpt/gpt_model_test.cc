// GptModel on one rank: gradients against finite differences of the loss, the
// activation-checkpointing contract (bitwise gradients, lower measured peak),
// parameters, pieces, and errors.
#include "models/gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/internal/train_testing.h"
#include "tensor_parallel/layers/gemm.h"
#include "topology/memory_estimate.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using train_testing::ExpectAllOk;
using train_testing::RandomizeParameters;
using train_testing::RunTp;
using train_testing::SeededIds;
using train_testing::TinyConfig;

// Directional derivatives of the f32 loss against the analytic gradient, one
// seeded direction d in [-1, 1)^n per parameter tensor: Richardson-extrapolated
// central differences R = (4 D(e/2) - D(e)) / 3, D(e) = (L(p + e d) - L(p - e d)) / 2e,
// e = 0.05, whose truncation error is O(e^4) (~1e-6 here).
//
// Bound: |R - g.d| <= 2e-3 + 1e-2 |g.d|. The loss (~2.6) is computed in f32 with a
// relative rounding of a few 1e-7, ~1e-6 absolute; divided by 2e = 0.1 and
// amplified by the extrapolation's weights (~5/3 * 2), the difference's own noise is
// ~5e-5, and the double check of the bound is that the observed errors stay below
// 3e-4 for this seed (largest: 2.5e-4 at |g.d| = 0.96). A missing or wrong
// gradient term changes g.d by O(|g.d|), far beyond the bound; every direction
// is checked to carry gradient (|g.d| > 1e-3).
TEST(GptModelGradientTest, MatchesFiniteDifferencesOfTheLoss) {
  const GptConfig config = TinyConfig();
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    std::vector<GptParameter> params = model->Parameters();
    // Larger than the initial values, and non-zero biases, so every term matters.
    LOOM_RETURN_IF_ERROR(RandomizeParameters(absl::MakeSpan(params), 11, 0.5f, 1, 0));
    const int64_t batch = 2;
    const std::vector<int64_t> tokens = SeededIds(batch * config.seq_len, config.vocab, 21);
    const std::vector<int64_t> targets = SeededIds(batch * config.seq_len, config.vocab, 22);
    LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(tokens, targets));
    EXPECT_TRUE(std::isfinite(loss));
    LOOM_RETURN_IF_ERROR(model->Backward());
    for (GptParameter& p : params) {
      SCOPED_TRACE(p.name);
      const std::vector<float> d =
          SeededValues(31, p.name, static_cast<int64_t>(p.values.size()), 0.577f);
      double analytic = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        analytic += static_cast<double>(p.grad[i]) * static_cast<double>(d[i]);
      }
      const std::vector<float> saved(p.values.begin(), p.values.end());
      auto loss_at = [&](double e) -> absl::StatusOr<double> {
        for (size_t i = 0; i < d.size(); ++i) {
          p.values[i] = static_cast<float>(static_cast<double>(saved[i]) + e * static_cast<double>(d[i]));
        }
        absl::StatusOr<float> l = model->Forward(tokens, targets);
        std::copy(saved.begin(), saved.end(), p.values.begin());
        if (!l.ok()) return l.status();
        return static_cast<double>(*l);
      };
      auto difference = [&](double e) -> absl::StatusOr<double> {
        LOOM_ASSIGN_OR_RETURN(const double plus, loss_at(e));
        LOOM_ASSIGN_OR_RETURN(const double minus, loss_at(-e));
        return (plus - minus) / (2 * e);
      };
      const double e = 0.05;
      LOOM_ASSIGN_OR_RETURN(const double coarse, difference(e));
      LOOM_ASSIGN_OR_RETURN(const double fine, difference(e / 2));
      const double numeric = (4 * fine - coarse) / 3;
      EXPECT_LE(std::fabs(numeric - analytic), 2e-3 + 1e-2 * std::fabs(analytic))
          << "numeric " << numeric << " analytic " << analytic;
      EXPECT_GT(std::fabs(analytic), 1e-3) << "a direction with no gradient checks nothing";
    }
    return absl::OkStatus();
  }));
}

TEST(GptModelTest, InitialLossIsNearLogVocabAndGradientsAccumulate) {
  const GptConfig config;  // the default tiny model
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    const std::vector<int64_t> tokens = SeededIds(2 * config.seq_len, config.vocab, 1);
    const std::vector<int64_t> targets = SeededIds(2 * config.seq_len, config.vocab, 2);
    LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(tokens, targets));
    // Small initial weights give near-uniform logits.
    EXPECT_NEAR(loss, std::log(64.0f), 0.05f);
    LOOM_RETURN_IF_ERROR(model->Backward());
    std::vector<GptParameter> params = model->Parameters();
    std::vector<std::vector<float>> once;
    for (const GptParameter& p : params) once.emplace_back(p.grad.begin(), p.grad.end());
    LOOM_RETURN_IF_ERROR(model->Forward(tokens, targets).status());
    LOOM_RETURN_IF_ERROR(model->Backward());
    for (size_t k = 0; k < params.size(); ++k) {
      for (size_t i = 0; i < once[k].size(); ++i) {
        // g + g is exact in binary floating point.
        EXPECT_EQ(params[k].grad[i], 2 * once[k][i]) << params[k].name << "[" << i << "]";
      }
    }
    model->ZeroGrad();
    for (const GptParameter& p : model->Parameters()) {
      EXPECT_TRUE(std::all_of(p.grad.begin(), p.grad.end(), [](float g) { return g == 0; }))
          << p.name;
    }
    return absl::OkStatus();
  }));
}

// GptModelOptions::precision kBf16 (a bf16 model): the parameters stay f32 in the
// model; the blocks' projections and the head round their inputs to bf16. Given bf16
// values (as a bf16 parameter source holds them), it computes the f32 model's loss and
// gradients up to that rounding, but not bitwise (the rounding is really there), and
// bitwise the same twice. Bound: the activations and gradients entering a product are
// off by up to 2^-9 each, through the blocks and the head; measured here 9.5e-4 on the
// loss (3.68) and 5.2e-3 of the largest gradient; the test allows 5e-3 and 2e-2.
TEST(GptModelPrecisionTest, Bf16ProductsRoundTheInputsOfTheProducts) {
  const GptConfig config = TinyConfig();
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    GptModelOptions bf16_options;
    bf16_options.precision = GemmPrecision::kBf16;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> f32, GptModel::Create(config, tp));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> bf16,
                          GptModel::Create(config, tp, bf16_options));
    std::vector<GptParameter> f32_params = f32->Parameters(), bf16_params = bf16->Parameters();
    LOOM_RETURN_IF_ERROR(RandomizeParameters(absl::MakeSpan(f32_params), 11, 0.5f, 1, 0));
    for (size_t k = 0; k < f32_params.size(); ++k) {
      for (size_t i = 0; i < f32_params[k].values.size(); ++i) {
        const float v = ToFloat(ToBFloat16(f32_params[k].values[i]));
        f32_params[k].values[i] = v;
        bf16_params[k].values[i] = v;
      }
    }
    const std::vector<int64_t> tokens = SeededIds(2 * config.seq_len, config.vocab, 21);
    const std::vector<int64_t> targets = SeededIds(2 * config.seq_len, config.vocab, 22);
    LOOM_ASSIGN_OR_RETURN(const float loss32, f32->Forward(tokens, targets));
    LOOM_ASSIGN_OR_RETURN(const float loss16, bf16->Forward(tokens, targets));
    EXPECT_NE(loss16, loss32);
    EXPECT_NEAR(loss16, loss32, 5e-3f);
    LOOM_RETURN_IF_ERROR(f32->Backward());
    LOOM_RETURN_IF_ERROR(bf16->Backward());
    double largest = 0, diff = 0;
    for (size_t k = 0; k < f32_params.size(); ++k) {
      for (size_t i = 0; i < f32_params[k].grad.size(); ++i) {
        largest = std::max(largest, std::fabs(static_cast<double>(f32_params[k].grad[i])));
        diff = std::max(diff, std::fabs(static_cast<double>(bf16_params[k].grad[i]) -
                                        static_cast<double>(f32_params[k].grad[i])));
      }
    }
    EXPECT_GT(diff, 0.0);
    EXPECT_LE(diff, 2e-2 * largest);
    std::printf("bf16 products: loss %.7g vs %.7g, gradients %.3g of the largest\n",
                static_cast<double>(loss16), static_cast<double>(loss32), diff / largest);
    LOOM_ASSIGN_OR_RETURN(const float again, bf16->Forward(tokens, targets));
    EXPECT_EQ(again, loss16);
    return absl::OkStatus();
  }));
}

TEST(GptModelTest, ParametersAreNamedOrderedAndShaped) {
  GptConfig config = TinyConfig();
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    std::vector<std::string> names;
    int64_t count = 0;
    for (const GptParameter& p : model->Parameters()) {
      names.push_back(p.name);
      EXPECT_EQ(p.shape, p.full_shape) << p.name;  // tp = 1 holds everything
      EXPECT_EQ(static_cast<int64_t>(p.values.size()), NumElements(p.shape)) << p.name;
      EXPECT_EQ(p.grad.size(), p.values.size()) << p.name;
      count += static_cast<int64_t>(p.values.size());
    }
    EXPECT_THAT(names, ::testing::ElementsAre(
                           "embed.token", "embed.position", "blocks.0.ln1.gamma",
                           "blocks.0.ln1.beta", "blocks.0.attn.qkv.weight",
                           "blocks.0.attn.qkv.bias", "blocks.0.attn.out.weight",
                           "blocks.0.attn.out.bias", "blocks.0.ln2.gamma", "blocks.0.ln2.beta",
                           "blocks.0.mlp.fc.weight", "blocks.0.mlp.fc.bias",
                           "blocks.0.mlp.proj.weight", "blocks.0.mlp.proj.bias",
                           "blocks.1.ln1.gamma", "blocks.1.ln1.beta", "blocks.1.attn.qkv.weight",
                           "blocks.1.attn.qkv.bias", "blocks.1.attn.out.weight",
                           "blocks.1.attn.out.bias", "blocks.1.ln2.gamma", "blocks.1.ln2.beta",
                           "blocks.1.mlp.fc.weight", "blocks.1.mlp.fc.bias",
                           "blocks.1.mlp.proj.weight", "blocks.1.mlp.proj.bias",
                           "final_ln.gamma", "final_ln.beta", "head.weight"));
    const int64_t v = 13, s = 5, h = 8, f = 12;
    const int64_t per_block = 4 * h + 3 * h * h + 3 * h + h * h + h + f * h + f + h * f + h;
    EXPECT_EQ(count, v * h + s * h + 2 * per_block + 2 * h + v * h);
    // The same seed gives the same values; another seed other values.
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> same, GptModel::Create(config, tp));
    config.seed = 4;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> other, GptModel::Create(config, tp));
    const std::vector<GptParameter> a = model->Parameters(), b = same->Parameters(),
                                    c = other->Parameters();
    EXPECT_TRUE(std::equal(a[0].values.begin(), a[0].values.end(), b[0].values.begin()));
    EXPECT_FALSE(std::equal(a[0].values.begin(), a[0].values.end(), c[0].values.begin()));
    return absl::OkStatus();
  }));
}

// kFull keeps only the blocks' inputs and recomputes each block in backward: the
// same arithmetic in the same order, so loss and gradients are bitwise equal, and
// the measured high-water mark of held activations is lower.
TEST(GptModelRecomputeTest, FullRecomputeGivesIdenticalGradientsAndLowerPeak) {
  const GptConfig config;  // 4 blocks
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    const std::vector<int64_t> tokens = SeededIds(4 * config.seq_len, config.vocab, 5);
    const std::vector<int64_t> targets = SeededIds(4 * config.seq_len, config.vocab, 6);
    std::map<Recompute, std::vector<std::vector<float>>> grads;
    std::map<Recompute, float> losses;
    std::map<Recompute, size_t> peaks;
    for (const Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      GptModelOptions options;
      options.recompute = mode;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                            GptModel::Create(config, tp, options));
      EXPECT_EQ(model->peak_activation_bytes(), 0u);
      LOOM_ASSIGN_OR_RETURN(losses[mode], model->Forward(tokens, targets));
      EXPECT_GT(model->held_activation_bytes(), 0u);
      LOOM_RETURN_IF_ERROR(model->Backward());
      EXPECT_EQ(model->held_activation_bytes(), 0u) << "backward frees what forward kept";
      peaks[mode] = model->peak_activation_bytes();
      for (const GptParameter& p : model->Parameters()) {
        grads[mode].emplace_back(p.grad.begin(), p.grad.end());
      }
    }
    EXPECT_EQ(losses[Recompute::kNone], losses[Recompute::kFull]);
    EXPECT_EQ(grads[Recompute::kNone], grads[Recompute::kFull]);
    // kNone holds all 4 blocks' state at the end of forward; kFull one block's plus
    // the 4 block inputs (1/8 of a block's state each here).
    EXPECT_LT(peaks[Recompute::kFull], peaks[Recompute::kNone] / 2)
        << "kFull " << peaks[Recompute::kFull] << " kNone " << peaks[Recompute::kNone];
    return absl::OkStatus();
  }));
}

// Microbatch contexts: two forwards taken out, their backwards run in the other
// order (and the split backward for one of them), give bitwise the gradients of
// running each forward just before its backward; a context moves out whole (the
// model holds nothing after TakeActivations) and bad restores name the reason.
TEST(GptModelContextTest, ContextsTakenOutRunBackwardsInAnyOrderBitwise) {
  const GptConfig config;  // 4 blocks
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    std::vector<std::vector<int64_t>> tokens, targets;
    for (int mb = 0; mb < 2; ++mb) {
      tokens.push_back(SeededIds(2 * config.seq_len, config.vocab, 10 + mb));
      targets.push_back(SeededIds(2 * config.seq_len, config.vocab, 20 + mb));
    }
    for (const Recompute mode : {Recompute::kNone, Recompute::kFull}) {
      SCOPED_TRACE(mode == Recompute::kFull ? "full recompute" : "no recompute");
      GptModelOptions options;
      options.recompute = mode;
      // Reference: forward then backward, microbatch 1 first, then microbatch 0.
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> sequential,
                            GptModel::Create(config, tp, options));
      for (const int mb : {1, 0}) {
        LOOM_RETURN_IF_ERROR(sequential->Forward(tokens[mb], targets[mb]).status());
        LOOM_RETURN_IF_ERROR(sequential->Backward(0.5f));
      }
      // Both forwards first, each context taken out, then the backwards 1, 0; 0's
      // split into its input and weight parts.
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                            GptModel::Create(config, tp, options));
      std::vector<GptActivations> contexts;
      for (int mb = 0; mb < 2; ++mb) {
        LOOM_RETURN_IF_ERROR(model->Forward(tokens[mb], targets[mb]).status());
        contexts.push_back(model->TakeActivations());
        EXPECT_EQ(model->held_activation_bytes(), 0u);
        EXPECT_GT(contexts.back().bytes(), 0u);
      }
      EXPECT_THAT(model->Backward(0.5f), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                  HasSubstr("without a ForwardStage")));
      LOOM_RETURN_IF_ERROR(model->RestoreActivations(std::move(contexts[1])));
      EXPECT_THAT(model->RestoreActivations(std::move(contexts[0])),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("while the model holds a forward's state")));
      LOOM_RETURN_IF_ERROR(model->Backward(0.5f));
      LOOM_RETURN_IF_ERROR(model->RestoreActivations(std::move(contexts[0])));
      LOOM_ASSIGN_OR_RETURN(Tensor half, gpt_internal::ToTensor({1}, {0.5f}));
      GptWeightGradWork work;
      LOOM_RETURN_IF_ERROR(model->BackwardStageInput(half, work).status());
      LOOM_RETURN_IF_ERROR(model->BackwardStageWeight(work));
      const std::vector<GptParameter> got = model->Parameters();
      const std::vector<GptParameter> want = sequential->Parameters();
      for (size_t p = 0; p < want.size(); ++p) {
        EXPECT_TRUE(std::equal(got[p].grad.begin(), got[p].grad.end(), want[p].grad.begin(),
                               want[p].grad.end()))
            << want[p].name;
      }
      // An empty context, and one of another piece.
      EXPECT_THAT(model->RestoreActivations(model->TakeActivations()),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("empty context")));
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> piece,
                            GptModel::Create(config, tp, GptModelOptions::Stage(config, 0, 2)));
      LOOM_ASSIGN_OR_RETURN(Tensor hidden, piece->ForwardStage({tokens[0], nullptr, {}}));
      EXPECT_EQ(hidden.dim(2), config.hidden);
      EXPECT_THAT(model->RestoreActivations(piece->TakeActivations()),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("a piece with 2 blocks into one with 4")));
    }
    return absl::OkStatus();
  }));
}

// topology/memory_estimate's fused-attention formula is this model's bookkeeping:
// the measured peak equals the estimate exactly, on tp 1 and 2, f32 and bf16 linear
// inputs, without and with full recompute.
TEST(GptModelMemoryTest, PeakEqualsTheFusedAttentionEstimate) {
  const GptConfig config;  // V 64, seq 32, hidden 64, 4 heads, 4 blocks
  constexpr int64_t kBatch = 3;
  for (const int tp_size : {1, 2}) {
    ExpectAllOk(RunTp(tp_size, [&](Communicator& tp) -> absl::Status {
      const std::vector<int64_t> tokens = SeededIds(kBatch * config.seq_len, config.vocab, 5);
      const std::vector<int64_t> targets = SeededIds(kBatch * config.seq_len, config.vocab, 6);
      for (const Recompute mode : {Recompute::kNone, Recompute::kFull}) {
        for (const GemmPrecision precision : {GemmPrecision::kF32, GemmPrecision::kBf16}) {
          GptModelOptions options;
          options.recompute = mode;
          options.precision = precision;
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                                GptModel::Create(config, tp, options));
          LOOM_RETURN_IF_ERROR(model->Forward(tokens, targets).status());
          LOOM_RETURN_IF_ERROR(model->Backward());
          FusedAttentionActivationOptions estimate;
          estimate.hidden_size = config.hidden;
          estimate.num_heads = config.heads;
          estimate.vocab = config.vocab;
          estimate.seq_len = config.seq_len;
          estimate.micro_batch_size = kBatch;
          estimate.layers = config.layers;
          estimate.embedding = estimate.head = true;
          estimate.tp = tp_size;
          estimate.bf16_linear_inputs = precision == GemmPrecision::kBf16;
          estimate.recompute = mode;
          LOOM_ASSIGN_OR_RETURN(const int64_t expected,
                                EstimateFusedAttentionActivationBytes(estimate));
          EXPECT_EQ(static_cast<int64_t>(model->peak_activation_bytes()), expected)
              << "tp " << tp_size << " recompute " << static_cast<int>(mode) << " "
              << GemmPrecisionName(precision);
        }
      }
      return absl::OkStatus();
    }));
  }
}

// A model cut into pieces, run one after another, equals the whole model bitwise.
TEST(GptModelPieceTest, PiecesChainedEqualTheWholeModel) {
  const GptConfig config = TinyConfig();  // 2 blocks
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    const std::vector<int64_t> tokens = SeededIds(3 * config.seq_len, config.vocab, 7);
    const std::vector<int64_t> targets = SeededIds(3 * config.seq_len, config.vocab, 8);
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> whole, GptModel::Create(config, tp));
    LOOM_ASSIGN_OR_RETURN(const float loss, whole->Forward(tokens, targets));
    LOOM_RETURN_IF_ERROR(whole->Backward(0.5f));
    // Three pieces: embeddings only, block 0 .. 1, head only.
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> first,
                          GptModel::Create(config, tp, GptModelOptions::Stage(config, 0, 0)));
    GptModelOptions middle_options = GptModelOptions::Stage(config, 0, 2);
    middle_options.embedding = false;
    middle_options.head = false;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> middle,
                          GptModel::Create(config, tp, middle_options));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> last,
                          GptModel::Create(config, tp, GptModelOptions::Stage(config, 2, 2)));
    GptStageInput in0;
    in0.tokens = tokens;
    LOOM_ASSIGN_OR_RETURN(Tensor h0, first->ForwardStage(in0));
    EXPECT_EQ(h0.shape(), (std::vector<int64_t>{5, 3, 8}));
    GptStageInput in1;
    in1.hidden = &h0;
    LOOM_ASSIGN_OR_RETURN(Tensor h1, middle->ForwardStage(in1));
    GptStageInput in2;
    in2.hidden = &h1;
    in2.targets = targets;
    LOOM_ASSIGN_OR_RETURN(Tensor piece_loss, last->ForwardStage(in2));
    EXPECT_EQ(piece_loss.ToF32(), std::vector<float>{loss});
    LOOM_ASSIGN_OR_RETURN(Tensor g, Tensor::FromValues({1}, {0.5f}));
    LOOM_ASSIGN_OR_RETURN(Tensor d1, last->BackwardStage(g));
    LOOM_ASSIGN_OR_RETURN(Tensor d0, middle->BackwardStage(d1));
    LOOM_ASSIGN_OR_RETURN(Tensor none, first->BackwardStage(d0));
    EXPECT_EQ(none.numel(), 0);
    std::vector<GptParameter> pieces = first->Parameters();
    for (GptParameter& p : middle->Parameters()) pieces.push_back(p);
    for (GptParameter& p : last->Parameters()) pieces.push_back(p);
    const std::vector<GptParameter> all = whole->Parameters();
    EXPECT_EQ(pieces.size(), all.size());
    for (size_t k = 0; k < all.size() && k < pieces.size(); ++k) {
      EXPECT_EQ(pieces[k].name, all[k].name);
      EXPECT_TRUE(std::equal(all[k].values.begin(), all[k].values.end(),
                             pieces[k].values.begin())) << all[k].name;
      EXPECT_TRUE(std::equal(all[k].grad.begin(), all[k].grad.end(), pieces[k].grad.begin()))
          << all[k].name;
    }
    return absl::OkStatus();
  }));
}

TEST(GptModelTest, RejectsBadInputsWithTheValues) {
  const GptConfig config = TinyConfig();
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    GptConfig bad = config;
    bad.heads = 3;
    EXPECT_THAT(GptModel::Create(bad, tp),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("heads 3 must divide hidden 8")));
    GptModelOptions range;
    range.first_block = 1;
    range.end_block = 3;
    EXPECT_THAT(GptModel::Create(config, tp, range),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("blocks [1, 3) are not a range within the model's 2 layers")));
    GptModelOptions selective;
    selective.recompute = Recompute::kSelective;
    EXPECT_THAT(GptModel::Create(config, tp, selective),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("selective recompute is not implemented")));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    EXPECT_THAT(model->Backward(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("without a ForwardStage")));
    const std::vector<int64_t> ids = SeededIds(10, config.vocab, 9);
    EXPECT_THAT(model->Forward(std::vector<int64_t>(7, 1), std::vector<int64_t>(7, 1)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("7 tokens are not a positive multiple of seq_len 5")));
    EXPECT_THAT(model->Forward(ids, std::vector<int64_t>(5, 1)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("5 targets for 10 tokens (batch 2 x seq_len 5)")));
    std::vector<int64_t> out_of_range = ids;
    out_of_range[3] = 13;
    EXPECT_THAT(model->Forward(out_of_range, ids),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id 13")));
    EXPECT_THAT(model->Forward(ids, out_of_range),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target 13")));
    LOOM_RETURN_IF_ERROR(model->Forward(ids, ids).status());
    LOOM_ASSIGN_OR_RETURN(Tensor two, Tensor::FromValues({2}, {1.0f, 1.0f}));
    EXPECT_THAT(model->BackwardStage(two),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("output gradient shape [2] must be [1]")));
    GptModelOptions middle;
    middle.embedding = false;
    middle.head = false;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> piece, GptModel::Create(config, tp, middle));
    EXPECT_THAT(piece->Forward(ids, ids), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                   HasSubstr("needs the whole model")));
    LOOM_ASSIGN_OR_RETURN(Tensor wrong, Tensor::Create({5, 2, 9}));
    GptStageInput in;
    in.hidden = &wrong;
    EXPECT_THAT(piece->ForwardStage(in),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("take hidden activations [5, batch, 8], got [5,2,9]")));
    return absl::OkStatus();
  }));
}

// GptConfig::ParameterCount (the N of the MFU formula) against the model itself: the
// elements of every parameter's whole tensor, at tp 1 and tp 2, with and without an
// explicit MLP width.
TEST(GptModelTest, ParameterCountIsTheModelsParameters) {
  GptConfig wide = TinyConfig();
  wide.ffn = 3 * wide.hidden;
  for (const GptConfig& config : {TinyConfig(), wide}) {
    for (int tp_size : {1, 2}) {
      ExpectAllOk(RunTp(tp_size, [&](Communicator& tp) -> absl::Status {
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
        int64_t whole = 0, local = 0, products = 0;
        for (const GptParameter& p : model->Parameters()) {
          int64_t n = 1;
          for (int64_t d : p.full_shape) n *= d;
          whole += n;
          local += static_cast<int64_t>(p.values.size());
          // The matrices but the embeddings' tables (looked up, not multiplied).
          if (p.full_shape.size() == 2 && p.name.rfind("embed.", 0) != 0) products += n;
        }
        EXPECT_EQ(config.ParameterCount(), whole) << config.ToString();
        EXPECT_EQ(config.ProductParameterCount(), products) << config.ToString();
        if (tp_size == 1) {
          EXPECT_EQ(config.ParameterCount(), local) << config.ToString();
        }
        return absl::OkStatus();
      }));
    }
  }
  GptConfig issue;
  issue.vocab = 256;
  issue.seq_len = 128;
  issue.hidden = 256;
  issue.heads = 8;
  issue.layers = 4;
  EXPECT_EQ(issue.ParameterCount(), 3323392);
  EXPECT_EQ(issue.EmbeddingTableParameterCount(), (256 + 128) * 256);
  EXPECT_EQ(issue.TrainingFlopsPerToken(), 6.0 * (3323392 - 98304) + 12.0 * 4 * 128 * 256);
}

// The model FLOPs never count more arithmetic than the model does: over a sweep of
// vocabularies, widths, depths and lengths, 6 N + 12 L T h less the products (6 x
// ProductParameterCount) and attention's 12 L T h is 6 times the norms and biases
// alone, whatever the vocabulary (a lookup is no arithmetic; the head's V h is a
// product). Counting the tables once gave 6 V h more, which at V = 32768, hidden
// 512 and 2 layers put a measured MFU at 1.02.
TEST(GptModelTest, TrainingFlopsCountNoEmbeddingLookup) {
  for (const int64_t vocab : {2, 256, 32768, 50257, 131072}) {
    for (const int64_t hidden : {64, 512, 1024}) {
      for (const int64_t layers : {0, 1, 4, 24}) {
        for (const int64_t seq : {1, 128, 2048}) {
          GptConfig c;
          c.vocab = vocab;
          c.hidden = hidden;
          c.heads = 8;
          c.layers = layers;
          c.seq_len = seq;
          const double h = static_cast<double>(hidden);
          const double f = static_cast<double>(c.ffn_size());
          const double norms_and_biases = static_cast<double>(layers) * (9 * h + f) + 2 * h;
          const double attention = 12.0 * static_cast<double>(layers * seq) * h;
          EXPECT_DOUBLE_EQ(c.TrainingFlopsPerToken() - attention -
                               6.0 * static_cast<double>(c.ProductParameterCount()),
                           6.0 * norms_and_biases)
              << c.ToString();
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
