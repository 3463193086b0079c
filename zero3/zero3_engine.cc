// Zero3Engine (zero3_engine.h), part 1 of 4: making the engine and its state,
// the helpers every part uses, and its figures. The passes (gathers, releases,
// leases) are in zero3_passes.cc, the gradients in zero3_gradients.cc, the
// optimizer step and the state's reads and writes in zero3_step.cc.
#include "zero3/zero3_engine.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "collectives/comm_worker.h"
#include "core/buffer_view.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/status_macros.h"
#include "zero3/internal/bucket_state.h"
#include "zero3/internal/disk_shards.h"
#include "zero3/internal/agreement.h"

namespace loom {

using zero3_internal::BucketState;
using zero3_internal::DTypeBytes;
using zero3_internal::EngineShared;
using zero3_internal::GatherBuffer;

namespace {

// BucketName names a bucket by its parameters, for messages: "\"h.0.w\" and 3 more".
std::string BucketName(const Partition& partition, int b) {
  const Bucket& bucket = partition.bucket(b);
  std::string name = absl::StrCat("\"", partition.slot(bucket.params.front()).name, "\"");
  if (bucket.params.size() > 1) absl::StrAppend(&name, " and ", bucket.params.size() - 1, " more");
  return name;
}

}  // namespace

Zero3Engine::Zero3Engine(const Partition& partition, Communicator* dp, const Zero3Options& options)
    : partition_(partition), dp_(dp), options_(options), rank_(dp->rank()) {}

Zero3Engine::~Zero3Engine() {
  // The workers finish what they run (each collective and read has its own
  // deadline) before the buffers they use go away.
  worker_.reset();
  disk_worker_.reset();
  // The state on disk is this engine's swap space, not a checkpoint.
  if (disk_ != nullptr) {
    for (const auto& bucket : buckets_) disk_->RemoveBucket(bucket->index);
  }
}

std::string Zero3Engine::Who() const { return absl::StrCat("Zero3Engine rank ", rank_); }

absl::StatusOr<std::unique_ptr<Zero3Engine>> Zero3Engine::Create(const Partition& partition,
                                                                 Communicator* dp,
                                                                 absl::Span<const float> initial,
                                                                 const Zero3Options& options) {
  if (dp == nullptr) return absl::InvalidArgumentError("Zero3Engine: the dp communicator is null");
  if (dp->size() != partition.options().dp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zero3Engine: the partition is for dp_size ", partition.options().dp_size,
                     ", the communicator has ", dp->size(), " ranks"));
  }
  if (options.compute_dtype != DType::kF32 && options.compute_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat("Zero3Options.compute_dtype ",
                                                   DTypeName(options.compute_dtype),
                                                   " is not f32 or bf16"));
  }
  if (options.stage < 1 || options.stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zero3Options.stage ", options.stage, " is not 1, 2 or 3"));
  }
  if (options.prefetch_depth < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zero3Options.prefetch_depth ", options.prefetch_depth, " is negative"));
  }
  if (options.max_live_gathered_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Zero3Options.max_live_gathered_bytes ",
                                                   options.max_live_gathered_bytes,
                                                   " is negative"));
  }
  if (options.param_disk != nullptr && options.stage != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Zero3Options.param_disk needs stage 3 (stage ", options.stage,
        " keeps the whole parameters on every rank)"));
  }
  if (options.grad_disk != nullptr && options.stage == 1) {
    return absl::InvalidArgumentError(
        "Zero3Options.grad_disk needs stage 2 or 3 (stage 1 keeps the whole gradient on every "
        "rank until the step reduces it)");
  }
  if (options.max_grad_buffers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Zero3Options.max_grad_buffers ",
                                                   options.max_grad_buffers, " is not >= 1"));
  }
  if (options.adamw_threads < 1 || options.adamw_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zero3Options.adamw_threads ", options.adamw_threads, " is not in [1, 256]"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("Zero3Options.timeout ",
                                                   absl::FormatDuration(options.timeout),
                                                   " is not positive"));
  }
  if (static_cast<int64_t>(initial.size()) != partition.TotalNumel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Zero3Engine: the initial parameters have ", initial.size(),
                     " elements, the partition's model has ", partition.TotalNumel()));
  }
  std::unique_ptr<Zero3Engine> engine(new Zero3Engine(partition, dp, options));
  LOOM_RETURN_IF_ERROR(engine->Init(initial));
  return engine;
}

