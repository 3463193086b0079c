// Zero3Engine (zero3_engine.h), part 4 of 4: the optimizer step on this rank's
// shard, bucket by bucket, with each bucket's state where its home keeps it
// (memory, host memory on AdamW threads, or NVMe through DiskShards, read one
// bucket ahead on a disk thread that lives as long as the engine), and the reads
// and writes of the sharded state (checkpoints).
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
#include "offload/adamw/cpu_adamw.h"

namespace loom {

using zero3_internal::BucketState;

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
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  std::vector<float> widened;  // bf16: one bucket's gradient shard in f32
  // NVMe: the first bucket's stored state is read on the disk thread (while stage
  // 1 reduces, when the caller left that to Step); StepBucket reads each next one
  // while it steps the last.
  if (disk_worker_ != nullptr && !buckets_.empty()) ReadStateAhead(0);
  LOOM_RETURN_IF_ERROR(ReduceGradients());
  for (const auto& bucket : buckets_) LOOM_RETURN_IF_ERROR(StepBucket(*bucket, averaged, widened));
  LOOM_RETURN_IF_ERROR(StepBucket(*persistent_, averaged, widened));
  if (bf16) {
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(persistent_->compute, absl::MakeSpan(persistent_view_)));
  }
  LOOM_RETURN_IF_ERROR(worker_->WaitAll(Deadline()));
  passes_since_step_ = 0;
  grads_reduced_ = false;
  ++stats_.steps;
  return absl::OkStatus();
}

// StepBucket: one bucket's (or the persistent block's) AdamW step, with its
// state wherever its homes keep it.
absl::Status Zero3Engine::StepBucket(BucketState& bucket, const AdamWHyper& averaged,
                                     std::vector<float>& widened) {
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  AdamWOptions adam_options;
  adam_options.threads = options_.offload_optimizer ? options_.adamw_threads : 1;
  const size_t start = static_cast<size_t>(ReducedShardStart(bucket));
  const size_t n = static_cast<size_t>(bucket.numel);
  // grad_disk: the shard comes in for the step and is zero after it.
  std::vector<float> stored_f32;
  std::vector<BFloat16> stored_bf16;
  if (bucket.grads_on_disk) LOOM_RETURN_IF_ERROR(disk_->ReadGrads(bucket.index, bucket.numel, bucket.grad_stored, stored_f32, stored_bf16));
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
      LOOM_ASSIGN_OR_RETURN(disk_weights, disk_->ReadParamWeights(bucket.index, bucket.numel));
      weights = absl::MakeSpan(disk_weights);
    }
  }
  if (bucket.adam.has_value()) {
    LOOM_RETURN_IF_ERROR(AdamWStep(averaged, weights, grads, *bucket.adam, adam_options,
                                   bf16 ? HalfCopy(compute) : HalfCopy()));
  } else {
    // NVMe: this bucket's state, read ahead into its staging buffer while the
    // previous bucket stepped; the next one's read starts now, into the other.
    LOOM_RETURN_IF_ERROR(disk_worker_->Wait(nvme_read_, Deadline()));
    std::vector<float>& stored = nvme_stage_[static_cast<size_t>(bucket.index % 2)];
    if (bucket.index + 1 < partition_.num_buckets()) ReadStateAhead(bucket.index + 1);
    absl::Span<float> all = absl::MakeSpan(stored);
    AdamWState& state = *nvme_adam_;
    LOOM_RETURN_IF_ERROR(state.Resize(bucket.numel));
    LOOM_RETURN_IF_ERROR(state.WriteMoments(all.subspan(0, n), all.subspan(n, n)));
    LOOM_RETURN_IF_ERROR(AdamWStep(averaged, bf16 ? all.subspan(2 * n, n) : weights,
                                   grads, state, adam_options,
                                   bf16 ? HalfCopy(compute) : HalfCopy()));
    LOOM_RETURN_IF_ERROR(state.ReadMoments(all.subspan(0, n), all.subspan(n, n)));
    LOOM_RETURN_IF_ERROR(disk_->WriteOptimizer(bucket.index, all));
  }
  if (bucket.params_on_disk) {
    LOOM_RETURN_IF_ERROR(disk_->WriteParams(
        bucket.index, bf16 ? absl::MakeConstSpan(reinterpret_cast<const std::byte*>(compute.data()),
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
}

// ReadStateAhead submits the read of bucket b's stored optimizer state into its
// staging buffer (b % 2) on the disk thread; within the capacity made at Init.
void Zero3Engine::ReadStateAhead(int b) {
  const BucketState& bucket = *buckets_[static_cast<size_t>(b)];
  std::vector<float>* into = &nvme_stage_[static_cast<size_t>(b % 2)];
  into->resize(static_cast<size_t>(disk_->OptimizerNumel(bucket.numel)));
  zero3_internal::DiskShards* disk = disk_.get();
  nvme_read_ = disk_worker_->Submit(
      [disk, b, into]() { return disk->ReadOptimizer(b, absl::MakeSpan(*into)); });
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
      LOOM_ASSIGN_OR_RETURN(const std::vector<float> stored, disk_->ReadOptimizer(bucket.index, bucket.numel));
      std::copy_n(stored.begin() + 2 * bucket.numel, bucket.numel, out);
    } else if (bucket.weights.empty() && bucket.params_on_disk) {  // f32 on param_disk
      LOOM_ASSIGN_OR_RETURN(const std::vector<float> weights, disk_->ReadParamWeights(bucket.index, bucket.numel));
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
      LOOM_ASSIGN_OR_RETURN(std::vector<float> stored, disk_->ReadOptimizer(bucket.index, bucket.numel));
      std::copy(in.begin(), in.end(), stored.begin() + 2 * n);
      LOOM_RETURN_IF_ERROR(disk_->WriteOptimizer(bucket.index, stored));
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
      LOOM_RETURN_IF_ERROR(disk_->WriteParams(bucket.index, shard));
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
    LOOM_ASSIGN_OR_RETURN(const std::vector<float> stored, disk_->ReadOptimizer(bucket.index, bucket.numel));
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
    LOOM_ASSIGN_OR_RETURN(std::vector<float> stored, disk_->ReadOptimizer(bucket.index, bucket.numel));
    std::copy_n(m_sharded.begin() + offset, n, stored.begin());
    std::copy_n(v_sharded.begin() + offset, n, stored.begin() + n);
    LOOM_RETURN_IF_ERROR(disk_->WriteOptimizer(bucket.index, stored));
  }
  return persistent_->adam->WriteMoments(m_persistent, v_persistent);
}

}  // namespace loom
