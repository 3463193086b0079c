#include "zero3/data_parallel.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/half.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "topology/memory_estimate.h"
#include "zero3/gradient_all_reducer.h"
#include "zero3/partition.h"
#include "zero3/replicated_store.h"
#include "zero3/zero3_engine.h"

namespace loom {

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

// ZeRO stages 1, 2 and 3 through zero3/Zero3Engine, one engine per model, which
// borrows its weights from it (BorrowingModel::UseParameterSource), each of the
// model's units (for a GPT: a block, the embeddings, the head) one bucket. Block
// reshard: each unit is gathered before use and released after (FSDP's reshard
// after forward). Step reshard: the engine's window is the whole model (prefetch depth = units - 1),
// and a pass hands its window over to the next, so every unit is gathered at the
// step's first forward and stays until Step (FSDP's reshard_after_forward=False);
// the gradients stay in the model until one kGradients pass at the end.
class ShardedOptimizer : public DataParallelOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      const DataParallelOptions& options, BorrowingModel& model, Communicator* dp,
      const std::string& disk_prefix) {
    // The units are the model's own (BorrowingModel::Units): a unit is one bucket,
    // gathered, released and kept whole or sharded as one.
    std::vector<ParamSpec> specs;
    std::vector<float> initial;
    const std::vector<ModelParameter> params = model.ParameterViews();
    const std::vector<ParameterUnit> units = model.Units();
    for (size_t u = 0; u < units.size(); ++u) {
      for (int p = units[u].first; p < units[u].end; ++p) {
        specs.push_back(ParamSpec{params[p].name, params[p].shape, static_cast<int>(u)});
        initial.insert(initial.end(), params[p].values.begin(), params[p].values.end());
      }
    }
    if (specs.size() != params.size()) {
      return absl::InternalError(absl::StrCat("the model's ", units.size(), " units cover ",
                                              specs.size(), " of its ", params.size(),
                                              " parameters"));
    }
    PartitionOptions partition_options;
    partition_options.dp_size = dp->size();
    // Units are one bucket each whatever their size; this packs unit-less parameters.
    partition_options.bucket_numel = 1 << 15;
    // persist_below_bytes: a unit of fewer f32 bytes stays whole on every rank.
    partition_options.persistence_threshold =
        options.persist_below_bytes > 0 ? (options.persist_below_bytes - 1) / 4 : 0;
    LOOM_ASSIGN_OR_RETURN(Partition partition, Partition::Create(specs, partition_options));
    Zero3Options zero;
    zero.stage = options.stage;
    zero.compute_dtype = options.compute_dtype;
    zero.offload_optimizer = options.offload_optimizer;
    zero.optimizer_disk = options.optimizer_disk;
    zero.param_disk = options.param_disk;
    zero.grad_disk = options.grad_disk;
    zero.max_live_gathered_bytes = options.max_live_gathered_bytes;
    const bool step_reshard = options.reshard == DataParallelOptions::Reshard::kStep;
    // Step reshard: a window of every unit, kept from pass to pass until Step.
    zero.prefetch_depth = step_reshard ? std::max(options.prefetch_depth,
                                                  partition.num_buckets() - 1)
                                       : options.prefetch_depth;
    zero.disk_prefix = disk_prefix;
    zero.adamw_threads = options.adamw_threads;
    zero.timeout = options.timeout;
    // Every dp rank runs every block of its stage: a rank that skipped one is a
    // bug, named at the next agreement check rather than trained around.
    zero.require_same_use = true;
    // One backward pass per microbatch (and stage), each the gradient of a loss
    // already scaled by 1 / microbatches: summed, not averaged.
    zero.average_passes = false;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Engine> engine,
                          Zero3Engine::Create(partition, dp, initial, zero));
    initial = std::vector<float>();
    // Step reshard reduces once per step, as does the deferred block mode: the
    // gradients stay in the model until ReduceGradients.
    const bool grads_in_model = step_reshard || options.defer_reduce_scatter;
    LOOM_RETURN_IF_ERROR(model.UseParameterSource(
        engine.get(), grads_in_model ? GradientHome::kModel : GradientHome::kSource));
    return std::unique_ptr<ShardedOptimizer>(
        new ShardedOptimizer(options, model.ParameterViews(), std::move(engine), grads_in_model));
  }

  absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() override {
    LOOM_ASSIGN_OR_RETURN(std::vector<float> flat, engine_->GatherAll());
    // GatherAll gives the f32 masters; the model computes with their compute copy
    // (bf16: rounded to nearest even, as the engine writes it).
    if (options_.compute_dtype == DType::kBF16) {
      for (float& v : flat) v = ToFloat(ToBFloat16(v));
    }
    std::vector<std::vector<float>> weights;
    size_t at = 0;
    for (const ModelParameter& p : params_) {
      const size_t n = static_cast<size_t>(NumElements(p.shape));
      weights.emplace_back(flat.begin() + at, flat.begin() + at + n);
      at += n;
    }
    return weights;
  }

  absl::Status ReduceGradients() override {
    // Once a step: a second call would hand the model's gradients over again.
    if (reduced_) return absl::OkStatus();
    // Gradients given to the engine per backward: the passes reduced them already.
    if (grads_in_model_) {
      LOOM_RETURN_IF_ERROR(engine_->BeginPass(Zero3Pass::kGradients));
      for (int p = static_cast<int>(params_.size()) - 1; p >= 0; --p) {
        LOOM_RETURN_IF_ERROR(engine_->AddGrad(p, params_[p].grad));
      }
      LOOM_RETURN_IF_ERROR(engine_->EndPass());
    }
    LOOM_RETURN_IF_ERROR(engine_->ReduceGradients());
    reduced_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const override {
    // The engine counts its persistent parameters on dp rank 0 only.
    return engine_->ReducedGradSquaredNorm(param_weight);
  }

  absl::Status Step(const AdamWHyper& hyper) override {
    if (!reduced_) {
      const absl::Time start = absl::Now();
      const absl::Status reduced = ReduceGradients();
      step_comm_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
      LOOM_RETURN_IF_ERROR(reduced);
    }
    reduced_ = false;
    return engine_->Step(hyper);
  }
  double StepCommSeconds() const override { return step_comm_seconds_; }

  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    ModelStateOptions estimate;
    estimate.num_parameters = engine_->partition().TotalNumel();
    // The engine keeps bf16 weights and gradients and an f32 master (16 bytes).
    estimate.precision = options_.compute_dtype == DType::kBF16
                             ? PrecisionPolicy::kMixedPrecisionAdam
                             : PrecisionPolicy::kFp32Adam;
    estimate.zero_stage = options_.stage;
    estimate.dp = engine_->partition().options().dp_size;
    estimate.buffers.unit_numel = engine_->partition().MaxBucketNumel();
    estimate.buffers.gathered_units = engine_->gather_buffers();
    estimate.buffers.gathered_bytes_per_element = engine_->gathered_bytes_per_element();
    estimate.buffers.gradient_units = engine_->grad_buffers();
    estimate.buffers.disk_staging_bytes_per_element = engine_->disk_staging_bytes_per_element();
    // The model's f32 gradient sums when it keeps them until the step's end.
    estimate.resident_bytes_per_parameter = grads_in_model_ ? 4 : 0;
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
    return engine_->partition().ShardNumel() * engine_->partition().options().dp_size;
  }
  int64_t PersistentNumel() const override { return engine_->partition().PersistentNumel(); }
  int64_t Units() const override { return engine_->partition().num_buckets(); }
  int64_t KeptUnits() const override { return engine_->Stats().gathers_kept; }
  int64_t KeptNumel() const override { return engine_->Stats().gathered_numel_kept; }
  int64_t DiskBytes() const override { return engine_->Stats().disk_state_bytes; }
  int64_t StateBytes() const override {
    int64_t resident = 0;
    for (const ModelParameter& p : params_) {
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
  ShardedOptimizer(const DataParallelOptions& options, std::vector<ModelParameter> params,
                   std::unique_ptr<Zero3Engine> engine, bool grads_in_model)
      : options_(options), params_(std::move(params)), engine_(std::move(engine)),
        grads_in_model_(grads_in_model) {}

  DataParallelOptions options_;
  std::vector<ModelParameter> params_;  // the model's: no values; gradients if kept there
  std::unique_ptr<Zero3Engine> engine_;
  const bool grads_in_model_;  // GradientHome::kModel: one kGradients pass per step
  bool reduced_ = false;       // ReduceGradients ran this step
  double step_comm_seconds_ = 0;
};

// StagedOptimizer: one optimizer per model a rank holds (a pipeline rank's stages:
// an engine per model, so that a stage's pass gathers that stage's units only),
// seen as one over the rank's parameters, model after model. The engines share
// the dp communicator: each pass ends with its collectives done, so they take
// turns.
class StagedOptimizer : public DataParallelOptimizer {
 public:
  StagedOptimizer(std::vector<std::unique_ptr<DataParallelOptimizer>> parts,
                  std::vector<int> offsets)
      : parts_(std::move(parts)), offsets_(std::move(offsets)) {}

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
  absl::Status Step(const AdamWHyper& hyper) override {
    for (auto& part : parts_) LOOM_RETURN_IF_ERROR(part->Step(hyper));
    return absl::OkStatus();
  }
  double StepCommSeconds() const override {
    double total = 0;
    for (const auto& part : parts_) total += part->StepCommSeconds();
    return total;
  }
  int64_t StateBytes() const override { return Sum(&DataParallelOptimizer::StateBytes); }
  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    int64_t total = 0;
    for (const auto& part : parts_) {
      LOOM_ASSIGN_OR_RETURN(const int64_t bytes, part->EstimatedStateBytes());
      total += bytes;
    }
    return total;
  }
  int64_t ShardedBytes() const override { return Sum(&DataParallelOptimizer::ShardedBytes); }
  int64_t DiskBytes() const override { return Sum(&DataParallelOptimizer::DiskBytes); }
  int64_t BufferBytes() const override { return Sum(&DataParallelOptimizer::BufferBytes); }
  double WaitSeconds() const override {
    double total = 0;
    for (const auto& part : parts_) total += part->WaitSeconds();
    return total;
  }
  int64_t BucketNumel() const override { return Sum(&DataParallelOptimizer::BucketNumel); }
  int64_t PersistentNumel() const override { return Sum(&DataParallelOptimizer::PersistentNumel); }
  int64_t Units() const override { return Sum(&DataParallelOptimizer::Units); }
  int64_t KeptUnits() const override { return Sum(&DataParallelOptimizer::KeptUnits); }
  int64_t KeptNumel() const override { return Sum(&DataParallelOptimizer::KeptNumel); }

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
  int64_t Sum(int64_t (DataParallelOptimizer::*figure)() const) const {
    int64_t total = 0;
    for (const auto& part : parts_) total += ((*part).*figure)();
    return total;
  }

  std::vector<std::unique_ptr<DataParallelOptimizer>> parts_;
  std::vector<int> offsets_;  // parts_.size() + 1: where each part's parameters start
};

