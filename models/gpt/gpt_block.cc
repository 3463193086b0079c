#include "models/gpt/gpt_block.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/internal/model_util.h"
#include "models/gpt/ops.h"

namespace loom {

using gpt_internal::Add;
using gpt_internal::AddInto;
using gpt_internal::AppendParameter;
using gpt_internal::Bytes;
using gpt_internal::Free;
using gpt_internal::NewActivation;
using gpt_internal::Values;

namespace {

constexpr float kStd = 0.02f;

// The parameters in AppendParameters order.
enum : int {
  kLn1Gamma, kLn1Beta, kQkvWeight, kQkvBias, kOutWeight, kOutBias,
  kLn2Gamma, kLn2Beta, kFcWeight, kFcBias, kProjWeight, kProjBias,
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> LocalPositions(int64_t seq_len,
                                                    const GptContextParallel& cp) {
  std::vector<int64_t> positions;
  if (!cp.active()) {
    for (int64_t i = 0; i < seq_len; ++i) positions.push_back(i);
    return positions;
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                        CpChunks(seq_len, cp.group->size(), cp.group->rank(), cp.layout));
  for (const PositionRange& c : chunks) {
    for (int64_t i = 0; i < c.length; ++i) positions.push_back(c.offset + i);
  }
  return positions;
}

absl::StatusOr<GptBlock> GptBlock::Create(const GptConfig& config, int64_t index,
                                          Communicator& tp, GemmPrecision precision,
                                          const GptContextParallel& cp) {
  LOOM_RETURN_IF_ERROR(config.Validate(tp.size()));
  const int64_t h = config.hidden, f = config.ffn_size();
  const std::string prefix = absl::StrCat("blocks.", index, ".");
  const float residual_std =
      kStd / std::sqrt(2.0f * static_cast<float>(config.layers > 0 ? config.layers : 1));
  auto seeded = [&](const std::string& name, std::vector<int64_t> shape, float stddev) {
    return SeededTensor(config.seed, prefix + name, std::move(shape), stddev);
  };
  const Tensor qkv_w = seeded("attn.qkv.weight", {3 * h, h}, kStd);
  const Tensor qkv_b = seeded("attn.qkv.bias", {3 * h}, 0.0f);
  const Tensor out_w = seeded("attn.out.weight", {h, h}, residual_std);
  const Tensor out_b = seeded("attn.out.bias", {h}, 0.0f);
  ParallelSelfAttentionOptions attn_options;
  attn_options.num_heads = config.heads;
  attn_options.causal = true;
  if (cp.active()) {
    attn_options.context_parallel = cp.group;
    attn_options.cp_layout = cp.layout;
    attn_options.cp_comm = cp.comm;
    attn_options.cp_sequence_length = config.seq_len;
  }
  LOOM_ASSIGN_OR_RETURN(ParallelSelfAttention attn,
                        ParallelSelfAttention::Create(qkv_w, &qkv_b, out_w, &out_b, tp,
                                                      attn_options));
  // The attention options have no precision of their own: its projections take it.
  LOOM_RETURN_IF_ERROR(attn.mutable_qkv().SetGemmPrecision(precision));
  LOOM_RETURN_IF_ERROR(attn.mutable_out().SetGemmPrecision(precision));
  const Tensor fc_w = seeded("mlp.fc.weight", {f, h}, kStd);
  const Tensor fc_b = seeded("mlp.fc.bias", {f}, 0.0f);
  ColumnParallelOptions fc_options;
  fc_options.precision = precision;
  LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                        ColumnParallelLinear::Create(fc_w, &fc_b, tp, fc_options));
  const Tensor proj_w = seeded("mlp.proj.weight", {h, f}, residual_std);
  const Tensor proj_b = seeded("mlp.proj.bias", {h}, 0.0f);
  RowParallelOptions proj_options;
  proj_options.precision = precision;
  LOOM_ASSIGN_OR_RETURN(RowParallelLinear proj,
                        RowParallelLinear::Create(proj_w, &proj_b, tp, proj_options));
  GptBlock block(std::move(attn), std::move(fc), std::move(proj));
  block.config_ = config;
  block.index_ = index;
  block.ln1_gamma_ = SeededValues(config.seed, prefix + "ln1.gamma", h, 0.0f, 1.0f);
  block.ln1_beta_ = SeededValues(config.seed, prefix + "ln1.beta", h, 0.0f);
  block.ln2_gamma_ = SeededValues(config.seed, prefix + "ln2.gamma", h, 0.0f, 1.0f);
  block.ln2_beta_ = SeededValues(config.seed, prefix + "ln2.beta", h, 0.0f);
  // Size every accumulator now, so parameter views taken before the first
  // Backward stay valid.
  gpt_internal::ParameterList unused;
  block.AppendParameters(unused);
  return block;
}

absl::StatusOr<Tensor> GptBlock::Forward(const Tensor& x) {
  const int64_t h = config_.hidden;
  if (x.rank() != 3 || x.dim(2) != h || x.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("GptBlock ", index_, ": input shape ",
                                                   ShapeString(x.shape()), " must be [s, b, ",
                                                   h, "] (f32)"));
  }
  LOOM_RETURN_IF_ERROR(CheckWeights("Forward"));
  state_.valid = false;
  state_.shape = x.shape();
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> xv, Values(x));
  state_.x0.assign(xv.begin(), xv.end());
  const size_t rows = state_.x0.size() / static_cast<size_t>(h);
  // Each pass writes into the next layer's input tensor (no copy).
  state_.mean1.resize(rows);
  state_.rstd1.resize(rows);
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation ln1_out, NewActivation(state_.shape));
  LOOM_RETURN_IF_ERROR(LayerNormForward(state_.x0, Norm(kLn1Gamma), Norm(kLn1Beta),
                                        config_.layer_norm_eps, ln1_out.values,
                                        absl::MakeSpan(state_.mean1), absl::MakeSpan(state_.rstd1)));
  LOOM_ASSIGN_OR_RETURN(Tensor attn_out, attn_.Forward(ln1_out.tensor));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> av, Values(attn_out));
  state_.x1 = Add(state_.x0, av);
  state_.mean2.resize(rows);
  state_.rstd2.resize(rows);
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation ln2_out, NewActivation(state_.shape));
  LOOM_RETURN_IF_ERROR(LayerNormForward(state_.x1, Norm(kLn2Gamma), Norm(kLn2Beta),
                                        config_.layer_norm_eps, ln2_out.values,
                                        absl::MakeSpan(state_.mean2), absl::MakeSpan(state_.rstd2)));
  // The fc output is GELU's backward input: kept as the tensor it is, not copied
  // (R x 4h floats per block and microbatch).
  LOOM_ASSIGN_OR_RETURN(state_.pre_gelu, fc_.Forward(ln2_out.tensor));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> fv, Values(state_.pre_gelu));
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation gelu_out,
                        NewActivation(state_.pre_gelu.shape()));
  LOOM_RETURN_IF_ERROR(GeluForward(fv, gelu_out.values));
  LOOM_ASSIGN_OR_RETURN(Tensor mlp_out, proj_.Forward(gelu_out.tensor));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> mv, Values(mlp_out));
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation y, NewActivation(state_.shape));
  Add(state_.x1, mv, y.values);
  state_.valid = true;
  return std::move(y.tensor);
}

