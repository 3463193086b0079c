#include "models/gpt/gpt_model.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/internal/model_util.h"
#include "models/gpt/internal/own_parameter_store.h"
#include "models/gpt/ops.h"
#include "tensor_parallel/placement.h"

namespace loom {

using gpt_internal::AddInto;
using gpt_internal::AppendParameter;
using gpt_internal::Bytes;
using gpt_internal::Free;
using gpt_internal::ToTensor;
using gpt_internal::Values;

namespace {

constexpr char kName[] = "GptModel";
constexpr float kStd = 0.02f;
constexpr float kPositionStd = 0.01f;

// SequenceFirst reorders [batch, seq] ids into [seq, batch], the activations' order.
std::vector<int64_t> SequenceFirst(absl::Span<const int64_t> ids, int64_t batch, int64_t seq) {
  std::vector<int64_t> out(ids.size());
  for (int64_t j = 0; j < batch; ++j) {
    for (int64_t i = 0; i < seq; ++i) out[i * batch + j] = ids[j * seq + i];
  }
  return out;
}

}  // namespace

GptModelOptions GptModelOptions::Stage(const GptConfig& config, int64_t first_block,
                                       int64_t end_block, Recompute recompute) {
  GptModelOptions options;
  options.first_block = first_block;
  options.end_block = end_block;
  options.embedding = first_block == 0;
  options.head = end_block == config.layers;
  options.recompute = recompute;
  return options;
}

absl::StatusOr<std::unique_ptr<GptModel>> GptModel::Create(const GptConfig& config,
                                                           Communicator& tp,
                                                           const GptModelOptions& options) {
  LOOM_RETURN_IF_ERROR(config.Validate(tp.size()));
  if (options.recompute == Recompute::kSelective) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": selective recompute is not implemented (none or full)"));
  }
  GptModelOptions resolved = options;
  if (resolved.end_block < 0) resolved.end_block = config.layers;
  if (resolved.first_block < 0 || resolved.first_block > resolved.end_block ||
      resolved.end_block > config.layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": blocks [", options.first_block, ", ", options.end_block,
        ") are not a range within the model's ", config.layers, " layers"));
  }
  std::unique_ptr<GptModel> model(new GptModel());
  model->config_ = config;
  model->options_ = resolved;
  const GptContextParallel& cp = resolved.context_parallel;
  LOOM_ASSIGN_OR_RETURN(model->positions_, LocalPositions(config.seq_len, cp));
  model->tp_ = &tp;
  const int64_t v = config.vocab, h = config.hidden;
  // The position embedding and the final layer norm have no layer of their own.
  std::vector<float> position, final_gamma, final_beta;
  if (resolved.embedding) {
    const Tensor table = SeededTensor(config.seed, "embed.token", {v, h}, kStd);
    LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding embedding,
                          VocabParallelEmbedding::Create(table, tp, {}));
    model->token_embedding_.emplace(std::move(embedding));
    position = SeededValues(config.seed, "embed.position", config.seq_len * h, kPositionStd);
  }
  model->blocks_.reserve(static_cast<size_t>(resolved.end_block - resolved.first_block));
  for (int64_t i = resolved.first_block; i < resolved.end_block; ++i) {
    LOOM_ASSIGN_OR_RETURN(GptBlock block, GptBlock::Create(config, i, tp, resolved.precision, cp));
    model->blocks_.push_back(std::move(block));
  }
  if (resolved.head) {
    final_gamma = SeededValues(config.seed, "final_ln.gamma", h, 0.0f, 1.0f);
    final_beta = SeededValues(config.seed, "final_ln.beta", h, 0.0f);
    const Tensor head = SeededTensor(config.seed, "head.weight", {v, h}, kStd);
    ColumnParallelOptions head_options;
    head_options.precision = resolved.precision;
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear lm_head,
                          ColumnParallelLinear::Create(head, nullptr, tp, head_options));
    model->lm_head_.emplace(std::move(lm_head));
    LOOM_ASSIGN_OR_RETURN(VocabParallelCrossEntropy ce,
                          VocabParallelCrossEntropy::Create(v, tp, ShardRule::kBalanced));
    model->cross_entropy_.emplace(std::move(ce));
  }
  // The model owns its weights through a store of its own, which the layers
  // borrow from like any other source; the layers' copies go.
  gpt_internal::ParameterList list = model->ListParameters(position, final_gamma, final_beta);
  model->own_store_ = std::make_unique<gpt_internal::OwnParameterStore>(list.initial);
  model->Borrow(model->own_store_.get(), GradientHome::kModel, std::move(list.params));
  for (size_t i = 0; i < model->params_.size(); ++i) {
    model->params_[i].values = model->own_store_->values(static_cast<int>(i));
  }
  return model;
}

