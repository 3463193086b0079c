#include "tools/training/rank_optimizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "models/gpt/gpt_model.h"
#include "tensor_parallel/tensor.h"
#include "tools/training/device_adamw.h"
#include "tools/training/lr_schedule.h"
#include "topology/memory_estimate.h"
#include "zero3/partition.h"
#include "zero3/zero3_engine.h"

namespace loom {

LrSchedule ScheduleOf(const TrainJobOptions& options) {
  return LrSchedule{options.lr, options.lr_min.value_or(options.lr), options.warmup_steps,
                    options.steps};
}

AdamWHyper AdamWHyperAt(const TrainJobOptions& options, int64_t step) {
  AdamWHyper hyper;
  hyper.lr = ScheduleOf(options).LrAt(step);
  hyper.weight_decay = options.weight_decay;
  hyper.eps = options.adam_eps;
  hyper.step = step;
  return hyper;
}

namespace {

// EngineState: one rank's ZeRO state as the engine's ReadShard / ReadMoments lay it
// out: for each field (0 the f32 master, 1 and 2 AdamW's moments) the rank's
// concatenated bucket shards and the persistent block.
class EngineState {
 public:
  static constexpr int kFields = 3;

  explicit EngineState(const Partition& part) {
    for (int f = 0; f < kFields; ++f) {
      sharded_[f].resize(static_cast<size_t>(part.ShardNumel()));
      persistent_[f].resize(static_cast<size_t>(part.PersistentNumel()));
    }
  }

  absl::Span<float> Whole(int field, bool persistent) {
    return absl::MakeSpan(persistent ? persistent_[field] : sharded_[field]);
  }

  // Owned: the elements of parameter `param` that `rank` owns (OwnedRange), in
  // field `field`.
  absl::Span<float> Owned(const Partition& part, int param, int rank, int field) {
    const ParamSlot& slot = part.slot(param);
    const Partition::Range owned = part.OwnedRange(param, rank);
    int64_t at = slot.offset + owned.begin;
    if (!slot.persistent) {
      at += part.ShardOffset(slot.bucket) -
            static_cast<int64_t>(rank) * part.bucket(slot.bucket).shard_numel;
    }
    return Whole(field, slot.persistent)
        .subspan(static_cast<size_t>(at), static_cast<size_t>(owned.end - owned.begin));
  }

 private:
  std::array<std::vector<float>, kFields> sharded_, persistent_;
};

// ZeRO stages 1, 2 and 3 through zero3/Zero3Engine. The stage's layers own their
// weights for the whole step, so the engine's part is one gather before the step
// (nothing to gather at stages 1 and 2, which keep the whole parameters) and one
// kGradients pass plus Step after it.
class ShardedOptimizer : public RankOptimizer {
 public:
  // With `borrower` (--reshard block) the model borrows its weights from the
  // engine from now on, each unit (UnitOf) one bucket.
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(const TrainJobOptions& options,
                                                                  std::vector<GptParameter> params,
                                                                  Communicator* dp, DiskTier* disk,
                                                                  const std::string& disk_prefix,
                                                                  GptModel* borrower = nullptr) {
    std::vector<ParamSpec> specs;
    std::vector<float> initial;
    std::string last_unit;
    int unit = -1;
    for (const GptParameter& p : params) {
      ParamSpec spec{p.name, p.shape};
      if (borrower != nullptr) {
        if (UnitOf(p.name) != last_unit) ++unit;
        last_unit = UnitOf(p.name);
        spec.unit = unit;
      }
      specs.push_back(std::move(spec));
      initial.insert(initial.end(), p.values.begin(), p.values.end());
    }
    PartitionOptions partition_options;
    partition_options.dp_size = options.dp;
    partition_options.bucket_numel = 1 << 15;
    partition_options.persistence_threshold = 256;
    LOOM_ASSIGN_OR_RETURN(Partition partition, Partition::Create(specs, partition_options));
    Zero3Options zero;
    zero.stage = options.zero;
    zero.compute_dtype = options.dtype;
    zero.offload_optimizer = options.offload != OffloadKind::kNone;
    zero.optimizer_disk = options.offload == OffloadKind::kNvme ? disk : nullptr;
    zero.param_disk = options.offload_params == OffloadKind::kNvme ? disk : nullptr;
    zero.max_live_gathered_bytes = options.param_budget;
    zero.prefetch_depth = options.prefetch_depth;
    zero.disk_prefix = disk_prefix;
    zero.adamw_threads = options.adamw_threads;
    zero.timeout = kCollectiveTimeout;
    // Every dp rank runs every block of its stage: a rank that skipped one is a
    // bug, named at the next agreement check rather than trained around.
    zero.require_same_use = true;
    // Block reshard: one backward pass per microbatch (and stage), each the
    // gradient of a loss already scaled by 1 / microbatches: summed, not averaged.
    zero.average_passes = borrower == nullptr;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Engine> engine,
                          Zero3Engine::Create(partition, dp, initial, zero));
    initial = std::vector<float>();
    if (borrower != nullptr) {
      LOOM_RETURN_IF_ERROR(borrower->UseParameterSource(
          engine.get(), options.defer_reduce_scatter ? GptModel::GradientHome::kModel
                                                     : GptModel::GradientHome::kSource));
      params = borrower->Parameters();  // no values; gradients only when deferred
    }
    return std::unique_ptr<ShardedOptimizer>(
        new ShardedOptimizer(options, std::move(params), std::move(engine), borrower != nullptr));
  }