size_t GptBlockWeightGradWork::bytes() const {
  return attn.bytes() + fc.bytes() + proj.bytes() +
         Bytes(ln1_dgamma) + Bytes(ln1_dbeta) + Bytes(ln2_dgamma) + Bytes(ln2_dbeta);
}

absl::StatusOr<Tensor> GptBlock::Backward(const Tensor& dy) {
  GptBlockWeightGradWork work;
  LOOM_ASSIGN_OR_RETURN(Tensor dx, BackwardInput(dy, work));
  LOOM_RETURN_IF_ERROR(BackwardWeight(work));
  return dx;
}

absl::StatusOr<Tensor> GptBlock::BackwardInput(const Tensor& dy, GptBlockWeightGradWork& work) {
  if (!state_.valid) {
    return absl::FailedPreconditionError(
        absl::StrCat("GptBlock ", index_, ": Backward without a Forward since the last one"));
  }
  if (dy.shape() != state_.shape || dy.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("GptBlock ", index_, ": gradient shape ",
                                                   ShapeString(dy.shape()),
                                                   " must be the output's ", ShapeString(state_.shape)));
  }
  LOOM_RETURN_IF_ERROR(CheckWeights("Backward"));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dyv, Values(dy));
  // MLP branch: y = x1 + proj(gelu(fc(ln2(x1)))).
  LOOM_ASSIGN_OR_RETURN(Tensor d_gelu_out, proj_.BackwardInput(dy, work.proj));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dgv, Values(d_gelu_out));
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation d_fc_out, NewActivation(d_gelu_out.shape()));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> pre_gelu, Values(state_.pre_gelu));
  LOOM_RETURN_IF_ERROR(GeluBackward(pre_gelu, dgv, d_fc_out.values));
  LOOM_ASSIGN_OR_RETURN(Tensor d_ln2_out, fc_.BackwardInput(d_fc_out.tensor, work.fc));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dl2, Values(d_ln2_out));
  // A norm's backward: dx into `dx`, dgamma and dbeta into the work's vectors.
  const size_t h = static_cast<size_t>(config_.hidden);
  auto norm_backward = [&](const std::vector<float>& x, int gamma,
                           const std::vector<float>& mean, const std::vector<float>& rstd,
                           absl::Span<const float> d_out, absl::Span<float> dx,
                           std::vector<float>& dgamma, std::vector<float>& dbeta) {
    dgamma.resize(h);
    dbeta.resize(h);
    return LayerNormBackward(x, Norm(gamma), mean, rstd, d_out, dx, absl::MakeSpan(dgamma),
                             absl::MakeSpan(dbeta));
  };
  // dx1 = dy + ln2's dx, in the tensor the attention's backward takes (ln2's dx is
  // written there first: no buffer of its own).
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation dx1, NewActivation(state_.shape));
  LOOM_RETURN_IF_ERROR(norm_backward(state_.x1, kLn2Gamma, state_.mean2, state_.rstd2, dl2,
                                     dx1.values, work.ln2_dgamma, work.ln2_dbeta));
  Add(dyv, dx1.values, dx1.values);
  // Attention branch: x1 = x0 + attn(ln1(x0)).
  LOOM_ASSIGN_OR_RETURN(Tensor d_ln1_out, attn_.BackwardInput(dx1.tensor, work.attn));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dl1, Values(d_ln1_out));
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation ln1_dx, NewActivation(state_.shape));
  LOOM_RETURN_IF_ERROR(norm_backward(state_.x0, kLn1Gamma, state_.mean1, state_.rstd1, dl1,
                                     ln1_dx.values, work.ln1_dgamma, work.ln1_dbeta));
  ReleaseActivations();
  // dx = dx1 + ln1's dx, in place.
  Add(dx1.values, ln1_dx.values, dx1.values);
  return std::move(dx1.tensor);
}