absl::StatusOr<float> GptModel::Forward(absl::Span<const int64_t> tokens,
                                        absl::Span<const int64_t> targets) {
  if (!options_.embedding || !options_.head) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": Forward(tokens, targets) needs the whole model; this piece holds blocks [",
        options_.first_block, ", ", options_.end_block, ")", options_.embedding ? "" : " without the embeddings",
        options_.head ? "" : " without the head"));
  }
  GptStageInput input;
  input.tokens = tokens;
  input.targets = targets;
  LOOM_ASSIGN_OR_RETURN(Tensor loss, ForwardStage(input));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> value, Values(loss));
  return value[0];
}

absl::Status GptModel::Backward(float loss_grad) {
  if (!options_.embedding || !options_.head) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": Backward(loss_grad) needs the whole model"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor grad, ToTensor({1}, {loss_grad}));
  return BackwardStage(grad).status();
}

template <typename Body>
auto GptModel::InPass(ParameterPass pass, Body body) -> decltype(body()) {
  LOOM_RETURN_IF_ERROR(source_->BeginParameterPass(pass));
  auto result = body();
  ReturnLent();
  const absl::Status ended = source_->EndPass();
  if (!result.ok()) return result;
  if (!ended.ok()) return ended;
  return result;
}

absl::StatusOr<Tensor> GptModel::ForwardStage(const GptStageInput& input) {
  return InPass(ParameterPass::kForward, [&]() { return RunForward(input); });
}

absl::StatusOr<Tensor> GptModel::RunForward(const GptStageInput& input) {
  ReleaseForwardState();
  const int64_t s = local_seq_len(), h = config_.hidden;
  int64_t batch = 0;
  Tensor x;
  if (options_.embedding) {
    const int64_t n = static_cast<int64_t>(input.tokens.size());
    if (n == 0 || n % s != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": ", n, " tokens are not a positive multiple of ", SeqName(), " ", s));
    }
    batch = n / s;
    LOOM_RETURN_IF_ERROR(LendEmbedding());
    LOOM_ASSIGN_OR_RETURN(x, Embed(input.tokens, batch));
    ReturnLent();
  } else {
    if (input.hidden == nullptr || input.hidden->rank() != 3 || input.hidden->dim(0) != s ||
        input.hidden->dim(1) < 1 || input.hidden->dim(2) != h) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": blocks [", options_.first_block, ", ", options_.end_block,
          ") take hidden activations [", s, ", batch, ", h, "], got ",
          input.hidden == nullptr ? "none" : ShapeString(input.hidden->shape())));
    }
    batch = input.hidden->dim(1);
    x = input.hidden->Clone();
  }
  if (options_.head && static_cast<int64_t>(input.targets.size()) != batch * s) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", input.targets.size(),
                                                   " targets for ", batch * s, " tokens (batch ",
                                                   batch, " x ", SeqName(), " ", s, ")"));
  }
  batch_ = batch;
  Observe();
  for (size_t k = 0; k < blocks_.size(); ++k) {
    GptBlock& block = blocks_[k];
    if (options_.recompute == Recompute::kFull) checkpoints_.push_back(x.Clone());
    LOOM_RETURN_IF_ERROR(LendBlock(k));
    LOOM_ASSIGN_OR_RETURN(Tensor y, block.Forward(x));
    ReturnLent();
    Observe();
    if (options_.recompute == Recompute::kFull) block.ReleaseActivations();
    x = std::move(y);
  }
  if (options_.head) {
    LOOM_RETURN_IF_ERROR(LendHead());
    LOOM_ASSIGN_OR_RETURN(const float loss, HeadForward(x, input.targets, batch));
    ReturnLent();
    has_forward_ = true;
    return ToTensor({1}, {loss});
  }
  has_forward_ = true;
  return x;
}

