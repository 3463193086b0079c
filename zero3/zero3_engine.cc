#include "zero3/zero3_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/buffer_view.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "zero3/internal/agreement.h"
#include "collectives/comm_worker.h"

namespace loom {
namespace zero3_internal {

// GatherBuffer: room for the largest bucket, gathered in the compute dtype, and
// (bf16) its f32 widening, which is what Acquire hands out. The gathered bucket is
// communication memory from the dp communicator's AllocateBuffer (shm: the peers
// map it, so the all-gathers skip the kernel copy); the widening stays private.
struct GatherBuffer {
  CommBuffer memory;             // holds f32 or bf16
  absl::Span<float> f32;         // f32 compute: the gathered bucket itself
  absl::Span<BFloat16> bf16;     // bf16 compute (stage 3): the gathered bucket
  std::vector<float> widened;    // bf16 compute: f32 copy of it
};

// GradBuffers: whole-bucket gradient buffers, from the dp communicator's
// AllocateBuffer and recycled (a fresh mapping per bucket and pass would cost the
// peers a new mapping each time). Taken on the caller's thread, given back on the
// communication thread once the bucket is reduced. All of one size, the largest
// bucket's; at most as many are kept as were ever live at once.
class GradBuffers {
 public:
  GradBuffers(Communicator* dp, size_t bytes) : dp_(dp), bytes_(bytes) {}

  absl::StatusOr<CommBuffer> Take() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        CommBuffer buffer = std::move(free_.back());
        free_.pop_back();
        return buffer;
      }
    }
    allocated_.fetch_add(static_cast<int64_t>(bytes_));
    return dp_->AllocateBuffer(bytes_);
  }
  // The bytes of every buffer ever allocated (the free ones stay allocated).
  int64_t allocated_bytes() const { return allocated_.load(); }
  void Give(CommBuffer buffer) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    free_.push_back(std::move(buffer));
  }

 private:
  Communicator* const dp_;
  const size_t bytes_;
  Mutex mu_;
  std::vector<CommBuffer> free_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> allocated_{0};
};

// BucketState: one bucket's shard (or, `replicated`, the persistent block whole)
// and what the current pass is doing with it.
struct BucketState {
  int index = -1;                  // bucket index; -1 for the persistent block
  bool replicated = false;
  int64_t numel = 0;               // elements held: shard_numel or PersistentNumel
  int64_t padded_numel = 0;        // gathered size (replicated: numel)
  // The f32 master weights (in f32 compute, the parameters): `master`, or in f32
  // at stages 1 and 2 this rank's block of `whole_f32`.
  absl::Span<float> weights;
  AlignedBuffer<float> master;
  // bf16 compute: the bf16 copy of `weights`, in `compute_shard` or (stages 1 and
  // 2) this rank's block of `whole_bf16`.
  absl::Span<BFloat16> compute;
  std::vector<BFloat16> compute_shard;
  // Stages 1 and 2: the whole bucket, on every rank, in the compute dtype.
  std::vector<float> whole_f32;
  std::vector<BFloat16> whole_bf16;
  // The gradient: this rank's shard (stages 2 and 3, and the persistent block), or
  // at stage 1 the whole bucket's, accumulated here until ReduceGradients reduces
  // it into this rank's block of it.
  std::vector<float> grad_f32;
  std::vector<BFloat16> grad_bf16;
  std::optional<AdamWState> adam;   // empty when it lives in optimizer_disk
  bool master_on_disk = false;      // bf16 with optimizer_disk: `master` is empty
  // param_disk: the compute-dtype shard is on disk (f32: `master` is empty too).
  bool params_on_disk = false;
  // grad_disk: the gradient shard is on disk (grad_f32 and grad_bf16 are empty),
  // and whether this step has stored one (else it is zero). The communication
  // thread sets grad_stored; the caller's thread reads and clears it after a wait.
  bool grads_on_disk = false;
  bool grad_stored = false;

  // This pass.
  int buffer = -1;                      // GatherBuffer in use, or -1
  CommWorker::Ticket gather_ticket = 0;
  bool gather_waited = false;
  // Still gathered after its pass ended (in its last window), for the next pass.
  bool kept = false;
  // Whole bucket, f32, while gradients arrive (empty: none yet), in grad_memory:
  // from GradBuffers (buckets) or kept across passes (the persistent block).
  absl::Span<float> grad_buffer;
  CommBuffer grad_memory;
  bool reduced = false;                 // its reduce-scatter was submitted

  int64_t StateBytes() const {
    return static_cast<int64_t>(master.size() * sizeof(float) +
                                compute_shard.size() * sizeof(BFloat16) +
                                whole_f32.size() * sizeof(float) +
                                whole_bf16.size() * sizeof(BFloat16) +
                                grad_f32.size() * sizeof(float) +
                                grad_bf16.size() * sizeof(BFloat16)) +
           static_cast<int64_t>(adam.has_value() ? adam->size_bytes() : 0);
  }
};

// EngineShared: the gather buffers (the pool and its free list are used by the
// caller's thread only; the worker writes into buffers it was handed) and the
// gradient-buffer byte counters, which the worker updates.
struct EngineShared {
  EngineShared(Communicator* dp, size_t grad_bytes) : grads(dp, grad_bytes) {}
  std::vector<GatherBuffer> pool;
  std::vector<int> free_buffers;
  GradBuffers grads;
  // param_disk: a shard read from disk just before its all-gather. One is enough:
  // the communication thread runs one gather at a time.
  std::vector<std::byte> staged;
  // grad_disk: the gradient shard being added into, on the communication thread.
  std::vector<float> grad_staged_f32;
  std::vector<BFloat16> grad_staged_bf16;
  int64_t grad_staged_bytes = 0;  // reserved at Init (the worker never grows them)
  std::atomic<int64_t> live_grad_bytes{0};
  std::atomic<int64_t> peak_grad_bytes{0};
};

}  // namespace zero3_internal

namespace {

using zero3_internal::BucketState;
using zero3_internal::EngineShared;
using zero3_internal::GatherBuffer;

int64_t DTypeBytes(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }

// BucketName names a bucket by its parameters, for messages: "\"h.0.w\" and 3 more".
std::string BucketName(const Partition& partition, int b) {
  const Bucket& bucket = partition.bucket(b);
  std::string name = absl::StrCat("\"", partition.slot(bucket.params.front()).name, "\"");
  if (bucket.params.size() > 1) absl::StrAppend(&name, " and ", bucket.params.size() - 1, " more");
  return name;
}

// AddInto adds src to a gradient shard held in the compute dtype, `f32` or (when
// that is empty) `bf16`: widened, added in f32, rounded once.
void AddInto(absl::Span<const float> src, std::vector<float>& f32, std::vector<BFloat16>& bf16) {
  if (!f32.empty()) {
    for (size_t i = 0; i < src.size(); ++i) f32[i] += src[i];
    return;
  }
  for (size_t i = 0; i < src.size(); ++i) bf16[i] = ToBFloat16(ToFloat(bf16[i]) + src[i]);
}

void AddInto(absl::Span<const float> src, BucketState& bucket) {
  AddInto(src, bucket.grad_f32, bucket.grad_bf16);
}

}  // namespace