absl::Status GptBlock::BackwardWeight(const GptBlockWeightGradWork& work) {
  const size_t h = static_cast<size_t>(config_.hidden);
  for (const std::vector<float>* g :
       {&work.ln1_dgamma, &work.ln1_dbeta, &work.ln2_dgamma, &work.ln2_dbeta}) {
    if (g->size() != h) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GptBlock ", index_, ": weight-gradient work holds a layer-norm gradient of ",
          g->size(), " values, not hidden ", h));
    }
  }
  // A projection's weight gradient is written where the sink's source keeps it
  // (Slot) when it offers a place, else handed over as before.
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> proj_into, Slot(kProjWeight));
  LOOM_RETURN_IF_ERROR(proj_.BackwardWeight(work.proj, proj_into));
  if (proj_into.empty()) LOOM_RETURN_IF_ERROR(Give(kProjWeight, proj_.weight_grad()));
  LOOM_RETURN_IF_ERROR(Give(kProjBias, proj_.bias_grad()));
  proj_.ReleaseWeightGradients();
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> fc_into, Slot(kFcWeight));
  LOOM_RETURN_IF_ERROR(fc_.BackwardWeight(work.fc, fc_into));
  if (fc_into.empty()) LOOM_RETURN_IF_ERROR(Give(kFcWeight, fc_.weight_grad()));
  LOOM_RETURN_IF_ERROR(Give(kFcBias, fc_.bias_grad()));
  fc_.ReleaseWeightGradients();
  LOOM_RETURN_IF_ERROR(Give(kLn2Gamma, work.ln2_dgamma));
  LOOM_RETURN_IF_ERROR(Give(kLn2Beta, work.ln2_dbeta));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> qkv_into, Slot(kQkvWeight));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> out_into, Slot(kOutWeight));
  LOOM_RETURN_IF_ERROR(attn_.BackwardWeight(work.attn, qkv_into, out_into));
  ColumnParallelLinear& qkv = attn_.mutable_qkv();
  RowParallelLinear& out = attn_.mutable_out();
  if (qkv_into.empty()) LOOM_RETURN_IF_ERROR(Give(kQkvWeight, qkv.weight_grad()));
  LOOM_RETURN_IF_ERROR(Give(kQkvBias, qkv.bias_grad()));
  if (out_into.empty()) LOOM_RETURN_IF_ERROR(Give(kOutWeight, out.weight_grad()));
  LOOM_RETURN_IF_ERROR(Give(kOutBias, out.bias_grad()));
  qkv.ReleaseWeightGradients();
  out.ReleaseWeightGradients();
  LOOM_RETURN_IF_ERROR(Give(kLn1Gamma, work.ln1_dgamma));
  LOOM_RETURN_IF_ERROR(Give(kLn1Beta, work.ln1_dbeta));
  return absl::OkStatus();
}