size_t GptWeightGradWork::bytes() const {
  size_t bytes = token_embedding.bytes() + head.bytes() + Bytes(final_dgamma) + Bytes(final_dbeta);
  for (const GptBlockWeightGradWork& block : blocks) bytes += block.bytes();
  return bytes;
}

absl::StatusOr<Tensor> GptModel::BackwardStage(const Tensor& output_grad) {
  const ParameterPass pass =
      grads_ == GradientHome::kSource ? ParameterPass::kBackward : ParameterPass::kRegather;
  return InPass(pass, [&]() { return RunBackward(output_grad, nullptr); });
}

absl::StatusOr<Tensor> GptModel::BackwardStageInput(const Tensor& output_grad,
                                                    GptWeightGradWork& work) {
  return InPass(ParameterPass::kRegather, [&]() { return RunBackward(output_grad, &work); });
}

absl::StatusOr<Tensor> GptModel::RunBackward(const Tensor& output_grad,
                                             GptWeightGradWork* deferred) {
  if (!has_forward_) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": BackwardStage without a ForwardStage since the last one"));
  }
  const std::vector<int64_t> expected =
      options_.head ? std::vector<int64_t>{1}
                    : std::vector<int64_t>{local_seq_len(), batch_, config_.hidden};
  if (output_grad.shape() != expected || output_grad.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": output gradient shape ",
                                                   ShapeString(output_grad.shape()),
                                                   " must be ", ShapeString(expected)));
  }
  has_forward_ = false;
  // Without `deferred`, each part's weight gradients are added as soon as its
  // input gradient is out, so the work never holds more than one part.
  GptWeightGradWork immediate;
  GptWeightGradWork& work = deferred != nullptr ? *deferred : immediate;
  work = GptWeightGradWork();
  work.blocks.resize(blocks_.size());
  Tensor dx;
  if (options_.head) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<const float> g, Values(output_grad));
    LOOM_RETURN_IF_ERROR(LendHead());
    LOOM_ASSIGN_OR_RETURN(dx, HeadBackwardInput(g[0], work));
    ReturnLent();
    if (deferred == nullptr) {
      LOOM_RETURN_IF_ERROR(HeadBackwardWeight(work));
      work.head = WeightGradWork();
      work.final_dgamma = std::vector<float>();
      work.final_dbeta = std::vector<float>();
    }
  } else {
    dx = output_grad.Clone();
  }
  Observe(work.bytes());
  for (size_t k = blocks_.size(); k-- > 0;) {
    LOOM_RETURN_IF_ERROR(LendBlock(k));
    if (options_.recompute == Recompute::kFull) {
      LOOM_RETURN_IF_ERROR(blocks_[k].Forward(checkpoints_[k]).status());
      Observe(work.bytes());
      checkpoints_[k] = Tensor();
    }
    LOOM_ASSIGN_OR_RETURN(dx, blocks_[k].BackwardInput(dx, work.blocks[k]));
    ReturnLent();
    if (deferred == nullptr) {
      LOOM_RETURN_IF_ERROR(blocks_[k].BackwardWeight(work.blocks[k]));
      work.blocks[k] = GptBlockWeightGradWork();
    }
    Observe(work.bytes());
  }
  checkpoints_.clear();
  if (options_.embedding) {
    LOOM_RETURN_IF_ERROR(token_embedding_->BackwardInput(dx, work.token_embedding));
    if (deferred == nullptr) {
      LOOM_RETURN_IF_ERROR(EmbedBackwardWeight(work.token_embedding));
      work.token_embedding = WeightGradWork();
    }
    dx = Tensor();
    Observe(work.bytes());
  }
  if (deferred != nullptr) pending_work_bytes_ += work.bytes();
  Observe();
  return dx;
}