absl::Status Zero3Engine::Init(absl::Span<const float> initial) {
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  // Bytes per bucket slot (BufferBytes): stage 3 gathers in the compute dtype, plus
  // the f32 widening in bf16; stages 1 and 2 need only the widening, in bf16.
  const int64_t slot_bytes = BufferBytes(partition_.MaxBucketNumel());
  slots_ = options_.prefetch_depth + 1;
  if (options_.max_live_gathered_bytes > 0 && slot_bytes > 0) {
    const int64_t fit = options_.max_live_gathered_bytes / slot_bytes;
    if (fit < 1) {
      // Named by its parameters: the unit a user would split or the budget raise.
      int largest = 0;
      for (int b = 1; b < partition_.num_buckets(); ++b) {
        if (partition_.bucket(b).padded_numel > partition_.bucket(largest).padded_numel) {
          largest = b;
        }
      }
      return absl::ResourceExhaustedError(absl::StrCat(
          Who(), ": parameter ", BucketName(partition_, largest), " (bucket ", largest, ", ",
          partition_.bucket(largest).padded_numel,
          " elements) needs ", slot_bytes, " gathered bytes; the budget "
          "(max_live_gathered_bytes) is ", options_.max_live_gathered_bytes));
    }
    slots_ = static_cast<int>(std::min<int64_t>(slots_, fit));
  }
  disk_ = std::make_unique<zero3_internal::DiskShards>(
      zero3_internal::DiskShards::Homes{options_.optimizer_disk, options_.param_disk,
                                        options_.grad_disk},
      options_.disk_prefix, rank_, options_.compute_dtype);
  const size_t max_numel = static_cast<size_t>(partition_.MaxBucketNumel());
  shared_ = std::make_unique<EngineShared>(dp_, max_numel * sizeof(float));
  const int pool_size =
      UsesBuffers() ? std::min(slots_, std::max(partition_.num_buckets(), 1)) : 0;
  shared_->pool.resize(pool_size);
  widened_.assign(static_cast<size_t>(partition_.num_params()), 0);
  grad_written_.assign(static_cast<size_t>(partition_.num_params()), 0);
  for (int i = pool_size - 1; i >= 0; --i) {
    GatherBuffer& buffer = shared_->pool[i];
    const size_t n = max_numel;
    if (bf16) {
      if (options_.stage == 3) {
        LOOM_ASSIGN_OR_RETURN(buffer.memory, dp_->AllocateBuffer(n * sizeof(BFloat16)));
        buffer.bf16 = buffer.memory.As<BFloat16>().first(n);
      }
      buffer.widened.resize(n);
    } else {
      LOOM_ASSIGN_OR_RETURN(buffer.memory, dp_->AllocateBuffer(n * sizeof(float)));
      buffer.f32 = buffer.memory.As<float>().first(n);
    }
    shared_->free_buffers.push_back(i);
  }

  // Each bucket's shard of the initial model (and at stages 1 and 2 the whole
  // bucket); the padding stays zero (AlignedBuffer and vectors start zeroed).
  const int stage = options_.stage;
  auto make_state = [&](int index, bool replicated, int64_t numel, int64_t padded)
      -> absl::StatusOr<std::unique_ptr<BucketState>> {
    auto state = std::make_unique<BucketState>();
    state->index = index;
    state->replicated = replicated;
    state->numel = numel;
    state->padded_numel = padded;
    const bool whole = !replicated && stage < 3;
    const size_t block = static_cast<size_t>(rank_) * static_cast<size_t>(numel);
    if (whole && !bf16) {
      state->whole_f32.resize(static_cast<size_t>(padded));
      state->weights = absl::MakeSpan(state->whole_f32).subspan(block, numel);
    } else {
      LOOM_ASSIGN_OR_RETURN(state->master, AlignedBuffer<float>::Create(numel));
      state->weights = state->master.span();
    }
    if (bf16) {
      if (whole) {
        state->whole_bf16.resize(static_cast<size_t>(padded));
        state->compute = absl::MakeSpan(state->whole_bf16).subspan(block, numel);
      } else {
        state->compute_shard.resize(static_cast<size_t>(numel));
        state->compute = absl::MakeSpan(state->compute_shard);
      }
    }
    // Stage 1 keeps the whole bucket's gradient until Step; the others a shard.
    const size_t grad_numel = static_cast<size_t>(!replicated && stage == 1 ? padded : numel);
    if (bf16) {
      state->grad_bf16.assign(grad_numel, BFloat16());
    } else {
      state->grad_f32.assign(grad_numel, 0.0f);
    }
    LOOM_ASSIGN_OR_RETURN(AdamWState adam, AdamWState::Create(numel));
    state->adam.emplace(std::move(adam));
    return state;
  };
  for (int b = 0; b < partition_.num_buckets(); ++b) {
    const Bucket& bucket = partition_.bucket(b);
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<BucketState> state,
                          make_state(b, false, bucket.shard_numel, bucket.padded_numel));
    const int64_t shard_begin = static_cast<int64_t>(rank_) * bucket.shard_numel;
    for (const int p : bucket.params) {
      const ParamSlot& slot = partition_.slot(p);
      const Partition::Range range = partition_.OwnedRange(p, rank_);
      for (int64_t i = range.begin; i < range.end; ++i) {
        state->weights[slot.offset + i - shard_begin] = initial[partition_.FlatOffset(p) + i];
      }
      // Stages 1 and 2: every rank starts from the same whole model, so the whole
      // copy needs no collective.
      const float* from = initial.data() + partition_.FlatOffset(p);
      if (!state->whole_f32.empty()) {
        std::copy_n(from, slot.numel, state->whole_f32.begin() + slot.offset);
      }
      if (!state->whole_bf16.empty()) {
        LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(
            absl::MakeConstSpan(from, static_cast<size_t>(slot.numel)),
            absl::MakeSpan(state->whole_bf16).subspan(static_cast<size_t>(slot.offset),
                                                     static_cast<size_t>(slot.numel))));
      }
    }
    buckets_.push_back(std::move(state));
  }
  const int64_t persistent = partition_.PersistentNumel();
  LOOM_ASSIGN_OR_RETURN(persistent_, make_state(-1, true, persistent, persistent));
  for (int p = 0; p < partition_.num_params(); ++p) {
    const ParamSlot& slot = partition_.slot(p);
    if (!slot.persistent) continue;
    std::copy_n(initial.begin() + partition_.FlatOffset(p), slot.numel,
                persistent_->weights.begin() + slot.offset);
  }
  if (bf16) persistent_view_.resize(persistent);
  LOOM_RETURN_IF_ERROR(RefreshComputeCopies());
  if (options_.optimizer_disk != nullptr) {
    // NVMe: each bucket's optimizer state (zero moments, and the bf16 master) goes to
    // disk and leaves memory.
    for (const auto& bucket : buckets_) {
      const size_t n = static_cast<size_t>(bucket->numel);
      std::vector<float> stored(static_cast<size_t>(disk_->OptimizerNumel(bucket->numel)), 0.0f);
      if (bf16) std::copy(bucket->weights.begin(), bucket->weights.end(), stored.begin() + 2 * n);
      LOOM_RETURN_IF_ERROR(disk_->WriteOptimizer(bucket->index, stored));
      bucket->adam.reset();
      if (bf16) {
        bucket->master = AlignedBuffer<float>();
        bucket->weights = absl::Span<float>();
        bucket->master_on_disk = true;
      }
    }
    // The step's memory and thread, made once: two staging buffers of the
    // largest bucket's stored state and one AdamW state of its size.
    int64_t largest = 0;
    for (const auto& bucket : buckets_) largest = std::max(largest, bucket->numel);
    for (std::vector<float>& staging : nvme_stage_) {
      staging.reserve(static_cast<size_t>(disk_->OptimizerNumel(largest)));
    }
    LOOM_ASSIGN_OR_RETURN(AdamWState adam, AdamWState::Create(largest));
    nvme_adam_.emplace(std::move(adam));
    disk_worker_ = std::make_unique<CommWorker>();
  }
  if (options_.param_disk != nullptr) {
    // Each bucket's compute-dtype shard goes to disk and leaves memory (f32: the
    // master with it; bf16 keeps its f32 master, in memory or optimizer_disk).
    for (const auto& bucket : buckets_) {
      const absl::Span<const std::byte> shard =
          bf16 ? absl::MakeConstSpan(reinterpret_cast<const std::byte*>(bucket->compute.data()),
                                     bucket->compute.size() * sizeof(BFloat16))
               : absl::MakeConstSpan(reinterpret_cast<const std::byte*>(bucket->weights.data()),
                                     bucket->weights.size() * sizeof(float));
      LOOM_RETURN_IF_ERROR(disk_->WriteParams(bucket->index, shard));
      bucket->params_on_disk = true;
      if (bf16) {
        bucket->compute_shard = std::vector<BFloat16>();
        bucket->compute = absl::Span<BFloat16>();
      } else {
        bucket->master = AlignedBuffer<float>();
        bucket->weights = absl::Span<float>();
      }
    }
    int64_t staged = 0;
    for (const auto& bucket : buckets_) staged = std::max(staged, disk_->ShardBytes(bucket->numel));
    shared_->staged.resize(static_cast<size_t>(staged));
  }
  if (options_.grad_disk != nullptr) {
    // Each bucket's gradient shard leaves memory; it is zero until the first
    // reduce-scatter stores one. The staging shard is the largest bucket's.
    int64_t largest = 0;
    for (const auto& bucket : buckets_) {
      bucket->grads_on_disk = true;
      bucket->grad_f32 = std::vector<float>();
      bucket->grad_bf16 = std::vector<BFloat16>();
      largest = std::max(largest, bucket->numel);
    }
    if (bf16) {
      shared_->grad_staged_bf16.reserve(static_cast<size_t>(largest));
    } else {
      shared_->grad_staged_f32.reserve(static_cast<size_t>(largest));
    }
    shared_->grad_staged_bytes = largest * DTypeBytes(options_.compute_dtype);
  }
  used_.assign(static_cast<size_t>(zero3_internal::UsedWords(partition_.num_buckets())), 0);
  for (int b = 0; b < partition_.num_buckets(); ++b) {
    bucket_names_.push_back(BucketName(partition_, b));
  }
  worker_ = std::make_unique<CommWorker>();
  return absl::OkStatus();
}