Zero3Engine::Zero3Engine(const Partition& partition, Communicator* dp, const Zero3Options& options)
    : partition_(partition), dp_(dp), options_(options), rank_(dp->rank()) {}

Zero3Engine::~Zero3Engine() {
  // The worker finishes what it runs (each collective has its own deadline)
  // before the buffers it uses go away.
  worker_.reset();
  // The state on disk is this engine's swap space, not a checkpoint.
  for (const auto& bucket : buckets_) {
    if (options_.optimizer_disk != nullptr) {
      options_.optimizer_disk->Remove(DiskName(*bucket)).IgnoreError();
    }
    if (bucket->params_on_disk) {
      options_.param_disk->Remove(ParamDiskName(*bucket)).IgnoreError();
    }
    if (bucket->grads_on_disk) options_.grad_disk->Remove(GradDiskName(*bucket)).IgnoreError();
  }
}

std::string Zero3Engine::GradDiskName(const BucketState& bucket) const {
  return absl::StrCat(DiskName(bucket), ".g");
}

absl::Status Zero3Engine::ReadGradShard(const BucketState& bucket, std::vector<float>& f32,
                                        std::vector<BFloat16>& bf16) const {
  const size_t n = static_cast<size_t>(bucket.numel);
  const bool in_bf16 = options_.compute_dtype == DType::kBF16;
  f32.assign(in_bf16 ? 0 : n, 0.0f);
  bf16.assign(in_bf16 ? n : 0, BFloat16());
  if (!bucket.grad_stored) return absl::OkStatus();
  const absl::Span<std::byte> into =
      in_bf16 ? absl::MakeSpan(reinterpret_cast<std::byte*>(bf16.data()), n * sizeof(BFloat16))
              : absl::MakeSpan(reinterpret_cast<std::byte*>(f32.data()), n * sizeof(float));
  return options_.grad_disk->Read(GradDiskName(bucket), into);
}

absl::Status Zero3Engine::AddIntoStoredGrad(absl::Span<const float> average, BucketState& bucket) {
  std::vector<float>& f32 = shared_->grad_staged_f32;
  std::vector<BFloat16>& bf16 = shared_->grad_staged_bf16;
  LOOM_RETURN_IF_ERROR(ReadGradShard(bucket, f32, bf16));
  AddInto(average, f32, bf16);
  const absl::Span<const std::byte> shard =
      f32.empty() ? absl::MakeConstSpan(reinterpret_cast<const std::byte*>(bf16.data()),
                                        bf16.size() * sizeof(BFloat16))
                  : absl::MakeConstSpan(reinterpret_cast<const std::byte*>(f32.data()),
                                        f32.size() * sizeof(float));
  LOOM_RETURN_IF_ERROR(options_.grad_disk->Write(GradDiskName(bucket), shard));
  bucket.grad_stored = true;
  return absl::OkStatus();
}

std::string Zero3Engine::ParamDiskName(const BucketState& bucket) const {
  return absl::StrCat(DiskName(bucket), ".w");
}

int64_t Zero3Engine::ParamShardBytes(const BucketState& bucket) const {
  return bucket.numel * DTypeBytes(options_.compute_dtype);
}

absl::Status Zero3Engine::ReadParamShard(const BucketState& bucket,
                                         absl::Span<std::byte> out) const {
  return options_.param_disk->Read(ParamDiskName(bucket), out);
}

absl::Status Zero3Engine::WriteParamShard(const BucketState& bucket,
                                          absl::Span<const std::byte> shard) {
  return options_.param_disk->Write(ParamDiskName(bucket), shard);
}

absl::StatusOr<std::vector<float>> Zero3Engine::ReadParamWeights(const BucketState& bucket) const {
  std::vector<float> weights(static_cast<size_t>(bucket.numel));
  LOOM_RETURN_IF_ERROR(ReadParamShard(
      bucket, absl::MakeSpan(reinterpret_cast<std::byte*>(weights.data()),
                             weights.size() * sizeof(float))));
  return weights;
}

std::string Zero3Engine::DiskName(const BucketState& bucket) const {
  return absl::StrCat(options_.disk_prefix, ".r", rank_, ".b", bucket.index);
}

int64_t Zero3Engine::StoredNumel(const BucketState& bucket) const {
  return bucket.numel * (options_.compute_dtype == DType::kBF16 ? 3 : 2);
}

absl::StatusOr<std::vector<float>> Zero3Engine::ReadStored(const BucketState& bucket) const {
  std::vector<float> stored(static_cast<size_t>(StoredNumel(bucket)));
  LOOM_RETURN_IF_ERROR(options_.optimizer_disk->Read(
      DiskName(bucket), absl::MakeSpan(reinterpret_cast<std::byte*>(stored.data()),
                                       stored.size() * sizeof(float))));
  return stored;
}

absl::Status Zero3Engine::WriteStored(const BucketState& bucket, absl::Span<const float> stored) {
  return options_.optimizer_disk->Write(
      DiskName(bucket), absl::MakeConstSpan(reinterpret_cast<const std::byte*>(stored.data()),
                                            stored.size() * sizeof(float)));
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
  const size_t max_numel = static_cast<size_t>(partition_.MaxBucketNumel());
  shared_ = std::make_unique<EngineShared>(dp_, max_numel * sizeof(float));
  const int pool_size =
      UsesBuffers() ? std::min(slots_, std::max(partition_.num_buckets(), 1)) : 0;
  shared_->pool.resize(pool_size);
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
      std::vector<float> stored(static_cast<size_t>(StoredNumel(*bucket)), 0.0f);
      if (bf16) std::copy(bucket->weights.begin(), bucket->weights.end(), stored.begin() + 2 * n);
      LOOM_RETURN_IF_ERROR(WriteStored(*bucket, stored));
      bucket->adam.reset();
      if (bf16) {
        bucket->master = AlignedBuffer<float>();
        bucket->weights = absl::Span<float>();
        bucket->master_on_disk = true;
      }
    }
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
      LOOM_RETURN_IF_ERROR(WriteParamShard(*bucket, shard));
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
    for (const auto& bucket : buckets_) staged = std::max(staged, ParamShardBytes(*bucket));
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

void Zero3Engine::MarkUsed(int bucket) {
  used_[static_cast<size_t>(bucket / 64)] |= uint64_t{1} << (bucket % 64);
}