absl::Status GptModel::BackwardStageWeight(const GptWeightGradWork& work) {
  if (grads_ == GradientHome::kSource) {
    return InPass(ParameterPass::kGradients, [&]() { return ApplyWeightWork(work); });
  }
  return ApplyWeightWork(work);
}

absl::Status GptModel::ApplyWeightWork(const GptWeightGradWork& work) {
  if (work.blocks.size() != blocks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight-gradient work of ", work.blocks.size(), " blocks for a piece of ",
        blocks_.size(), " (blocks [", options_.first_block, ", ", options_.end_block, "))"));
  }
  // In BackwardStage's order: head, blocks from the last, embeddings.
  if (options_.head) LOOM_RETURN_IF_ERROR(HeadBackwardWeight(work));
  for (size_t k = blocks_.size(); k-- > 0;) {
    LOOM_RETURN_IF_ERROR(blocks_[k].BackwardWeight(work.blocks[k]));
  }
  if (options_.embedding) LOOM_RETURN_IF_ERROR(EmbedBackwardWeight(work.token_embedding));
  pending_work_bytes_ -= std::min(pending_work_bytes_, work.bytes());
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GptModel::Embed(absl::Span<const int64_t> tokens, int64_t batch) {
  const int64_t s = local_seq_len(), h = config_.hidden;
  const std::vector<int64_t> ids = SequenceFirst(tokens, batch, s);
  LOOM_ASSIGN_OR_RETURN(Tensor x, token_embedding_->Forward(ids, {s, batch}));
  LOOM_ASSIGN_OR_RETURN(absl::Span<float> xv, x.As<float>());
  const absl::Span<const float> position = lent_position_;
  for (int64_t i = 0; i < s; ++i) {
    for (int64_t j = 0; j < batch; ++j) {
      const float* row = position.data() + positions_[i] * h;
      for (int64_t k = 0; k < h; ++k) xv[(i * batch + j) * h + k] += row[k];
    }
  }
  return x;
}

absl::Status GptModel::EmbedBackwardWeight(const WeightGradWork& work) {
  const int64_t s = local_seq_len(), h = config_.hidden;
  LOOM_RETURN_IF_ERROR(token_embedding_->BackwardWeight(work));
  LOOM_RETURN_IF_ERROR(Give(token_grad_, 0, token_embedding_->weight_grad()));
  token_embedding_->ReleaseWeightGradients();
  // The token embedding's output gradient, [s, b, h] (checked by BackwardWeight),
  // is also the position embedding's. Summed over the batch first, then added, so
  // the accumulator gets one addition per backward whatever the batch.
  const absl::Span<const float> g = work.grad_output;
  const int64_t b = static_cast<int64_t>(g.size()) / (s * h);
  // Under context parallelism the rows this rank does not hold get no gradient here.
  std::vector<float> position_grad(static_cast<size_t>(config_.seq_len * h), 0.0f);
  for (int64_t i = 0; i < s; ++i) {
    float* row = position_grad.data() + positions_[i] * h;
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t k = 0; k < h; ++k) row[k] += g[(i * b + j) * h + k];
    }
  }
  LOOM_RETURN_IF_ERROR(Give(position_grad_, 1, position_grad));
  return absl::OkStatus();
}