void GptBlock::ReleaseActivations() {
  state_ = OwnState();
  attn_.ReleaseActivations();
  fc_.ReleaseActivations();
  proj_.ReleaseActivations();
}

size_t GptBlock::OwnState::bytes() const {
  size_t bytes = 0;
  for (const std::vector<float>* v : {&x0, &mean1, &rstd1, &x1, &mean2, &rstd2}) {
    bytes += Bytes(*v);
  }
  return bytes + pre_gelu.size_bytes();
}

size_t GptBlock::saved_activation_bytes() const {
  return state_.bytes() + attn_.saved_activation_bytes() + fc_.saved_activation_bytes() +
         proj_.saved_activation_bytes();
}

GptBlock::ForwardState GptBlock::TakeForwardState() {
  return ForwardState{std::exchange(state_, OwnState()), attn_.TakeForwardState(),
                      fc_.TakeForwardState(), proj_.TakeForwardState()};
}

void GptBlock::RestoreForwardState(ForwardState state) {
  state_ = std::move(state.own);
  attn_.RestoreForwardState(std::move(state.attn));
  fc_.RestoreForwardState(std::move(state.fc));
  proj_.RestoreForwardState(std::move(state.proj));
}

void GptBlock::AppendParameters(gpt_internal::ParameterList& out) {
  const int64_t h = config_.hidden, f = config_.ffn_size();
  const std::string p = absl::StrCat("blocks.", index_, ".");
  const ColumnParallelLinear& qkv = attn_.qkv();
  const RowParallelLinear& attn_out = attn_.out();
  AppendParameter(out, p + "ln1.gamma", ln1_gamma_, ln1_gamma_grad_);
  AppendParameter(out, p + "ln1.beta", ln1_beta_, ln1_beta_grad_);
  AppendParameter(out, p + "attn.qkv.weight", qkv.weight(), qkv_w_grad_, {3 * h, h},
                  TpSplit::kRows, 3);
  AppendParameter(out, p + "attn.qkv.bias", qkv.bias(), qkv_b_grad_, {3 * h}, TpSplit::kRows,
                  3);
  AppendParameter(out, p + "attn.out.weight", attn_out.weight(), out_w_grad_, {h, h},
                  TpSplit::kColumns);
  AppendParameter(out, p + "attn.out.bias", attn_out.bias(), out_b_grad_, {h},
                  TpSplit::kReplicated);
  AppendParameter(out, p + "ln2.gamma", ln2_gamma_, ln2_gamma_grad_);
  AppendParameter(out, p + "ln2.beta", ln2_beta_, ln2_beta_grad_);
  AppendParameter(out, p + "mlp.fc.weight", fc_.weight(), fc_w_grad_, {f, h}, TpSplit::kRows);
  AppendParameter(out, p + "mlp.fc.bias", fc_.bias(), fc_b_grad_, {f}, TpSplit::kRows);
  AppendParameter(out, p + "mlp.proj.weight", proj_.weight(), proj_w_grad_, {h, f},
                  TpSplit::kColumns);
  AppendParameter(out, p + "mlp.proj.bias", proj_.bias(), proj_b_grad_, {h},
                  TpSplit::kReplicated);
}

void GptBlock::ZeroGrad() {
  std::vector<gpt_internal::GradAccumulator*> accumulators;
  AppendGradAccumulators(accumulators);
  for (gpt_internal::GradAccumulator* g : accumulators) {
    std::fill(g->view().begin(), g->view().end(), 0.0f);
  }
}

void GptBlock::AppendGradAccumulators(std::vector<gpt_internal::GradAccumulator*>& out) {
  for (gpt_internal::GradAccumulator* g :
       {&ln1_gamma_grad_, &ln1_beta_grad_, &ln2_gamma_grad_, &ln2_beta_grad_, &qkv_w_grad_,
        &qkv_b_grad_, &out_w_grad_, &out_b_grad_, &fc_w_grad_, &fc_b_grad_, &proj_w_grad_,
        &proj_b_grad_}) {
    out.push_back(g);
  }
}

absl::Span<const float> GptBlock::Norm(int k) const {
  if (borrowing_) return lent_[static_cast<size_t>(k)];
  switch (k) {
    case kLn1Gamma:
      return ln1_gamma_;
    case kLn1Beta:
      return ln1_beta_;
    case kLn2Gamma:
      return ln2_gamma_;
    default:
      return ln2_beta_;
  }
}