  // UnitOf: the unit a parameter is gathered with under block reshard: its block
  // ("blocks.3"), or its first name component ("embed", "final_ln", "head").
  static std::string UnitOf(const std::string& name) {
    const size_t first = name.find('.');
    if (name.rfind("blocks.", 0) == 0) return name.substr(0, name.find('.', first + 1));
    return name.substr(0, first);
  }

  absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() override {
    LOOM_ASSIGN_OR_RETURN(std::vector<float> flat, engine_->GatherAll());
    // GatherAll gives the f32 masters; the model computes with their compute copy
    // (bf16: rounded to nearest even, as the engine writes it).
    if (options_.dtype == DType::kBF16) {
      for (float& v : flat) v = ToFloat(ToBFloat16(v));
    }
    std::vector<std::vector<float>> weights;
    size_t at = 0;
    for (const GptParameter& p : params_) {
      const size_t n = static_cast<size_t>(NumElements(p.shape));
      weights.emplace_back(flat.begin() + at, flat.begin() + at + n);
      at += n;
    }
    return weights;
  }

  absl::Status BeforeStep() override {
    if (borrows_) return absl::OkStatus();  // the model gathers per unit
    LOOM_RETURN_IF_ERROR(engine_->BeginPass(Zero3Pass::kForward));
    for (size_t p = 0; p < params_.size(); ++p) {
      LOOM_ASSIGN_OR_RETURN(absl::Span<const float> w, engine_->Acquire(static_cast<int>(p)));
      std::copy(w.begin(), w.end(), params_[p].values.begin());
    }
    return engine_->EndPass();
  }

  absl::Status ReduceGradients() override {
    // Block reshard without deferral: the backward passes reduced them already.
    if (borrows_ && !options_.defer_reduce_scatter) return engine_->ReduceGradients();
    LOOM_RETURN_IF_ERROR(engine_->BeginPass(Zero3Pass::kGradients));
    for (int p = static_cast<int>(params_.size()) - 1; p >= 0; --p) {
      LOOM_RETURN_IF_ERROR(engine_->AddGrad(p, params_[p].grad));
    }
    LOOM_RETURN_IF_ERROR(engine_->EndPass());
    return engine_->ReduceGradients();
  }

  absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const override {
    // The engine counts its persistent parameters on dp rank 0 only.
    return engine_->ReducedGradSquaredNorm(param_weight);
  }