absl::StatusOr<float> GptModel::HeadForward(const Tensor& x, absl::Span<const int64_t> targets,
                                            int64_t batch) {
  const int64_t s = local_seq_len();
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> xv, Values(x));
  final_x_.assign(xv.begin(), xv.end());
  LOOM_ASSIGN_OR_RETURN(LayerNormOutput ln,
                        LayerNormForward(final_x_, lent_final_gamma_, lent_final_beta_,
                                         config_.layer_norm_eps));
  final_mean_ = std::move(ln.mean);
  final_rstd_ = std::move(ln.rstd);
  LOOM_ASSIGN_OR_RETURN(Tensor normed, ToTensor(x.shape(), ln.y));
  LOOM_ASSIGN_OR_RETURN(Tensor logits, lm_head_->Forward(normed));
  const std::vector<int64_t> target_ids = SequenceFirst(targets, batch, s);
  LOOM_ASSIGN_OR_RETURN(Tensor losses, cross_entropy_->Forward(logits, target_ids));
  Observe();
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> lv, Values(losses));
  double sum = 0.0;
  for (const float l : lv) sum += static_cast<double>(l);
  // Over the whole batch's tokens: under context parallelism, this rank's share.
  return static_cast<float>(sum / static_cast<double>(batch * config_.seq_len));
}

absl::Status GptModel::HeadBackwardWeight(const GptWeightGradWork& work) {
  const size_t h = static_cast<size_t>(config_.hidden);
  if (work.final_dgamma.size() != h || work.final_dbeta.size() != h) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight-gradient work holds final layer-norm gradients of ",
        work.final_dgamma.size(), " and ", work.final_dbeta.size(), " values, not hidden ", h));
  }
  const int head = HeadBase();
  // Where the source keeps the head's gradient, its product writes it there.
  absl::Span<float> into;
  if (grads_ == GradientHome::kSource) {
    LOOM_ASSIGN_OR_RETURN(into, source_->GradientSlot(head + 2));
  }
  LOOM_RETURN_IF_ERROR(lm_head_->BackwardWeight(work.head, into));
  if (into.empty()) LOOM_RETURN_IF_ERROR(Give(head_grad_, head + 2, lm_head_->weight_grad()));
  lm_head_->ReleaseWeightGradients();
  LOOM_RETURN_IF_ERROR(Give(final_gamma_grad_, head, work.final_dgamma));
  LOOM_RETURN_IF_ERROR(Give(final_beta_grad_, head + 1, work.final_dbeta));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GptModel::HeadBackwardInput(float loss_grad, GptWeightGradWork& work) {
  const int64_t s = local_seq_len(), b = batch_;
  // Every token's share of the mean over the whole batch (HeadForward).
  const float per_token = loss_grad / static_cast<float>(config_.seq_len * b);
  LOOM_ASSIGN_OR_RETURN(Tensor grad_losses,
                        ToTensor({s, b}, std::vector<float>(static_cast<size_t>(s * b), per_token)));
  LOOM_ASSIGN_OR_RETURN(Tensor dlogits, cross_entropy_->Backward(grad_losses));
  LOOM_ASSIGN_OR_RETURN(Tensor dnormed, lm_head_->BackwardInput(dlogits, work.head));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dn, Values(dnormed));
  const size_t h = static_cast<size_t>(config_.hidden);
  LOOM_ASSIGN_OR_RETURN(gpt_internal::Activation dx,
                        gpt_internal::NewActivation({s, b, config_.hidden}));
  work.final_dgamma.resize(h);
  work.final_dbeta.resize(h);
  LOOM_RETURN_IF_ERROR(LayerNormBackward(final_x_, lent_final_gamma_, final_mean_, final_rstd_,
                                         dn, dx.values, absl::MakeSpan(work.final_dgamma),
                                         absl::MakeSpan(work.final_dbeta)));
  cross_entropy_->ReleaseActivations();
  Free(final_x_);
  Free(final_mean_);
  Free(final_rstd_);
  return std::move(dx.tensor);
}

gpt_internal::ParameterList GptModel::ListParameters(absl::Span<const float> position,
                                                      absl::Span<const float> final_gamma,
                                                      absl::Span<const float> final_beta) {
  const int64_t v = config_.vocab, h = config_.hidden;
  gpt_internal::ParameterList list;
  if (options_.embedding) {
    AppendParameter(list, "embed.token", token_embedding_->weight(), token_grad_, {v, h},
                    TpSplit::kRows);
    AppendParameter(list, "embed.position", position, position_grad_, {config_.seq_len, h});
  }
  for (GptBlock& block : blocks_) block.AppendParameters(list);
  if (options_.head) {
    AppendParameter(list, "final_ln.gamma", final_gamma, final_gamma_grad_);
    AppendParameter(list, "final_ln.beta", final_beta, final_beta_grad_);
    AppendParameter(list, "head.weight", lm_head_->weight(), head_grad_, {v, h}, TpSplit::kRows);
  }
  return list;
}