gpt_internal::GradAccumulator& GptBlock::AccumulatorOf(int k) {
  gpt_internal::GradAccumulator* const by_index[kNumParameters] = {
      &ln1_gamma_grad_, &ln1_beta_grad_, &qkv_w_grad_, &qkv_b_grad_, &out_w_grad_, &out_b_grad_,
      &ln2_gamma_grad_, &ln2_beta_grad_, &fc_w_grad_,  &fc_b_grad_,  &proj_w_grad_, &proj_b_grad_};
  return *by_index[k];
}

absl::Status GptBlock::Give(int k, absl::Span<const float> grad) {
  if (sink_) return sink_(k, grad);
  return AddInto(AccumulatorOf(k), grad);
}

absl::StatusOr<absl::Span<float>> GptBlock::Slot(int k) {
  if (!sink_ || !slot_) return absl::Span<float>();
  return slot_(k);
}

absl::Status GptBlock::Give(int k, const Tensor& grad) {
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> values, Values(grad));
  return Give(k, values);
}

bool GptBlock::IsProjectionWeight(int k) {
  return k == kQkvWeight || k == kOutWeight || k == kFcWeight || k == kProjWeight;
}

absl::Status GptBlock::BorrowWeights(absl::Span<const absl::Span<const float>> views,
                                     absl::Span<const absl::Span<const BFloat16>> bf16_views) {
  if (views.size() != kNumParameters ||
      (!bf16_views.empty() && bf16_views.size() != kNumParameters)) {
    return absl::InvalidArgumentError(absl::StrCat("GptBlock ", index_, ": BorrowWeights got ",
                                                   views.size(), " views and ", bf16_views.size(),
                                                   " bf16 views for ", kNumParameters,
                                                   " parameters"));
  }
  const auto bf16 = [&](int k) {
    return bf16_views.empty() ? absl::Span<const BFloat16>() : bf16_views[static_cast<size_t>(k)];
  };
  const size_t h = static_cast<size_t>(config_.hidden);
  for (const int k : {kLn1Gamma, kLn1Beta, kLn2Gamma, kLn2Beta}) {
    if (views[static_cast<size_t>(k)].size() != h) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GptBlock ", index_, ": BorrowWeights got ", views[static_cast<size_t>(k)].size(),
          " values for layer-norm parameter ", k, ", not hidden ", h));
    }
  }
  ColumnParallelLinear& qkv = attn_.mutable_qkv();
  RowParallelLinear& out = attn_.mutable_out();
  absl::Status lent = qkv.BorrowWeights(views[kQkvWeight], views[kQkvBias], bf16(kQkvWeight));
  if (lent.ok()) lent = out.BorrowWeights(views[kOutWeight], views[kOutBias], bf16(kOutWeight));
  if (lent.ok()) lent = fc_.BorrowWeights(views[kFcWeight], views[kFcBias], bf16(kFcWeight));
  if (lent.ok()) {
    lent = proj_.BorrowWeights(views[kProjWeight], views[kProjBias], bf16(kProjWeight));
  }
  if (!lent.ok()) {
    ReturnWeights();
    return absl::Status(lent.code(), absl::StrCat("GptBlock ", index_, ": ", lent.message()));
  }
  lent_.assign(views.begin(), views.end());
  borrowing_ = true;
  return absl::OkStatus();
}

void GptBlock::ReturnWeights() {
  attn_.mutable_qkv().ReturnWeights();
  attn_.mutable_out().ReturnWeights();
  fc_.ReturnWeights();
  proj_.ReturnWeights();
  lent_.clear();
  borrowing_ = false;
}

void GptBlock::DropOwnedWeights() {
  attn_.mutable_qkv().DropOwnedWeights();
  attn_.mutable_out().DropOwnedWeights();
  fc_.DropOwnedWeights();
  proj_.DropOwnedWeights();
  for (std::vector<float>* v : {&ln1_gamma_, &ln1_beta_, &ln2_gamma_, &ln2_beta_}) Free(*v);
  dropped_ = true;
}

absl::Status GptBlock::CheckWeights(const char* call) const {
  if (!dropped_ || borrowing_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "GptBlock ", index_, ": ", call, " without weights: the block borrows them "
      "(DropOwnedWeights) and none are lent; call BorrowWeights first"));
}

void GptBlock::SetGradSink(GradSink sink, GradSlot slot) {
  sink_ = std::move(sink);
  slot_ = std::move(slot);
  for (int k = 0; k < kNumParameters; ++k) AccumulatorOf(k) = gpt_internal::GradAccumulator();
}

}  // namespace loom