void Zero3Engine::SubmitAgreement(int64_t kind, Zero3Pass pass) {
  if (!options_.check_agreement || dp_->size() < 2) return;
  static_assert(static_cast<int>(Zero3Pass::kForward) == 1 &&
                    static_cast<int>(Zero3Pass::kBackward) == 2 &&
                    static_cast<int>(Zero3Pass::kGradients) == 3 &&
                    static_cast<int>(Zero3Pass::kRegather) == 4,
                "zero3_internal::SyncPoint names the passes by these values");
  zero3_internal::SyncPoint point;
  point.steps = stats_.steps;
  point.kind = kind;
  point.pass = static_cast<int64_t>(pass);
  point.passes_since_step = passes_since_step_;
  point.previous_pass = static_cast<int64_t>(previous_pass_);
  point.compare_use = options_.require_same_use;
  point.used = used_;
  ++stats_.agreement_checks;
  Communicator* dp = dp_;
  const std::vector<std::string>* names = &bucket_names_;
  const std::string who = Who();
  worker_->Submit([dp, point, names, who]() -> absl::Status {
    const absl::Status agreed = zero3_internal::CheckAgreement(*dp, point, *names);
    if (agreed.ok()) return agreed;
    return absl::Status(agreed.code(), absl::StrCat(who, ": ", agreed.message()));
  });
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

absl::Status Zero3Engine::BeginPass(Zero3Pass pass) {
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": BeginPass inside a pass; call EndPass first"));
  }
  if (pass == Zero3Pass::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(Who(), ": BeginPass(kNone)"));
  }
  if (grads_reduced_ && (pass == Zero3Pass::kBackward || pass == Zero3Pass::kGradients)) {
    // Stage 1's reduced shard took the place of the whole gradient it accumulates.
    return absl::FailedPreconditionError(
        absl::StrCat(Who(),
                     ": a backward pass after ReduceGradients; Step first (the gradients of this "
                     "step are reduced)"));
  }
  // Where this rank stands, checked against the others ahead of the pass's
  // collectives; the pass's own use starts afresh.
  SubmitAgreement(zero3_internal::SyncPoint::kPass, pass);
  std::fill(used_.begin(), used_.end(), 0);
  if (whole_stale_) {
    // WriteShard changed every rank's shard: the whole copies (stages 1 and 2)
    // gather them before anyone uses them.
    for (const auto& bucket : buckets_) GatherWhole(*bucket);
    LOOM_RETURN_IF_ERROR(worker_->WaitAll(Deadline()));
    whole_stale_ = false;
  }
  pass_ = pass;
  position_ = 0;
  next_gather_ = 0;
  pass_error_ = absl::OkStatus();
  TakeOverKept();
  for (const auto& bucket : buckets_) {
    bucket->reduced = false;
    if (bucket->buffer < 0) bucket->gather_waited = false;
  }
  // The persistent block's buffer stays (allocated once): zeroed for the pass.
  std::fill(persistent_->grad_buffer.begin(), persistent_->grad_buffer.end(), 0.0f);
  EnqueueGathers();
  return absl::OkStatus();
}

// UsesBuffers: whether Acquire hands out a pool buffer — the gathered bucket at
// stage 3, the f32 widening of the whole bf16 bucket at stages 1 and 2 — rather
// than the whole f32 bucket itself (stages 1 and 2 in f32).
bool Zero3Engine::UsesBuffers() const {
  return options_.stage == 3 || options_.compute_dtype == DType::kBF16;
}

int64_t Zero3Engine::BufferBytes(int64_t numel) const {
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  if (options_.stage < 3) return bf16 ? numel * 4 : 0;
  return numel * (DTypeBytes(options_.compute_dtype) + (bf16 ? 4 : 0));
}

// EnqueueGathers fills the pool buffers of the positions in the window
// [position_, position_ + slots_) that have none yet, while buffers are free:
// an all-gather at stage 3, a widening of the whole bf16 copy at stages 1 and 2.
void Zero3Engine::EnqueueGathers() {
  if (pass_ == Zero3Pass::kGradients || !UsesBuffers()) return;
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  const bool gather = options_.stage == 3;
  while (next_gather_ < partition_.num_buckets() && next_gather_ < position_ + slots_) {
    BucketState& bucket = *buckets_[BucketAt(next_gather_)];
    if (bucket.buffer >= 0) {  // taken over, gathered, from the pass before
      ++next_gather_;
      continue;
    }
    if (shared_->free_buffers.empty()) break;
    bucket.buffer = shared_->free_buffers.back();
    shared_->free_buffers.pop_back();
    bucket.gather_waited = false;
    GatherBuffer& buffer = shared_->pool[bucket.buffer];
    const size_t padded = static_cast<size_t>(bucket.padded_numel);
    CountGathered(BufferBytes(bucket.padded_numel));
    if (gather) ++stats_.gathers;
    Communicator* dp = dp_;
    BucketState* state = &bucket;
    if (bucket.params_on_disk) ++stats_.param_disk_reads;
    bucket.gather_ticket =
        worker_->Submit([this, dp, state, &buffer, bf16, gather, padded]() -> absl::Status {
          if (!gather) {
            return ConvertBF16ToF32(absl::MakeConstSpan(state->whole_bf16),
                                    absl::MakeSpan(buffer.widened).first(padded));
          }
          // param_disk: the shard comes from disk first, here on the communication
          // thread, so a prefetched bucket is read ahead of use as well.
          absl::Span<const std::byte> shard;
          if (state->params_on_disk) {
            const size_t bytes = static_cast<size_t>(ParamShardBytes(*state));
            const absl::Span<std::byte> into = absl::MakeSpan(shared_->staged).first(bytes);
            LOOM_RETURN_IF_ERROR(ReadParamShard(*state, into));
            shard = into;
          }
          if (bf16) {
            const absl::Span<const BFloat16> in =
                state->params_on_disk
                    ? absl::MakeConstSpan(reinterpret_cast<const BFloat16*>(shard.data()),
                                          shard.size() / sizeof(BFloat16))
                    : absl::MakeConstSpan(state->compute);
            const absl::Span<BFloat16> gathered = absl::MakeSpan(buffer.bf16).first(padded);
            LOOM_RETURN_IF_ERROR(
                dp->AllGather(ConstBufferView::Of(in), BufferView::Of(gathered)));
            return ConvertBF16ToF32(absl::MakeConstSpan(buffer.bf16).first(padded),
                                    absl::MakeSpan(buffer.widened).first(padded));
          }
          const absl::Span<const float> in =
              state->params_on_disk
                  ? absl::MakeConstSpan(reinterpret_cast<const float*>(shard.data()),
                                        shard.size() / sizeof(float))
                  : absl::MakeConstSpan(state->weights);
          return dp->AllGather(ConstBufferView::Of(in),
                               BufferView::Of(absl::MakeSpan(buffer.f32).first(padded)));
        });
    ++next_gather_;
  }
}