  absl::Status ApplyStep(int64_t step, float grad_scale) override {
    AdamWHyper hyper = AdamWHyperAt(options_, step);
    hyper.grad_scale = grad_scale;
    return engine_->Step(hyper);
  }

  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    ModelStateOptions estimate;
    estimate.num_parameters = engine_->partition().TotalNumel();
    // The engine keeps bf16 weights and gradients and an f32 master (16 bytes).
    estimate.precision = options_.dtype == DType::kBF16 ? PrecisionPolicy::kMixedPrecisionAdam
                                                        : PrecisionPolicy::kFp32Adam;
    estimate.zero_stage = options_.zero;
    estimate.dp = options_.dp;
    estimate.buffers.unit_numel = engine_->partition().MaxBucketNumel();
    estimate.buffers.gathered_units = engine_->gather_buffers();
    estimate.buffers.gathered_bytes_per_element = engine_->gathered_bytes_per_element();
    estimate.buffers.gradient_units = engine_->grad_buffers();
    // The layers' own f32 weights and gradients (step), or the model's gradient
    // sums (block, deferred).
    estimate.resident_bytes_per_parameter = !borrows_                     ? 8
                                            : options_.defer_reduce_scatter ? 4
                                                                            : 0;
    LOOM_ASSIGN_OR_RETURN(const ModelStateBytes bytes, EstimateModelStateBytes(estimate));
    return bytes.total();
  }

  int64_t ShardedBytes() const override {
    const Zero3Stats stats = engine_->Stats();
    return stats.model_state_bytes + stats.persistent_state_bytes;
  }
  // The engine's communication buffers: the gathered units and gradient buckets.
  int64_t BufferBytes() const override { return engine_->Stats().buffer_bytes; }
  double WaitSeconds() const override {
    const Zero3Stats stats = engine_->Stats();
    return stats.gather_wait_seconds + stats.grad_buffer_wait_seconds;
  }
  int64_t BucketNumel() const override {
    return engine_->partition().ShardNumel() * options_.dp;
  }
  int64_t PersistentNumel() const override { return engine_->partition().PersistentNumel(); }
  int64_t Units() const override { return engine_->partition().num_buckets(); }
  int64_t KeptUnits() const override { return engine_->Stats().gathers_kept; }
  int64_t KeptNumel() const override { return engine_->Stats().gathered_numel_kept; }
  int64_t DiskBytes() const override { return engine_->Stats().disk_state_bytes; }
  int64_t StateBytes() const override {
    int64_t resident = 0;
    for (const GptParameter& p : params_) {
      resident += static_cast<int64_t>((p.values.size() + p.grad.size()) * sizeof(float));
    }
    return ShardedBytes() + BufferBytes() + resident;
  }

  absl::StatusOr<std::vector<StateSlice>> ReadState() const override {
    const Partition& part = engine_->partition();
    const int rank = engine_->rank();
    EngineState state(part);
    LOOM_RETURN_IF_ERROR(engine_->ReadShard(state.Whole(0, false), state.Whole(0, true)));
    LOOM_RETURN_IF_ERROR(engine_->ReadMoments(state.Whole(1, false), state.Whole(1, true),
                                              state.Whole(2, false), state.Whole(2, true)));
    std::vector<StateSlice> slices;
    for (int p = 0; p < part.num_params(); ++p) {
      const Partition::Range owned = part.OwnedRange(p, rank);
      if (owned.begin == owned.end) continue;
      StateSlice slice;
      slice.param = p;
      slice.begin = owned.begin;
      slice.end = owned.end;
      slice.dp_replicated = part.slot(p).persistent;
      std::vector<float>* fields[EngineState::kFields] = {&slice.master, &slice.exp_avg,
                                                          &slice.exp_avg_sq};
      for (int f = 0; f < EngineState::kFields; ++f) {
        const absl::Span<const float> from = state.Owned(part, p, rank, f);
        fields[f]->assign(from.begin(), from.end());
      }
      slices.push_back(std::move(slice));
    }
    return slices;
  }

  absl::Status WriteState(const StateSource& source) override {
    const Partition& part = engine_->partition();
    const int rank = engine_->rank();
    EngineState state(part);  // padding stays 0, as the engine keeps it
    for (int p = 0; p < part.num_params(); ++p) {
      const Partition::Range owned = part.OwnedRange(p, rank);
      if (owned.begin == owned.end) continue;
      LOOM_RETURN_IF_ERROR(source(p, owned.begin, owned.end, state.Owned(part, p, rank, 0),
                                  state.Owned(part, p, rank, 1), state.Owned(part, p, rank, 2)));
    }
    LOOM_RETURN_IF_ERROR(engine_->WriteShard(state.Whole(0, false), state.Whole(0, true)));
    return engine_->WriteMoments(state.Whole(1, false), state.Whole(1, true), state.Whole(2, false),
                                 state.Whole(2, true));
  }