std::vector<GptParameter> GptModel::Parameters() { return params_; }

std::vector<ModelParameter> GptModel::ParameterViews() {
  std::vector<ModelParameter> views;
  views.reserve(params_.size());
  for (const GptParameter& p : params_) views.push_back({p.name, p.shape, p.values, p.grad});
  return views;
}

void GptModel::ZeroGrad() {
  for (GptParameter& p : Parameters()) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
}

void GptModel::ReleaseActivations() {
  ReleaseForwardState();
  pending_work_bytes_ = 0;
}

void GptModel::ReleaseForwardState() {
  if (token_embedding_.has_value()) token_embedding_->ReleaseActivations();
  for (GptBlock& block : blocks_) block.ReleaseActivations();
  checkpoints_.clear();
  if (lm_head_.has_value()) lm_head_->ReleaseActivations();
  if (cross_entropy_.has_value()) cross_entropy_->ReleaseActivations();
  Free(final_x_);
  Free(final_mean_);
  Free(final_rstd_);
  has_forward_ = false;
}

size_t GptActivations::bytes() const {
  size_t total = embedding.bytes() + Bytes(final_x) + Bytes(final_mean) + Bytes(final_rstd) +
                 head.bytes() + cross_entropy.bytes();
  for (const GptBlock::ForwardState& block : blocks) total += block.bytes();
  for (const Tensor& t : checkpoints) total += t.size_bytes();
  return total;
}

GptActivations GptModel::TakeActivations() {
  GptActivations a;
  a.valid = has_forward_;
  a.batch = batch_;
  if (token_embedding_.has_value()) a.embedding = token_embedding_->TakeForwardState();
  a.blocks.reserve(blocks_.size());
  for (GptBlock& block : blocks_) a.blocks.push_back(block.TakeForwardState());
  a.checkpoints = std::exchange(checkpoints_, {});
  a.final_x = std::exchange(final_x_, {});
  a.final_mean = std::exchange(final_mean_, {});
  a.final_rstd = std::exchange(final_rstd_, {});
  if (lm_head_.has_value()) a.head = lm_head_->TakeForwardState();
  if (cross_entropy_.has_value()) a.cross_entropy = cross_entropy_->TakeForwardState();
  has_forward_ = false;
  return a;
}

absl::Status GptModel::RestoreActivations(GptActivations&& activations) {
  if (has_forward_) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": RestoreActivations while the model holds a forward's state (blocks [",
        options_.first_block, ", ", options_.end_block, "))"));
  }
  if (!activations.valid) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": RestoreActivations of an empty context (taken with no forward)"));
  }
  if (activations.blocks.size() != blocks_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": RestoreActivations of a piece with ", activations.blocks.size(),
        " blocks into one with ", blocks_.size()));
  }
  batch_ = activations.batch;
  if (token_embedding_.has_value()) {
    token_embedding_->RestoreForwardState(std::move(activations.embedding));
  }
  for (size_t k = 0; k < blocks_.size(); ++k) {
    blocks_[k].RestoreForwardState(std::move(activations.blocks[k]));
  }
  checkpoints_ = std::move(activations.checkpoints);
  final_x_ = std::move(activations.final_x);
  final_mean_ = std::move(activations.final_mean);
  final_rstd_ = std::move(activations.final_rstd);
  if (lm_head_.has_value()) lm_head_->RestoreForwardState(std::move(activations.head));
  if (cross_entropy_.has_value()) {
    cross_entropy_->RestoreForwardState(std::move(activations.cross_entropy));
  }
  activations.valid = false;
  has_forward_ = true;
  return absl::OkStatus();
}