// ReleaseBefore releases the positions before `position`: each is gathered (so
// every rank makes the same calls) and its buffer goes back to the pool; in a
// backward pass its gradients are reduce-scattered.
absl::Status Zero3Engine::ReleaseBefore(int position) {
  while (position_ < position) {
    EnqueueGathers();
    BucketState& bucket = *buckets_[BucketAt(position_)];
    if (pass_ != Zero3Pass::kGradients && UsesBuffers()) {
      if (bucket.buffer < 0) {
        // Impossible: released buffers return before the window moves.
        return RecordError(absl::InternalError(
            absl::StrCat(Who(), ": bucket ", bucket.index, " was never gathered")));
      }
      const absl::Status gathered =
          bucket.gather_waited ? absl::OkStatus()
                               : WaitTimed(bucket.gather_ticket, &stats_.gather_wait_seconds);
      bucket.gather_waited = true;
      // The pass's last window stays gathered for the next pass (TakeOverKept).
      // Its buffers are never needed again in this pass: the positions after
      // position_ need at most the pool less the kept ones.
      const int buckets = partition_.num_buckets();
      if (gathered.ok() && pass_error_.ok() && position_ >= buckets - std::min(slots_, buckets)) {
        bucket.kept = true;
      } else {
        FreeBuffer(bucket);
      }
      if (!gathered.ok()) return RecordError(gathered);
    }
    if (Reducing()) LOOM_RETURN_IF_ERROR(RecordError(EnqueueReduce(bucket)));
    ++position_;
  }
  EnqueueGathers();
  return absl::OkStatus();
}

void Zero3Engine::FreeBuffer(BucketState& bucket) {
  shared_->free_buffers.push_back(bucket.buffer);
  bucket.buffer = -1;
  bucket.kept = false;
  CountGathered(-BufferBytes(bucket.padded_numel));
}

// The buckets a pass ends with are the ones the next pass starts with when it
// runs the other way (a forward's last units are its backward's first, and a
// backward's last the next microbatch's forward's first): those stay gathered,
// which saves their all-gathers and the wait at the start of the pass. Every rank
// keeps and takes over the same buckets (the passes agree), so the collectives
// still match; the buffers are the pool's, so the gathered bytes stay bounded.
void Zero3Engine::TakeOverKept() {
  const bool gathers = pass_ != Zero3Pass::kGradients && UsesBuffers();
  for (const auto& bucket : buckets_) {
    if (!bucket->kept) continue;
    bucket->kept = false;
    if (gathers && PositionOf(bucket->index) < slots_) {
      ++stats_.gathers_kept;
      stats_.gathered_numel_kept += bucket->padded_numel;
    } else {
      FreeBuffer(*bucket);
    }
  }
}

void Zero3Engine::DropKept() {
  for (const auto& bucket : buckets_) {
    if (bucket->kept) FreeBuffer(*bucket);
  }
}

// EnqueueReduce submits the reduce-scatter (average over dp) of the bucket's
// gradients into this rank's gradient shard; the whole-bucket buffer is freed by
// the job once reduced. Stage 1 only adds them into its whole-bucket gradient,
// which Step reduces.
absl::Status Zero3Engine::EnqueueReduce(BucketState& bucket) {
  bucket.reduced = true;
  if (options_.stage == 1) {
    if (!bucket.grad_buffer.empty()) {
      AddInto(bucket.grad_buffer, bucket);
      shared_->live_grad_bytes.fetch_sub(static_cast<int64_t>(bucket.grad_buffer.size()) * 4);
      bucket.grad_buffer = {};
      shared_->grads.Give(std::move(bucket.grad_memory));
      --grad_buffers_held_;
    }
    return absl::OkStatus();
  }
  ++stats_.reduce_scatters;
  if (bucket.grad_buffer.empty()) LOOM_RETURN_IF_ERROR(TakeGradBuffer(bucket));
  Communicator* dp = dp_;
  BucketState* state = &bucket;
  EngineShared* shared = shared_.get();
  reduce_tickets_.push_back(worker_->Submit([this, dp, state, shared]() -> absl::Status {
    const int64_t held = static_cast<int64_t>(state->grad_buffer.size()) * 4;
    // The f32 gradients are reduced as they are: in bf16 the communicator would
    // widen them to f32 on the wire anyway (it rounds once, at the end), so
    // rounding them first would only add a rounding. The average is rounded once,
    // into the bf16 shard.
    std::vector<float> mine(static_cast<size_t>(state->numel));
    absl::Status status =
        dp->ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(state->grad_buffer)),
                          BufferView::Of(absl::MakeSpan(mine)), ReduceOp::kAvg);
    if (status.ok()) {
      if (state->grads_on_disk) {
        status = AddIntoStoredGrad(mine, *state);
      } else {
        AddInto(mine, *state);
      }
    }
    state->grad_buffer = {};
    shared->grads.Give(std::move(state->grad_memory));
    shared->live_grad_bytes.fetch_sub(held);
    return status;
  }));
  return absl::OkStatus();
}

absl::Status Zero3Engine::AllocatePersistentGrad() {
  LOOM_ASSIGN_OR_RETURN(persistent_->grad_memory,
                        dp_->AllocateBuffer(static_cast<size_t>(persistent_->numel) * sizeof(float)));
  persistent_->grad_buffer =
      persistent_->grad_memory.As<float>().first(static_cast<size_t>(persistent_->numel));
  return absl::OkStatus();
}

absl::Status Zero3Engine::TakeGradBuffer(BucketState& bucket) {
  // At the bound, the oldest reduce-scatter still running gives its buffer back
  // (the worker runs them in order; every bucket holding one but this one has had
  // its reduce-scatter submitted, so the wait ends).
  while (grad_buffers_held_ >= options_.max_grad_buffers && !reduce_tickets_.empty()) {
    const CommWorker::Ticket oldest = reduce_tickets_.front();
    reduce_tickets_.pop_front();
    --grad_buffers_held_;
    LOOM_RETURN_IF_ERROR(RecordError(WaitTimed(oldest, &stats_.grad_buffer_wait_seconds)));
  }
  LOOM_ASSIGN_OR_RETURN(bucket.grad_memory, shared_->grads.Take());
  ++grad_buffers_held_;
  bucket.grad_buffer =
      bucket.grad_memory.As<float>().first(static_cast<size_t>(bucket.padded_numel));
  std::fill(bucket.grad_buffer.begin(), bucket.grad_buffer.end(), 0.0f);
  CountGradBuffer(bucket.padded_numel * 4);
  return absl::OkStatus();
}