 private:
  ShardedOptimizer(const TrainJobOptions& options, std::vector<GptParameter> params,
                   std::unique_ptr<Zero3Engine> engine, bool borrows)
      : options_(options), params_(std::move(params)), engine_(std::move(engine)),
        borrows_(borrows) {}

  TrainJobOptions options_;
  std::vector<GptParameter> params_;
  std::unique_ptr<Zero3Engine> engine_;
  const bool borrows_;  // --reshard block: the model borrows from engine_
};

// StagedOptimizer: one optimizer per pipeline stage a rank holds (block reshard:
// an engine per stage model, so that a stage's pass gathers that stage's units
// only), seen as one over the rank's parameters, stage after stage. The engines
// share the dp communicator: each pass ends with its collectives done, so they
// take turns.
class StagedOptimizer : public RankOptimizer {
 public:
  StagedOptimizer(std::vector<std::unique_ptr<RankOptimizer>> parts, std::vector<int> offsets)
      : parts_(std::move(parts)), offsets_(std::move(offsets)) {}

  absl::Status BeforeStep() override {
    for (auto& part : parts_) LOOM_RETURN_IF_ERROR(part->BeforeStep());
    return absl::OkStatus();
  }
  absl::Status ReduceGradients() override {
    for (auto& part : parts_) LOOM_RETURN_IF_ERROR(part->ReduceGradients());
    return absl::OkStatus();
  }
  absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const override {
    double sum = 0;
    for (size_t i = 0; i < parts_.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(const double part,
                            parts_[i]->GradSquaredNorm(param_weight.subspan(
                                static_cast<size_t>(offsets_[i]),
                                static_cast<size_t>(offsets_[i + 1] - offsets_[i]))));
      sum += part;
    }
    return sum;
  }
  absl::Status ApplyStep(int64_t step, float grad_scale) override {
    for (auto& part : parts_) LOOM_RETURN_IF_ERROR(part->ApplyStep(step, grad_scale));
    return absl::OkStatus();
  }
  int64_t StateBytes() const override { return Sum(&RankOptimizer::StateBytes); }
  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    int64_t total = 0;
    for (const auto& part : parts_) {
      LOOM_ASSIGN_OR_RETURN(const int64_t bytes, part->EstimatedStateBytes());
      total += bytes;
    }
    return total;
  }
  int64_t ShardedBytes() const override { return Sum(&RankOptimizer::ShardedBytes); }
  int64_t DiskBytes() const override { return Sum(&RankOptimizer::DiskBytes); }
  int64_t BufferBytes() const override { return Sum(&RankOptimizer::BufferBytes); }
  double WaitSeconds() const override {
    double total = 0;
    for (const auto& part : parts_) total += part->WaitSeconds();
    return total;
  }
  int64_t BucketNumel() const override { return Sum(&RankOptimizer::BucketNumel); }
  int64_t PersistentNumel() const override { return Sum(&RankOptimizer::PersistentNumel); }
  int64_t Units() const override { return Sum(&RankOptimizer::Units); }
  int64_t KeptUnits() const override { return Sum(&RankOptimizer::KeptUnits); }
  int64_t KeptNumel() const override { return Sum(&RankOptimizer::KeptNumel); }

  absl::StatusOr<std::vector<StateSlice>> ReadState() const override {
    std::vector<StateSlice> all;
    for (size_t i = 0; i < parts_.size(); ++i) {
      LOOM_ASSIGN_OR_RETURN(std::vector<StateSlice> slices, parts_[i]->ReadState());
      for (StateSlice& slice : slices) {
        slice.param += offsets_[i];
        all.push_back(std::move(slice));
      }
    }
    return all;
  }
  absl::Status WriteState(const StateSource& source) override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      const int offset = offsets_[i];
      LOOM_RETURN_IF_ERROR(parts_[i]->WriteState(
          [&source, offset](int param, int64_t begin, int64_t end, absl::Span<float> master,
                            absl::Span<float> m, absl::Span<float> v) {
            return source(param + offset, begin, end, master, m, v);
          }));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() override {
    std::vector<std::vector<float>> all;
    for (auto& part : parts_) {
      LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> weights, part->GatherWeights());
      for (std::vector<float>& w : weights) all.push_back(std::move(w));
    }
    return all;
  }

 private:
  int64_t Sum(int64_t (RankOptimizer::*figure)() const) const {
    int64_t total = 0;
    for (const auto& part : parts_) total += ((*part).*figure)();
    return total;
  }

  std::vector<std::unique_ptr<RankOptimizer>> parts_;
  std::vector<int> offsets_;  // parts_.size() + 1: where each part's parameters start
};