size_t GptModel::held_activation_bytes() const {
  size_t bytes = Bytes(final_x_) + Bytes(final_mean_) + Bytes(final_rstd_);
  if (token_embedding_.has_value()) bytes += token_embedding_->saved_activation_bytes();
  for (const GptBlock& block : blocks_) bytes += block.saved_activation_bytes();
  for (const Tensor& t : checkpoints_) bytes += t.size_bytes();
  if (lm_head_.has_value()) bytes += lm_head_->saved_activation_bytes();
  if (cross_entropy_.has_value()) bytes += cross_entropy_->saved_activation_bytes();
  return bytes + pending_work_bytes_;
}

void GptModel::Observe(size_t extra) {
  peak_bytes_ = std::max(peak_bytes_, held_activation_bytes() + extra);
}

absl::Status GptModel::UseParameterSource(ParameterSource* source, GradientHome grads) {
  if (source == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": UseParameterSource(nullptr)"));
  }
  if (own_store_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": UseParameterSource called twice"));
  }
  std::vector<GptParameter> params = std::move(params_);
  for (GptParameter& p : params) p.values = {};
  Borrow(source, grads, std::move(params));
  own_store_.reset();
  return absl::OkStatus();
}

void GptModel::Borrow(ParameterSource* source, GradientHome grads,
                      std::vector<GptParameter> params) {
  source_ = source;
  grads_ = grads;
  params_ = std::move(params);
  if (token_embedding_.has_value()) token_embedding_->DropOwnedWeights();
  for (size_t k = 0; k < blocks_.size(); ++k) {
    blocks_[k].DropOwnedWeights();
    if (grads == GradientHome::kSource) {
      const int base = BlockBase(k);
      blocks_[k].SetGradSink(
          [this, base](int i, absl::Span<const float> grad) {
            return source_->AddGrad(base + i, grad);
          },
          [this, base](int i) { return source_->GradientSlot(base + i); });
    }
  }
  if (lm_head_.has_value()) lm_head_->DropOwnedWeights();
  if (grads == GradientHome::kSource) {
    for (GptParameter& p : params_) p.grad = {};
    for (gpt_internal::GradAccumulator* g :
         {&token_grad_, &position_grad_, &final_gamma_grad_, &final_beta_grad_, &head_grad_}) {
      *g = gpt_internal::GradAccumulator();
    }
  }
}

int GptModel::BlockBase(size_t k) const {
  return (options_.embedding ? 2 : 0) + GptBlock::kNumParameters * static_cast<int>(k);
}

int GptModel::HeadBase() const { return BlockBase(blocks_.size()); }

std::vector<ParameterUnit> GptModel::Units() const {
  std::vector<ParameterUnit> units;
  if (options_.embedding) units.push_back({"embed", 0, 2});
  for (size_t k = 0; k < blocks_.size(); ++k) {
    const int base = BlockBase(k);
    units.push_back({absl::StrCat("blocks.", options_.first_block + static_cast<int64_t>(k)),
                     base, base + GptBlock::kNumParameters});
  }
  if (options_.head) units.push_back({"head", HeadBase(), HeadBase() + 3});
  return units;
}

absl::Status GptModel::Give(gpt_internal::GradAccumulator& accumulator, int param,
                            absl::Span<const float> grad) {
  if (grads_ == GradientHome::kSource) {
    return source_->AddGrad(param, grad);
  }
  return AddInto(accumulator, grad);
}

absl::Status GptModel::Give(gpt_internal::GradAccumulator& accumulator, int param,
                            const Tensor& grad) {
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> values, Values(grad));
  return Give(accumulator, param, values);
}

absl::StatusOr<UnitLease> GptModel::LeaseUnit(size_t index) {
  // The units never change after Create: listed once, not at every lease (a
  // lease is taken per unit per pass).
  if (lease_units_.empty()) lease_units_ = Units();
  if (index >= lease_units_.size()) {
    return absl::InternalError(
        absl::StrCat(kName, ": unit ", index, " of a model with ", lease_units_.size()));
  }
  return source_->LeaseUnit(lease_units_[index]);
}