// RefreshComputeCopies rounds the masters to bf16 (bf16 compute) and widens the
// persistent block for Acquire.
absl::Status Zero3Engine::RefreshComputeCopies() {
  if (options_.compute_dtype != DType::kBF16) return absl::OkStatus();
  for (const auto& bucket : buckets_) {
    LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(bucket->weights, bucket->compute));
  }
  LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(persistent_->weights, persistent_->compute));
  return ConvertBF16ToF32(persistent_->compute, absl::MakeSpan(persistent_view_));
}

int Zero3Engine::BucketAt(int position) const {
  return pass_ == Zero3Pass::kForward ? position : partition_.num_buckets() - 1 - position;
}

int Zero3Engine::PositionOf(int bucket) const {
  return pass_ == Zero3Pass::kForward ? bucket : partition_.num_buckets() - 1 - bucket;
}

bool Zero3Engine::Reducing() const {
  return pass_ == Zero3Pass::kBackward || pass_ == Zero3Pass::kGradients;
}

absl::Status Zero3Engine::RecordError(absl::Status status) {
  if (!status.ok() && pass_error_.ok()) pass_error_ = status;
  return status;
}

absl::Time Zero3Engine::Deadline() const { return absl::Now() + options_.timeout; }

void Zero3Engine::CountGathered(int64_t delta) {
  stats_.live_gathered_bytes += delta;
  stats_.peak_gathered_bytes = std::max(stats_.peak_gathered_bytes, stats_.live_gathered_bytes);
}