void Zero3Engine::CountGradBuffer(int64_t bytes) {
  const int64_t live = shared_->live_grad_bytes.fetch_add(bytes) + bytes;
  int64_t peak = shared_->peak_grad_bytes.load();
  while (live > peak && !shared_->peak_grad_bytes.compare_exchange_weak(peak, live)) {
  }
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

absl::StatusOr<absl::Span<const float>> Zero3Engine::Acquire(int param) {
  LOOM_RETURN_IF_ERROR(CheckParam("Acquire", param));
  const ParamSlot& slot = partition_.slot(param);
  const std::string what = absl::StrCat("Acquire(", param, " \"", slot.name, "\")");
  if (pass_ == Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": ", what, " outside a pass"));
  }
  if (pass_ == Zero3Pass::kGradients) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ", what, " in a kGradients pass, which gathers nothing"));
  }
  if (slot.persistent) {
    const float* base = options_.compute_dtype == DType::kBF16 ? persistent_view_.data()
                                                               : persistent_->weights.data();
    return absl::MakeConstSpan(base + slot.offset, static_cast<size_t>(slot.numel));
  }
  MarkUsed(slot.bucket);
  const int position = PositionOf(slot.bucket);
  if (position < position_) {
    return RecordError(absl::FailedPreconditionError(absl::StrCat(
        Who(), ": ", what, ": its bucket ", slot.bucket, " was already released in this ",
        pass_ == Zero3Pass::kForward ? "forward" : "backward",
        " pass (parameters are used in pass order: forward in the partition's order, backward "
        "in reverse)")));
  }
  LOOM_RETURN_IF_ERROR(ReleaseBefore(position));
  BucketState& bucket = *buckets_[slot.bucket];
  if (!UsesBuffers()) {
    return absl::MakeConstSpan(bucket.whole_f32).subspan(static_cast<size_t>(slot.offset),
                                                         static_cast<size_t>(slot.numel));
  }
  if (!bucket.gather_waited) {
    LOOM_RETURN_IF_ERROR(
        RecordError(WaitTimed(bucket.gather_ticket, &stats_.gather_wait_seconds)));
    bucket.gather_waited = true;
  }
  const GatherBuffer& buffer = shared_->pool[bucket.buffer];
  const float* base = options_.compute_dtype == DType::kBF16 ? buffer.widened.data()
                                                             : buffer.f32.data();
  return absl::MakeConstSpan(base + slot.offset, static_cast<size_t>(slot.numel));
}

absl::Status Zero3Engine::AddGrad(int param, absl::Span<const float> grad) {
  LOOM_RETURN_IF_ERROR(CheckParam("AddGrad", param));
  const ParamSlot& slot = partition_.slot(param);
  const std::string what = absl::StrCat("AddGrad(", param, " \"", slot.name, "\")");
  if (!Reducing()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ", what, " outside a backward pass"));
  }
  if (static_cast<int64_t>(grad.size()) != slot.numel) {
    return absl::InvalidArgumentError(absl::StrCat(Who(), ": ", what, " has ", grad.size(),
                                                   " elements, the parameter has ", slot.numel));
  }
  if (!slot.persistent) MarkUsed(slot.bucket);
  if (!slot.persistent && !buckets_[slot.bucket]->reduced) {
    // The buckets after this one in pass order are done: their reduce-scatters
    // start now, so at most this bucket holds a gradient buffer not yet submitted.
    LOOM_RETURN_IF_ERROR(ReleaseBefore(PositionOf(slot.bucket)));
  }
  BucketState& bucket = slot.persistent ? *persistent_ : *buckets_[slot.bucket];
  if (bucket.reduced) {
    return RecordError(absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ", what, ": bucket ", slot.bucket,
                     "'s gradients were already reduce-scattered in this backward pass (the pass "
                     "moved past it; gradients arrive in reverse partition order)")));
  }
  if (bucket.grad_buffer.empty()) {
    LOOM_RETURN_IF_ERROR(slot.persistent ? AllocatePersistentGrad() : TakeGradBuffer(bucket));
  }
  float* dst = bucket.grad_buffer.data() + slot.offset;
  for (size_t i = 0; i < grad.size(); ++i) dst[i] += grad[i];
  return absl::OkStatus();
}

absl::Status Zero3Engine::EndPass() {
  if (pass_ == Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": EndPass outside a pass"));
  }
  absl::Status status = ReleaseBefore(partition_.num_buckets());
  if (!status.ok() || !pass_error_.ok()) DropKept();
  if (Reducing() && persistent_->numel > 0) {
    // The persistent gradients, whole on every rank: one all-reduce (average) of
    // the f32 sums, rounded once into the gradient (as EnqueueReduce does).
    if (persistent_->grad_buffer.empty()) LOOM_RETURN_IF_ERROR(AllocatePersistentGrad());
    Communicator* dp = dp_;
    BucketState* state = persistent_.get();
    worker_->Submit([dp, state]() -> absl::Status {
      LOOM_RETURN_IF_ERROR(dp->AllReduce(absl::MakeSpan(state->grad_buffer), ReduceOp::kAvg));
      AddInto(state->grad_buffer, *state);
      return absl::OkStatus();
    });
  }
  const absl::Status drained = worker_->WaitAll(Deadline());
  // Every buffer is back (or its reduce failed and the pass's error says so).
  grad_buffers_held_ = 0;
  reduce_tickets_.clear();
  if (Reducing()) ++passes_since_step_;
  previous_pass_ = pass_;
  pass_ = Zero3Pass::kNone;
  if (!pass_error_.ok()) return pass_error_;
  if (!status.ok()) return status;
  return drained;
}

// GatherWhole (stages 1 and 2) all-gathers, in place, every rank's block of the
// bucket's compute copy into its whole copy, on the communication thread.
void Zero3Engine::GatherWhole(BucketState& bucket) {
  ++stats_.gathers;
  Communicator* dp = dp_;
  BucketState* state = &bucket;
  worker_->Submit([dp, state]() -> absl::Status {
    if (!state->whole_bf16.empty()) {
      return dp->AllGather(ConstBufferView::Of(absl::MakeConstSpan(state->compute)),
                           BufferView::Of(absl::MakeSpan(state->whole_bf16)));
    }
    return dp->AllGather(ConstBufferView::Of(absl::MakeConstSpan(state->weights)),
                         BufferView::Of(absl::MakeSpan(state->whole_f32)));
  });
}

int64_t Zero3Engine::ReducedShardStart(const BucketState& bucket) const {
  return !bucket.replicated && options_.stage == 1 ? rank_ * bucket.numel : 0;
}