absl::Status GptModel::LendEmbedding() {
  LOOM_ASSIGN_OR_RETURN(UnitLease lease, LeaseUnit(0));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> table, lease.Get(0));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> position, lease.Get(1));
  leases_.push_back(std::move(lease));
  const size_t position_numel = static_cast<size_t>(config_.seq_len * config_.hidden);
  if (position.size() != position_numel) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": the source lent ", position.size(),
                                                   " values of embed.position, not ",
                                                   position_numel));
  }
  LOOM_RETURN_IF_ERROR(token_embedding_->BorrowWeights(table));
  lent_position_ = position;
  embedding_lent_ = true;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const BFloat16>> GptModel::AcquireBf16(int param) {
  if (options_.precision != GemmPrecision::kBf16) return absl::Span<const BFloat16>();
  absl::StatusOr<absl::Span<const BFloat16>> view = source_->AcquireBf16(param);
  if (absl::IsUnimplemented(view.status())) return absl::Span<const BFloat16>();
  return view;
}

absl::Status GptModel::LendBlock(size_t k) {
  const int base = BlockBase(k);
  LOOM_ASSIGN_OR_RETURN(UnitLease lease, LeaseUnit((options_.embedding ? 1 : 0) + k));
  std::vector<absl::Span<const float>> views;
  std::vector<absl::Span<const BFloat16>> bf16_views;
  for (int i = 0; i < GptBlock::kNumParameters; ++i) {
    // Layer norms and biases stay f32; only the four projections multiply in bf16.
    // A projection lent in bf16 is not asked for in f32: a source that widens on
    // demand (zero3) then never widens it.
    absl::Span<const BFloat16> view16;
    if (GptBlock::IsProjectionWeight(i)) {
      LOOM_ASSIGN_OR_RETURN(view16, AcquireBf16(base + i));
    }
    absl::Span<const float> view;
    if (view16.empty()) {
      LOOM_ASSIGN_OR_RETURN(view, lease.Get(base + i));
    }
    views.push_back(view);
    bf16_views.push_back(view16);
  }
  LOOM_RETURN_IF_ERROR(blocks_[k].BorrowWeights(views, bf16_views));
  lent_blocks_.push_back(k);
  leases_.push_back(std::move(lease));
  return absl::OkStatus();
}

absl::Status GptModel::LendHead() {
  const int head = HeadBase();
  LOOM_ASSIGN_OR_RETURN(UnitLease lease,
                        LeaseUnit((options_.embedding ? 1 : 0) + blocks_.size()));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> gamma, lease.Get(head));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> beta, lease.Get(head + 1));
  const size_t h = static_cast<size_t>(config_.hidden);
  if (gamma.size() != h || beta.size() != h) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": the source lent ", gamma.size(),
                                                   " and ", beta.size(),
                                                   " values of the final layer norm, not ", h));
  }
  // As a block's projections: lent in bf16, the head's weight is not asked for in f32.
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const BFloat16> weight16, AcquireBf16(head + 2));
  absl::Span<const float> weight;
  if (weight16.empty()) {
    LOOM_ASSIGN_OR_RETURN(weight, lease.Get(head + 2));
  }
  LOOM_RETURN_IF_ERROR(lm_head_->BorrowWeights(weight, {}, weight16));
  lent_final_gamma_ = gamma;
  lent_final_beta_ = beta;
  head_lent_ = true;
  leases_.push_back(std::move(lease));
  return absl::OkStatus();
}

void GptModel::ReturnLent() {
  if (embedding_lent_) token_embedding_->ReturnWeights();
  if (head_lent_) lm_head_->ReturnWeights();
  for (const size_t k : lent_blocks_) blocks_[k].ReturnWeights();
  lent_blocks_.clear();
  lent_position_ = lent_final_gamma_ = lent_final_beta_ = {};
  embedding_lent_ = head_lent_ = false;
  leases_.clear();  // the units go back to the source
}

}  // namespace loom