// Plain data parallelism: every rank keeps the whole AdamW state, gradients are
// averaged by one all-reduce of the flattened gradients (a bucket, as DDP's), and
// AdamW updates each parameter where it lives. In f32 the layers' weights are the
// master; in bf16 the weights hold the bf16 compute copy (widened) and an f32
// master is kept beside them, and the averaged f32 gradient is rounded once to
// bf16, as the ZeRO engine does, so that zero 0 and zero 1-3 agree.
class DataParallelOptimizer : public RankOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> Create(
      const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp,
      const GradientBinder& bind_gradients) {
    auto optimizer = std::unique_ptr<DataParallelOptimizer>(
        new DataParallelOptimizer(options, std::move(params), dp));
    const bool bf16 = options.dtype == DType::kBF16;
    int64_t total = 0;
    for (GptParameter& p : optimizer->params_) {
      const int64_t n = static_cast<int64_t>(p.values.size());
      total += n;
      LOOM_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(n));
      optimizer->states_.push_back(std::move(state));
      if (bf16) {
        optimizer->masters_.emplace_back(p.values.begin(), p.values.end());
        for (float& v : p.values) v = ToFloat(ToBFloat16(v));
      }
    }
    // The bucket is communication memory: from the dp transport (shm: its peers map
    // it, so the all-reduce reads it without a kernel copy).
    LOOM_ASSIGN_OR_RETURN(optimizer->flat_grad_memory_,
                          dp->AllocateBuffer(static_cast<size_t>(total) * sizeof(float)));
    optimizer->flat_grad_ = optimizer->flat_grad_memory_.As<float>();
    if (bind_gradients) {
      // The model accumulates into the bucket: ReduceGradients then copies nothing.
      LOOM_ASSIGN_OR_RETURN(std::vector<GptParameter> bound, bind_gradients(optimizer->flat_grad_));
      if (bound.size() != optimizer->params_.size()) {
        return absl::InternalError(absl::StrCat("binding the gradients returned ", bound.size(),
                                                " parameters for ", optimizer->params_.size()));
      }
      optimizer->params_ = std::move(bound);
    }
    return optimizer;
  }

  absl::Status BeforeStep() override { return absl::OkStatus(); }

  absl::Status ReduceGradients() override {
    const bool bf16 = options_.dtype == DType::kBF16;
    size_t at = 0;
    for (const GptParameter& p : params_) {
      // Nothing to copy where the model accumulates in the bucket (bound).
      if (p.grad.data() != flat_grad_.data() + at) {
        std::copy(p.grad.begin(), p.grad.end(), flat_grad_.begin() + at);
      }
      at += p.grad.size();
    }
    if (dp_->size() > 1) {
      LOOM_RETURN_IF_ERROR(dp_->AllReduce(absl::MakeSpan(flat_grad_), ReduceOp::kAvg));
    }
    // bf16: the average of the f32 sums is rounded once into the bf16 gradient.
    if (bf16) {
      for (float& g : flat_grad_) g = ToFloat(ToBFloat16(g));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const override {
    if (param_weight.size() != params_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("GradSquaredNorm: ", param_weight.size(),
                                                     " weights for ", params_.size(),
                                                     " parameters"));
    }
    // Every dp rank holds the same averaged gradient: rank 0 counts it.
    if (dp_->rank() != 0) return 0.0;
    double sum = 0;
    size_t at = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      double part = 0;
      for (size_t i = 0; i < params_[k].grad.size(); ++i) {
        const double g = flat_grad_[at + i];
        part += g * g;
      }
      at += params_[k].grad.size();
      sum += part * static_cast<double>(param_weight[k]);
    }
    return sum;
  }

  absl::Status ApplyStep(int64_t step, float grad_scale) override {
    const bool bf16 = options_.dtype == DType::kBF16;
    if (options_.offload == OffloadKind::kGpu) return ApplyStepOnDevice(step, grad_scale);
    AdamWOptions adam;
    adam.threads = options_.offload == OffloadKind::kCpu ? options_.adamw_threads : 1;
    AdamWHyper hyper = AdamWHyperAt(options_, step);
    hyper.grad_scale = grad_scale;
    size_t at = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      GptParameter& p = params_[k];
      const absl::Span<const float> grad =
          absl::MakeConstSpan(flat_grad_).subspan(at, p.grad.size());
      at += p.grad.size();
      if (!bf16) {
        LOOM_RETURN_IF_ERROR(AdamWStep(hyper, p.values, grad, states_[k], adam));
        continue;
      }
      half_values_.resize(p.values.size());
      LOOM_RETURN_IF_ERROR(AdamWStep(hyper, absl::MakeSpan(masters_[k]), grad, states_[k], adam,
                                     absl::MakeSpan(half_values_)));
      for (size_t i = 0; i < p.values.size(); ++i) p.values[i] = ToFloat(half_values_[i]);
    }
    return absl::OkStatus();
  }

  // --offload gpu: one GpuAdamWStep over the whole bucket, the moments on the device
  // (made at the first step). Bitwise the CPU step (f32 only: validation refuses bf16).
  absl::Status ApplyStepOnDevice(int64_t step, float grad_scale) {
    if (device_adamw_ == nullptr) {
      LOOM_ASSIGN_OR_RETURN(device_adamw_,
                            MakeDeviceAdamW(/*device=*/0, static_cast<int64_t>(flat_grad_.size())));
    }
    AdamWHyper hyper = AdamWHyperAt(options_, step);
    hyper.grad_scale = grad_scale;
    std::vector<absl::Span<float>> values;
    values.reserve(params_.size());
    for (GptParameter& p : params_) values.push_back(p.values);
    return device_adamw_->Step(hyper, values, flat_grad_);
  }

  int64_t ShardedBytes() const override { return 0; }
  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    ModelStateOptions estimate;
    for (const GptParameter& p : params_) {
      estimate.num_parameters += static_cast<int64_t>(p.values.size());
    }
    // Weights and gradients in f32 storage; bf16 adds the f32 master.
    estimate.precision = options_.dtype == DType::kBF16 ? PrecisionPolicy::kBf16InF32Adam
                                                        : PrecisionPolicy::kFp32Adam;
    estimate.dp = options_.dp;
    LOOM_ASSIGN_OR_RETURN(const ModelStateBytes bytes, EstimateModelStateBytes(estimate));
    return bytes.total();
  }
  int64_t StateBytes() const override {
    // The layers' weights and gradients (f32 storage, 8 bytes per element; in the
    // job the gradients live in the all-reduce bucket, bound), the moments (8) and,
    // in bf16, the f32 master (4). An unbound caller's bucket is a communication
    // buffer, as the engine's are, and is not counted.
    int64_t bytes = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      const int64_t n = static_cast<int64_t>(params_[k].values.size());
      bytes += 8 * n + static_cast<int64_t>(states_[k].size_bytes());
      if (!masters_.empty()) bytes += static_cast<int64_t>(masters_[k].size() * sizeof(float));
    }
    return bytes;
  }

  absl::StatusOr<std::vector<StateSlice>> ReadState() const override {
    std::vector<StateSlice> slices;
    for (size_t k = 0; k < params_.size(); ++k) {
      const GptParameter& p = params_[k];
      StateSlice slice;
      slice.param = static_cast<int>(k);
      slice.end = static_cast<int64_t>(p.values.size());
      slice.dp_replicated = true;
      slice.master =
          masters_.empty() ? std::vector<float>(p.values.begin(), p.values.end()) : masters_[k];
      slice.exp_avg.resize(p.values.size());
      slice.exp_avg_sq.resize(p.values.size());
      LOOM_RETURN_IF_ERROR(
          states_[k].ReadMoments(absl::MakeSpan(slice.exp_avg), absl::MakeSpan(slice.exp_avg_sq)));
      slices.push_back(std::move(slice));
    }
    return slices;
  }

  absl::Status WriteState(const StateSource& source) override {
    for (size_t k = 0; k < params_.size(); ++k) {
      GptParameter& p = params_[k];
      const int64_t n = static_cast<int64_t>(p.values.size());
      std::vector<float> master(p.values.size()), m(p.values.size()), v(p.values.size());
      LOOM_RETURN_IF_ERROR(source(static_cast<int>(k), 0, n, absl::MakeSpan(master),
                                  absl::MakeSpan(m), absl::MakeSpan(v)));
      LOOM_RETURN_IF_ERROR(states_[k].WriteMoments(m, v));
      if (masters_.empty()) {
        std::copy(master.begin(), master.end(), p.values.begin());
        continue;
      }
      // bf16: the weights are the master's compute copy, as AdamW writes it.
      for (size_t i = 0; i < master.size(); ++i) p.values[i] = ToFloat(ToBFloat16(master[i]));
      masters_[k] = std::move(master);
    }
    return absl::OkStatus();
  }

 private:
  DataParallelOptimizer(const TrainJobOptions& options, std::vector<GptParameter> params,
                        Communicator* dp)
      : options_(options), params_(std::move(params)), dp_(dp) {}

  TrainJobOptions options_;
  std::vector<GptParameter> params_;
  Communicator* dp_;
  std::vector<AdamWState> states_;           // per parameter
  std::vector<std::vector<float>> masters_;  // bf16: the f32 master per parameter
  CommBuffer flat_grad_memory_;              // from dp->AllocateBuffer
  absl::Span<float> flat_grad_;              // the all-reduced bucket, in it
  std::vector<BFloat16> half_values_;        // bf16: AdamW's compute-copy output
  std::unique_ptr<DeviceAdamW> device_adamw_;  // --offload gpu
};

}  // namespace