// UsesBuffers: whether Acquire hands out a pool buffer — the gathered bucket at
// stage 3, the f32 widening of the whole bf16 bucket at stages 1 and 2 — rather
// than the whole f32 bucket itself (stages 1 and 2 in f32).
bool Zero3Engine::UsesBuffers() const {
  return options_.stage == 3 || options_.compute_dtype == DType::kBF16;
}

bool Zero3Engine::LendsShard(const BucketState& bucket) const {
  return options_.stage == 3 && options_.compute_dtype == DType::kF32 && dp_->size() == 1 &&
         !bucket.params_on_disk &&
         bucket.weights.size() >= static_cast<size_t>(bucket.padded_numel);
}

bool Zero3Engine::WidensOnDemand(const BucketState& bucket) const {
  return options_.compute_dtype == DType::kBF16 &&
         (options_.stage < 3 || !bucket.params_on_disk || !WidensOwnShard(bucket));
}

bool Zero3Engine::WidensOwnShard(const BucketState& bucket) const {
  const size_t shard =
      bucket.params_on_disk
          ? static_cast<size_t>(disk_->ShardBytes(bucket.numel)) / sizeof(BFloat16)
          : bucket.compute.size();
  return dp_->size() == 1 && shard >= static_cast<size_t>(bucket.padded_numel);
}