// ReduceWhole reduce-scatters in place, so that this rank's block of the whole
// gradient becomes its reduced shard. bf16: the whole gradient is widened first
// into a gather buffer (all are free outside a pass) and the f32 average rounded
// once into the block, as EnqueueReduce rounds a shard.
void Zero3Engine::ReduceWhole(BucketState& bucket) {
  ++stats_.reduce_scatters;
  Communicator* dp = dp_;
  BucketState* state = &bucket;
  float* widened = bucket.grad_bf16.empty() ? nullptr : shared_->pool.front().widened.data();
  const size_t own = static_cast<size_t>(ReducedShardStart(bucket));
  worker_->Submit([dp, state, widened, own]() -> absl::Status {
    const size_t n = static_cast<size_t>(state->numel);
    if (widened == nullptr) {
      const absl::Span<float> whole = absl::MakeSpan(state->grad_f32);
      return dp->ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(whole)),
                               BufferView::Of(whole.subspan(own, n)), ReduceOp::kAvg);
    }
    const absl::Span<float> whole(widened, state->grad_bf16.size());
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(state->grad_bf16, whole));
    LOOM_RETURN_IF_ERROR(dp->ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(whole)),
                                           BufferView::Of(whole.subspan(own, n)), ReduceOp::kAvg));
    for (size_t i = own; i < own + n; ++i) state->grad_bf16[i] = ToBFloat16(whole[i]);
    return absl::OkStatus();
  });
}

absl::Status Zero3Engine::ReduceGradients() {
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": ReduceGradients inside a pass"));
  }
  if (passes_since_step_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ReduceGradients without a backward pass since the last Step"));
  }
  if (grads_reduced_) return absl::OkStatus();
  SubmitAgreement(zero3_internal::SyncPoint::kReduce, Zero3Pass::kNone);
  if (options_.stage == 1) {
    for (const auto& bucket : buckets_) ReduceWhole(*bucket);
  }
  LOOM_RETURN_IF_ERROR(worker_->WaitAll(Deadline()));
  grads_reduced_ = true;
  return absl::OkStatus();
}

absl::StatusOr<double> Zero3Engine::ReducedGradSquaredNorm(
    absl::Span<const float> param_weight) const {
  if (static_cast<int64_t>(param_weight.size()) != partition_.num_params()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Who(), ": ReducedGradSquaredNorm got ", param_weight.size(),
                     " parameter weights; the model has ", partition_.num_params(), " parameters"));
  }
  for (int p = 0; p < partition_.num_params(); ++p) {
    if (!std::isfinite(param_weight[p]) || param_weight[p] < 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(), ": ReducedGradSquaredNorm: the weight of parameter ", p, " (\"",
          partition_.slot(p).name, "\") is ", param_weight[p], "; it must be finite and >= 0"));
    }
  }
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ReducedGradSquaredNorm inside a pass"));
  }
  if (!grads_reduced_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ReducedGradSquaredNorm before ReduceGradients (",
                     passes_since_step_ == 0 ? "no backward pass since the last Step"
                                             : "this step's gradients are not reduced yet",
                     ")"));
  }
  const double passes = options_.average_passes ? static_cast<double>(passes_since_step_) : 1.0;
  double total = 0.0;
  // grad_disk: the shard of the bucket being summed, read once per bucket.
  int loaded = -1;
  std::vector<float> loaded_f32;
  std::vector<BFloat16> loaded_bf16;
  for (int p = 0; p < partition_.num_params(); ++p) {
    const ParamSlot& slot = partition_.slot(p);
    if (param_weight[p] == 0.0f || (slot.persistent && rank_ != 0)) continue;
    const BucketState& bucket = slot.persistent ? *persistent_ : *buckets_[slot.bucket];
    const Partition::Range range = partition_.OwnedRange(p, rank_);
    // Parameter element range.begin in the bucket, then in this rank's shard.
    const int64_t shard_begin = slot.persistent ? 0 : rank_ * bucket.numel;
    const int64_t first = ReducedShardStart(bucket) + slot.offset + range.begin - shard_begin;
    const int64_t count = range.end - range.begin;
    const std::vector<float>* f32 = &bucket.grad_f32;
    const std::vector<BFloat16>* bf16 = &bucket.grad_bf16;
    if (bucket.grads_on_disk) {
      if (loaded != slot.bucket) {
        LOOM_RETURN_IF_ERROR(ReadGradShard(bucket, loaded_f32, loaded_bf16));
        loaded = slot.bucket;
      }
      f32 = &loaded_f32;
      bf16 = &loaded_bf16;
    }
    double sum = 0.0;
    for (int64_t i = first; i < first + count; ++i) {
      const float x = f32->empty() ? ToFloat((*bf16)[i]) : (*f32)[i];
      const double g = static_cast<double>(x) / passes;
      sum += g * g;
    }
    total += sum * static_cast<double>(param_weight[p]);
  }
  return total;
}