// Plain data parallelism (stage 0): the model borrows its weights from a
// zero3/ReplicatedStore, which keeps the whole model on every rank, sums the
// backward passes' gradients in its all-reduce bucket, averages them over dp and
// runs AdamW where the weights live (offload_optimizer: on adamw_threads;
// make_replicated_step: the caller's step, e.g. a device AdamW).
class ReplicatedOptimizer : public DataParallelOptimizer {
 public:
  // `reducer`: the rank's all-reduce thread over `dp`, shared by its models
  // (null: one all-reduce after the backward).
  static absl::StatusOr<std::unique_ptr<ReplicatedOptimizer>> Create(
      const DataParallelOptions& options, BorrowingModel& model, Communicator* dp,
      std::shared_ptr<GradientAllReducer> reducer) {
    std::vector<ParamSpec> specs;
    std::vector<float> initial;
    const std::vector<ModelParameter> params = model.ParameterViews();
    for (const ModelParameter& p : params) {
      specs.push_back(ParamSpec{p.name, p.shape});
      initial.insert(initial.end(), p.values.begin(), p.values.end());
    }
    // The model's units: each is all-reduced as soon as its gradients are final.
    const std::vector<ParameterUnit> units = model.Units();
    for (size_t u = 0; u < units.size(); ++u) {
      for (int p = units[u].first; p < units[u].end && p < static_cast<int>(specs.size()); ++p) {
        specs[static_cast<size_t>(p)].unit = static_cast<int>(u);
      }
    }
    ReplicatedStoreOptions store_options;
    store_options.compute_dtype = options.compute_dtype;
    store_options.adamw_threads = options.offload_optimizer ? options.adamw_threads : 1;
    // One AddGrad per parameter per microbatch's backward.
    store_options.reducer = std::move(reducer);
    store_options.grads_per_step = options.backward_passes_per_step;
    store_options.bucket_cap_bytes = options.grad_bucket_bytes;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ReplicatedStore> store,
                          ReplicatedStore::Create(std::move(specs), dp, initial, store_options));
    LOOM_RETURN_IF_ERROR(model.UseParameterSource(store.get(), GradientHome::kSource));
    return std::unique_ptr<ReplicatedOptimizer>(
        new ReplicatedOptimizer(options, std::move(store), dp->size()));
  }

  // The all-reduce's buckets (the model's units, cut at grad_bucket_bytes), each
  // one call when overlapped.
  int64_t Units() const override { return store_->num_buckets(); }
  absl::Status ReduceGradients() override { return store_->ReduceGradients(); }
  double StepCommSeconds() const override {
    return store_->StepWaitSeconds() + external_reduce_seconds_;
  }
  absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const override {
    return store_->ReducedGradSquaredNorm(param_weight);
  }
  absl::Status Step(const AdamWHyper& hyper) override {
    if (!options_.make_replicated_step) return store_->Step(hyper);
    // A step of the caller's (a device AdamW) over the whole bucket, made at the
    // first step.
    if (!external_step_) {
      LOOM_ASSIGN_OR_RETURN(external_step_, options_.make_replicated_step(store_->total_numel()));
    }
    // The step runs over the whole bucket: reduce it all first (a no-op after
    // ReduceGradients), timed as the step's communication.
    const absl::Time start = absl::Now();
    const absl::Status reduced = store_->ReduceGradients();
    external_reduce_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    LOOM_RETURN_IF_ERROR(reduced);
    return store_->StepWith([&](absl::Span<const absl::Span<float>> weights,
                                absl::Span<const float> gradient) {
      return external_step_(hyper, weights, gradient);
    });
  }

  int64_t ShardedBytes() const override { return 0; }
  int64_t StateBytes() const override { return store_->StateBytes(); }
  absl::StatusOr<int64_t> EstimatedStateBytes() const override {
    ModelStateOptions estimate;
    estimate.num_parameters = store_->total_numel();
    // Weights and gradients in f32 storage; bf16 adds the f32 master.
    estimate.precision = options_.compute_dtype == DType::kBF16 ? PrecisionPolicy::kBf16InF32Adam
                                                                : PrecisionPolicy::kFp32Adam;
    estimate.dp = dp_size_;
    LOOM_ASSIGN_OR_RETURN(const ModelStateBytes bytes, EstimateModelStateBytes(estimate));
    return bytes.total();
  }

  absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() override {
    std::vector<std::vector<float>> weights;
    LOOM_RETURN_IF_ERROR(store_->BeginParameterPass(ParameterPass::kForward));
    for (int p = 0; p < store_->num_params(); ++p) {
      absl::StatusOr<absl::Span<const float>> w = store_->Acquire(p);
      if (!w.ok()) {
        (void)store_->EndPass();
        return w.status();
      }
      weights.emplace_back(w->begin(), w->end());
    }
    LOOM_RETURN_IF_ERROR(store_->EndPass());
    return weights;
  }

  absl::StatusOr<std::vector<StateSlice>> ReadState() const override {
    std::vector<StateSlice> slices;
    for (int p = 0; p < store_->num_params(); ++p) {
      const size_t n = static_cast<size_t>(NumElements(store_->spec(p).shape));
      StateSlice slice;
      slice.param = p;
      slice.end = static_cast<int64_t>(n);
      slice.dp_replicated = true;
      slice.master.resize(n);
      slice.exp_avg.resize(n);
      slice.exp_avg_sq.resize(n);
      LOOM_RETURN_IF_ERROR(store_->ReadState(p, absl::MakeSpan(slice.master),
                                             absl::MakeSpan(slice.exp_avg),
                                             absl::MakeSpan(slice.exp_avg_sq)));
      slices.push_back(std::move(slice));
    }
    return slices;
  }

  absl::Status WriteState(const StateSource& source) override {
    for (int p = 0; p < store_->num_params(); ++p) {
      const int64_t n = NumElements(store_->spec(p).shape);
      std::vector<float> master(static_cast<size_t>(n)), m(master.size()), v(master.size());
      LOOM_RETURN_IF_ERROR(
          source(p, 0, n, absl::MakeSpan(master), absl::MakeSpan(m), absl::MakeSpan(v)));
      LOOM_RETURN_IF_ERROR(store_->WriteState(p, master, m, v));
    }
    return absl::OkStatus();
  }

 private:
  ReplicatedOptimizer(const DataParallelOptions& options, std::unique_ptr<ReplicatedStore> store,
                      int dp_size)
      : options_(options), store_(std::move(store)), dp_size_(dp_size) {}

  DataParallelOptions options_;
  std::unique_ptr<ReplicatedStore> store_;
  int dp_size_ = 1;
  DataParallelOptions::ReplicatedStep external_step_;  // make_replicated_step's
  double external_reduce_seconds_ = 0;  // the external step's ReduceGradients
};

}  // namespace