absl::StatusOr<std::unique_ptr<RankOptimizer>> MakeBlockOptimizer(const TrainJobOptions& options,
                                                                  GptStageModule& module,
                                                                  Communicator* dp, DiskTier* disk,
                                                                  const std::string& disk_prefix) {
  std::vector<std::unique_ptr<RankOptimizer>> parts;
  std::vector<int> offsets = {0};
  for (const int64_t stage : module.stages()) {
    GptModel& model = module.model(stage);
    std::vector<GptParameter> params = model.Parameters();
    const int count = static_cast<int>(params.size());
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> part,
                          ShardedOptimizer::Create(options, std::move(params), dp, disk,
                                                   absl::StrCat(disk_prefix, ".m", stage), &model));
    parts.push_back(std::move(part));
    offsets.push_back(offsets.back() + count);
  }
  return std::unique_ptr<RankOptimizer>(new StagedOptimizer(std::move(parts), std::move(offsets)));
}

absl::StatusOr<std::unique_ptr<RankOptimizer>> MakeRankOptimizer(
    const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp,
    DiskTier* disk, const std::string& disk_prefix, const GradientBinder& bind_gradients) {
  if (options.zero > 0) {
    LOOM_ASSIGN_OR_RETURN(
        std::unique_ptr<ShardedOptimizer> sharded,
        ShardedOptimizer::Create(options, std::move(params), dp, disk, disk_prefix));
    return std::unique_ptr<RankOptimizer>(std::move(sharded));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelOptimizer> plain,
                        DataParallelOptimizer::Create(options, std::move(params), dp,
                                                      bind_gradients));
  return std::unique_ptr<RankOptimizer>(std::move(plain));
}

}  // namespace loom