absl::Status Zero3Engine::Step(const AdamWHyper& hyper) {
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": Step inside a pass"));
  }
  if (passes_since_step_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": Step without a backward pass since the last one"));
  }
  LOOM_RETURN_IF_ERROR(ValidateAdamWHyper(hyper));
  DropKept();  // gathered from the weights this step changes
  AdamWHyper averaged = hyper;
  averaged.grad_scale = options_.average_passes
                            ? hyper.grad_scale / static_cast<float>(passes_since_step_)
                            : hyper.grad_scale;
  AdamWOptions adam_options;
  adam_options.threads = options_.offload_optimizer ? options_.adamw_threads : 1;
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  std::vector<float> widened;  // bf16: one bucket's gradient shard in f32
  // NVMe: the next bucket's stored state, read on another thread (while stage 1
  // reduces, when the caller left that to Step). A future's destructor waits for
  // its read, so an early return leaves nothing running.
  std::future<absl::StatusOr<std::vector<float>>> ahead;
  auto read_ahead = [&](int b) {
    ahead = std::async(std::launch::async, [this, b] { return ReadStored(*buckets_[b]); });
  };
  if (options_.optimizer_disk != nullptr && !buckets_.empty()) read_ahead(0);
  LOOM_RETURN_IF_ERROR(ReduceGradients());
  auto step_one = [&](BucketState& bucket) -> absl::Status {
    const size_t start = static_cast<size_t>(ReducedShardStart(bucket));
    const size_t n = static_cast<size_t>(bucket.numel);
    // grad_disk: the shard comes in for the step and is zero after it.
    std::vector<float> stored_f32;
    std::vector<BFloat16> stored_bf16;
    if (bucket.grads_on_disk) LOOM_RETURN_IF_ERROR(ReadGradShard(bucket, stored_f32, stored_bf16));
    const std::vector<float>& grad_f32 = bucket.grads_on_disk ? stored_f32 : bucket.grad_f32;
    const std::vector<BFloat16>& grad_bf16 = bucket.grads_on_disk ? stored_bf16 : bucket.grad_bf16;
    absl::Span<const float> grads;
    if (bf16) {
      widened.resize(n);
      LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(absl::MakeConstSpan(grad_bf16).subspan(start, n),
                                            absl::MakeSpan(widened)));
      grads = widened;
    } else {
      grads = absl::MakeConstSpan(grad_f32).subspan(start, n);
    }
    // param_disk: the shard comes in for the step and goes back after it (f32:
    // it is the master; bf16: the new compute copy is written into it).
    std::vector<float> disk_weights;
    std::vector<BFloat16> disk_compute;
    absl::Span<float> weights = bucket.weights;
    absl::Span<BFloat16> compute = bucket.compute;
    if (bucket.params_on_disk) {
      if (bf16) {
        disk_compute.resize(n);
        compute = absl::MakeSpan(disk_compute);
      } else {
        LOOM_ASSIGN_OR_RETURN(disk_weights, ReadParamWeights(bucket));
        weights = absl::MakeSpan(disk_weights);
      }
    }
    if (bucket.adam.has_value()) {
      LOOM_RETURN_IF_ERROR(AdamWStep(averaged, weights, grads, *bucket.adam, adam_options,
                                     bf16 ? HalfCopy(compute) : HalfCopy()));
    } else {
      // NVMe: this bucket's state, read ahead while the previous bucket stepped.
      absl::StatusOr<std::vector<float>> stored = ahead.get();
      if (bucket.index + 1 < partition_.num_buckets()) read_ahead(bucket.index + 1);
      if (!stored.ok()) return stored.status();
      absl::Span<float> all = absl::MakeSpan(*stored);
      LOOM_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(bucket.numel));
      LOOM_RETURN_IF_ERROR(state.WriteMoments(all.subspan(0, n), all.subspan(n, n)));
      LOOM_RETURN_IF_ERROR(AdamWStep(averaged, bf16 ? all.subspan(2 * n, n) : weights,
                                     grads, state, adam_options,
                                     bf16 ? HalfCopy(compute) : HalfCopy()));
      LOOM_RETURN_IF_ERROR(state.ReadMoments(all.subspan(0, n), all.subspan(n, n)));
      LOOM_RETURN_IF_ERROR(WriteStored(bucket, all));
    }
    if (bucket.params_on_disk) {
      LOOM_RETURN_IF_ERROR(WriteParamShard(
          bucket, bf16 ? absl::MakeConstSpan(reinterpret_cast<const std::byte*>(compute.data()),
                                             compute.size() * sizeof(BFloat16))
                       : absl::MakeConstSpan(reinterpret_cast<const std::byte*>(weights.data()),
                                             weights.size() * sizeof(float))));
    }
    std::fill(bucket.grad_f32.begin(), bucket.grad_f32.end(), 0.0f);
    std::fill(bucket.grad_bf16.begin(), bucket.grad_bf16.end(), BFloat16());
    bucket.grad_stored = false;
    // Stages 1 and 2: every rank's new block into the whole copy, while the next
    // bucket steps.
    if (options_.stage < 3 && !bucket.replicated) GatherWhole(bucket);
    return absl::OkStatus();
  };
  for (const auto& bucket : buckets_) LOOM_RETURN_IF_ERROR(step_one(*bucket));
  LOOM_RETURN_IF_ERROR(step_one(*persistent_));
  if (bf16) {
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(persistent_->compute, absl::MakeSpan(persistent_view_)));
  }
  LOOM_RETURN_IF_ERROR(worker_->WaitAll(Deadline()));
  passes_since_step_ = 0;
  grads_reduced_ = false;
  ++stats_.steps;
  return absl::OkStatus();
}

absl::Status Zero3Engine::CheckShardSpans(absl::string_view what, size_t sharded,
                                          size_t persistent) const {
  if (static_cast<int64_t>(sharded) != partition_.ShardNumel() ||
      static_cast<int64_t>(persistent) != partition_.PersistentNumel()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Who(), ": ", what, " got ", sharded, " sharded and ", persistent,
        " persistent elements; the partition has ", partition_.ShardNumel(), " and ",
        partition_.PersistentNumel()));
  }
  return absl::OkStatus();
}

absl::Status Zero3Engine::ReadShard(absl::Span<float> sharded, absl::Span<float> persistent) const {
  LOOM_RETURN_IF_ERROR(CheckShardSpans("ReadShard", sharded.size(), persistent.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketState& bucket = *buckets_[b];
    auto out = sharded.begin() + partition_.ShardOffset(static_cast<int>(b));
    if (bucket.master_on_disk) {  // the master is on disk
      LOOM_ASSIGN_OR_RETURN(const std::vector<float> stored, ReadStored(bucket));
      std::copy_n(stored.begin() + 2 * bucket.numel, bucket.numel, out);
    } else if (bucket.weights.empty() && bucket.params_on_disk) {  // f32 on param_disk
      LOOM_ASSIGN_OR_RETURN(const std::vector<float> weights, ReadParamWeights(bucket));
      std::copy(weights.begin(), weights.end(), out);
    } else {
      std::copy(bucket.weights.begin(), bucket.weights.end(), out);
    }
  }
  std::copy(persistent_->weights.begin(), persistent_->weights.end(), persistent.begin());
  return absl::OkStatus();
}

absl::Status Zero3Engine::WriteShard(absl::Span<const float> sharded,
                                     absl::Span<const float> persistent) {
  LOOM_RETURN_IF_ERROR(CheckShardSpans("WriteShard", sharded.size(), persistent.size()));
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": WriteShard inside a pass"));
  }
  LOOM_RETURN_IF_ERROR(worker_->WaitAll(Deadline()));
  DropKept();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketState& bucket = *buckets_[b];
    const size_t n = static_cast<size_t>(bucket.numel);
    const absl::Span<const float> in =
        sharded.subspan(static_cast<size_t>(partition_.ShardOffset(static_cast<int>(b))), n);
    if (bucket.master_on_disk) {  // the master is on disk
      LOOM_ASSIGN_OR_RETURN(std::vector<float> stored, ReadStored(bucket));
      std::copy(in.begin(), in.end(), stored.begin() + 2 * n);
      LOOM_RETURN_IF_ERROR(WriteStored(bucket, stored));
    } else if (!bucket.weights.empty()) {
      std::copy(in.begin(), in.end(), bucket.weights.begin());
    }
    if (bucket.params_on_disk) {  // the compute-dtype shard is on param_disk
      std::vector<BFloat16> rounded;
      absl::Span<const std::byte> shard = absl::MakeConstSpan(
          reinterpret_cast<const std::byte*>(in.data()), in.size() * sizeof(float));
      if (options_.compute_dtype == DType::kBF16) {
        rounded.resize(n);
        LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(in, absl::MakeSpan(rounded)));
        shard = absl::MakeConstSpan(reinterpret_cast<const std::byte*>(rounded.data()),
                                    rounded.size() * sizeof(BFloat16));
      }
      LOOM_RETURN_IF_ERROR(WriteParamShard(bucket, shard));
    } else if (!bucket.compute.empty()) {
      LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(in, bucket.compute));
    }
  }
  std::copy(persistent.begin(), persistent.end(), persistent_->weights.begin());
  if (options_.compute_dtype == DType::kBF16) {
    LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(persistent_->weights, persistent_->compute));
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(persistent_->compute, absl::MakeSpan(persistent_view_)));
  }
  whole_stale_ = options_.stage < 3;
  return absl::OkStatus();
}