namespace {

absl::Status ValidateDataParallelOptions(const DataParallelOptions& o) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("DataParallelOptions.", parts...));
  };
  if (o.stage < 0 || o.stage > 3) return bad("stage ", o.stage, " is not 0..3");
  if (o.compute_dtype != DType::kF32 && o.compute_dtype != DType::kBF16) {
    return bad("compute_dtype ", DTypeName(o.compute_dtype), " is not f32 or bf16");
  }
  if (o.prefetch_depth < 0) return bad("prefetch_depth ", o.prefetch_depth, " is negative");
  if (o.max_live_gathered_bytes < 0) {
    return bad("max_live_gathered_bytes ", o.max_live_gathered_bytes, " is negative");
  }
  if (o.persist_below_bytes < 0) {
    return bad("persist_below_bytes ", o.persist_below_bytes, " is negative");
  }
  if (o.backward_passes_per_step < 1) {
    return bad("backward_passes_per_step ", o.backward_passes_per_step, " is not >= 1");
  }
  if (o.grad_bucket_bytes < 0) {
    return bad("grad_bucket_bytes ", o.grad_bucket_bytes, " is negative");
  }
  if (o.stage == 0 && (o.optimizer_disk != nullptr || o.param_disk != nullptr ||
                       o.grad_disk != nullptr)) {
    return bad("stage 0 keeps its state in memory: the NVMe homes need stage 1-3");
  }
  if (o.stage != 0 && o.make_replicated_step) {
    return bad("make_replicated_step is stage 0's; stage ", o.stage, " steps its shards itself");
  }
  if (o.timeout <= absl::ZeroDuration()) {
    return bad("timeout ", absl::FormatDuration(o.timeout), " is not positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> MakeDataParallelOptimizer(
    absl::Span<BorrowingModel* const> models, Communicator* dp,
    const DataParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateDataParallelOptions(options));
  if (dp == nullptr) {
    return absl::InvalidArgumentError("MakeDataParallelOptimizer: the dp communicator is null");
  }
  if (models.empty()) return absl::InvalidArgumentError("MakeDataParallelOptimizer: no models");
  std::vector<std::unique_ptr<DataParallelOptimizer>> parts;
  std::vector<int> offsets = {0};
  // Stage 0: one all-reduce thread over dp for every model of the rank, so that
  // their all-reduces run in one order, the caller's, on every dp rank.
  std::shared_ptr<GradientAllReducer> reducer;
  if (options.stage == 0 && options.overlap_grad_reduce && dp->size() > 1) {
    GradientAllReducerOptions reducer_options;
    reducer_options.wait_timeout = options.timeout;
    LOOM_ASSIGN_OR_RETURN(reducer, GradientAllReducer::Create(dp, reducer_options));
  }
  for (size_t m = 0; m < models.size(); ++m) {
    if (models[m] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("MakeDataParallelOptimizer: model ", m,
                                                     " is null"));
    }
    BorrowingModel& model = *models[m];
    const int count = static_cast<int>(model.ParameterViews().size());
    if (options.stage == 0) {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ReplicatedOptimizer> part,
                            ReplicatedOptimizer::Create(options, model, dp, reducer));
      parts.push_back(std::move(part));
    } else {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ShardedOptimizer> part,
                            ShardedOptimizer::Create(options, model, dp,
                                                     absl::StrCat(options.disk_prefix, ".m", m)));
      parts.push_back(std::move(part));
    }
    offsets.push_back(offsets.back() + count);
  }
  return std::unique_ptr<DataParallelOptimizer>(
      new StagedOptimizer(std::move(parts), std::move(offsets)));
}

}  // namespace loom