int64_t Zero3Engine::BufferBytes(int64_t numel) const {
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  if (options_.stage < 3) return bf16 ? numel * 4 : 0;
  return numel * (DTypeBytes(options_.compute_dtype) + (bf16 ? 4 : 0));
}

absl::Status Zero3Engine::WaitTimed(CommWorker::Ticket ticket, double* waited) {
  const absl::Time start = absl::Now();
  absl::Status status = worker_->Wait(ticket, start + options_.timeout);
  *waited += absl::ToDoubleSeconds(absl::Now() - start);
  return status;
}

absl::Status Zero3Engine::CheckParam(absl::string_view call, int param) const {
  if (param < 0 || param >= partition_.num_params()) {
    return absl::OutOfRangeError(absl::StrCat(Who(), ": ", call, "(", param,
                                              "): the model has ", partition_.num_params(),
                                              " parameters"));
  }
  return absl::OkStatus();
}

int Zero3Engine::gather_buffers() const { return static_cast<int>(shared_->pool.size()); }

int Zero3Engine::grad_buffers() const {
  // Stage 1 adds a bucket's buffer into its whole gradient as the pass leaves it
  // and gives it back at once: one is ever live.
  const int bound = options_.stage == 1 ? 1 : options_.max_grad_buffers;
  return std::min(bound, partition_.num_buckets());
}

int64_t Zero3Engine::disk_staging_bytes_per_element() const {
  if (options_.optimizer_disk == nullptr) return 0;
  // Two staging buffers of the stored state (2 or 3 floats an element) and one
  // AdamW state (m and v, f32).
  const int64_t stored = options_.compute_dtype == DType::kBF16 ? 3 : 2;
  return 2 * stored * 4 + 8;
}

Zero3Stats Zero3Engine::Stats() const {
  Zero3Stats stats = stats_;
  stats.model_state_bytes = 0;
  stats.host_state_bytes = 0;
  for (const auto& bucket : buckets_) stats.model_state_bytes += bucket->StateBytes();
  stats.persistent_state_bytes = persistent_->StateBytes();
  for (const auto& bucket : buckets_) {
    if (options_.optimizer_disk != nullptr) stats.disk_state_bytes += disk_->OptimizerNumel(bucket->numel) * 4;
    if (bucket->params_on_disk) stats.disk_state_bytes += disk_->ShardBytes(bucket->numel);
    if (bucket->grads_on_disk) stats.disk_state_bytes += disk_->ShardBytes(bucket->numel);
  }
  if (options_.offload_optimizer) {
    auto host = [](const BucketState& b) {
      return static_cast<int64_t>(b.weights.size() * sizeof(float) +
                                  (b.adam.has_value() ? b.adam->size_bytes() : 0));
    };
    for (const auto& bucket : buckets_) stats.host_state_bytes += host(*bucket);
    stats.host_state_bytes += host(*persistent_);
  }
  stats.peak_grad_buffer_bytes = shared_->peak_grad_bytes.load();
  stats.buffer_bytes = shared_->grads.allocated_bytes() +
                       static_cast<int64_t>(shared_->pool.size()) *
                           BufferBytes(partition_.MaxBucketNumel());
  stats.buffer_bytes += static_cast<int64_t>(shared_->staged.size());
  stats.buffer_bytes += shared_->grad_staged_bytes;
  for (const std::vector<float>& stage : nvme_stage_) {
    stats.buffer_bytes += static_cast<int64_t>(stage.capacity() * sizeof(float));
  }
  if (nvme_adam_.has_value()) stats.buffer_bytes += static_cast<int64_t>(nvme_adam_->size_bytes());
  return stats;
}

absl::Status Zero3Engine::BeginParameterPass(ParameterPass pass) {
  switch (pass) {
    case ParameterPass::kForward:
      return BeginPass(Zero3Pass::kForward);
    case ParameterPass::kBackward:
      return BeginPass(Zero3Pass::kBackward);
    case ParameterPass::kRegather:
      return BeginPass(Zero3Pass::kRegather);
    case ParameterPass::kGradients:
      return BeginPass(Zero3Pass::kGradients);
  }
  return absl::InvalidArgumentError(absl::StrCat(Who(), ": unknown ParameterPass"));
}

}  // namespace loom