absl::Status Zero3Engine::ReadMoments(absl::Span<float> m_sharded, absl::Span<float> m_persistent,
                                      absl::Span<float> v_sharded,
                                      absl::Span<float> v_persistent) const {
  LOOM_RETURN_IF_ERROR(CheckShardSpans("ReadMoments (m)", m_sharded.size(), m_persistent.size()));
  LOOM_RETURN_IF_ERROR(CheckShardSpans("ReadMoments (v)", v_sharded.size(), v_persistent.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const BucketState& bucket = *buckets_[b];
    const size_t offset = static_cast<size_t>(partition_.ShardOffset(static_cast<int>(b)));
    const size_t n = static_cast<size_t>(bucket.numel);
    if (bucket.adam.has_value()) {
      LOOM_RETURN_IF_ERROR(
          bucket.adam->ReadMoments(m_sharded.subspan(offset, n), v_sharded.subspan(offset, n)));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(const std::vector<float> stored, ReadStored(bucket));
    std::copy_n(stored.begin(), n, m_sharded.begin() + offset);
    std::copy_n(stored.begin() + n, n, v_sharded.begin() + offset);
  }
  return persistent_->adam->ReadMoments(m_persistent, v_persistent);
}

absl::Status Zero3Engine::WriteMoments(absl::Span<const float> m_sharded,
                                       absl::Span<const float> m_persistent,
                                       absl::Span<const float> v_sharded,
                                       absl::Span<const float> v_persistent) {
  LOOM_RETURN_IF_ERROR(CheckShardSpans("WriteMoments (m)", m_sharded.size(), m_persistent.size()));
  LOOM_RETURN_IF_ERROR(CheckShardSpans("WriteMoments (v)", v_sharded.size(), v_persistent.size()));
  for (size_t b = 0; b < buckets_.size(); ++b) {
    BucketState& bucket = *buckets_[b];
    const size_t offset = static_cast<size_t>(partition_.ShardOffset(static_cast<int>(b)));
    const size_t n = static_cast<size_t>(bucket.numel);
    if (bucket.adam.has_value()) {
      LOOM_RETURN_IF_ERROR(
          bucket.adam->WriteMoments(m_sharded.subspan(offset, n), v_sharded.subspan(offset, n)));
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<float> stored, ReadStored(bucket));
    std::copy_n(m_sharded.begin() + offset, n, stored.begin());
    std::copy_n(v_sharded.begin() + offset, n, stored.begin() + n);
    LOOM_RETURN_IF_ERROR(WriteStored(bucket, stored));
  }
  return persistent_->adam->WriteMoments(m_persistent, v_persistent);
}

absl::StatusOr<std::vector<float>> Zero3Engine::GatherAll() {
  if (pass_ != Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": GatherAll inside a pass"));
  }
  SubmitAgreement(zero3_internal::SyncPoint::kGatherAll, Zero3Pass::kNone);
  std::vector<float> flat(static_cast<size_t>(partition_.TotalNumel()));
  std::vector<float> whole(static_cast<size_t>(partition_.MaxBucketNumel()));
  for (int b = 0; b < partition_.num_buckets(); ++b) {
    BucketState& bucket = *buckets_[b];
    Communicator* dp = dp_;
    absl::Span<float> out = absl::MakeSpan(whole).first(static_cast<size_t>(bucket.padded_numel));
    std::vector<float> stored;  // the master, when it is on disk
    absl::Span<const float> in = bucket.weights;
    if (bucket.master_on_disk) {
      LOOM_ASSIGN_OR_RETURN(stored, ReadStored(bucket));
      in = absl::MakeConstSpan(stored).subspan(static_cast<size_t>(2 * bucket.numel));
    } else if (bucket.weights.empty() && bucket.params_on_disk) {  // f32 on param_disk
      LOOM_ASSIGN_OR_RETURN(stored, ReadParamWeights(bucket));
      in = stored;
    }
    const CommWorker::Ticket ticket = worker_->Submit([dp, in, out]() {
      return dp->AllGather(ConstBufferView::Of(in), BufferView::Of(out));
    });
    LOOM_RETURN_IF_ERROR(worker_->Wait(ticket, Deadline()));
    for (const int p : partition_.bucket(b).params) {
      const ParamSlot& slot = partition_.slot(p);
      std::copy_n(whole.begin() + slot.offset, slot.numel,
                  flat.begin() + partition_.FlatOffset(p));
    }
  }
  for (int p = 0; p < partition_.num_params(); ++p) {
    const ParamSlot& slot = partition_.slot(p);
    if (!slot.persistent) continue;
    std::copy_n(persistent_->weights.begin() + slot.offset, slot.numel,
                flat.begin() + partition_.FlatOffset(p));
  }
  return flat;
}

int Zero3Engine::gather_buffers() const { return static_cast<int>(shared_->pool.size()); }

int Zero3Engine::grad_buffers() const {
  // Stage 1 adds a bucket's buffer into its whole gradient as the pass leaves it
  // and gives it back at once: one is ever live.
  const int bound = options_.stage == 1 ? 1 : options_.max_grad_buffers;
  return std::min(bound, partition_.num_buckets());
}

Zero3Stats Zero3Engine::Stats() const {
  Zero3Stats stats = stats_;
  stats.model_state_bytes = 0;
  stats.host_state_bytes = 0;
  for (const auto& bucket : buckets_) stats.model_state_bytes += bucket->StateBytes();
  stats.persistent_state_bytes = persistent_->StateBytes();
  for (const auto& bucket : buckets_) {
    if (options_.optimizer_disk != nullptr) stats.disk_state_bytes += StoredNumel(*bucket) * 4;
    if (bucket->params_on_disk) stats.disk_state_bytes += ParamShardBytes(*bucket);
    if (bucket->grads_on_disk) stats.disk_state_bytes += ParamShardBytes(*bucket);
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
