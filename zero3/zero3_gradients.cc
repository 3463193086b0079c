// Zero3Engine (zero3_engine.h), part 3 of 4: the gradient reducer. Gradients
// arrive per parameter into a whole-bucket buffer (recycled communication memory,
// at most max_grad_buffers live); when the pass releases a bucket its buffer is
// reduce-scattered (averaged over dp) into this rank's shard on the communication
// thread, overlapping the rest of the backward (stage 1 adds it into its whole
// gradient and reduces once, in ReduceGradients); the persistent block is
// all-reduced at EndPass.
#include "zero3/zero3_engine.h"

#include <algorithm>
#include <cmath>
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
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "zero3/internal/agreement.h"
#include "zero3/internal/bucket_state.h"
#include "zero3/internal/disk_shards.h"

namespace loom {

using zero3_internal::AddInto;
using zero3_internal::BucketState;
using zero3_internal::EngineShared;

absl::Status Zero3Engine::AddIntoStoredGrad(absl::Span<const float> average, BucketState& bucket) {
  std::vector<float>& f32 = shared_->grad_staged_f32;
  std::vector<BFloat16>& bf16 = shared_->grad_staged_bf16;
  LOOM_RETURN_IF_ERROR(disk_->ReadGrads(bucket.index, bucket.numel, bucket.grad_stored, f32, bf16));
  AddInto(average, f32, bf16);
  LOOM_RETURN_IF_ERROR(disk_->WriteGrads(bucket.index, f32, bf16));
  bucket.grad_stored = true;
  return absl::OkStatus();
}

// EnqueueReduce submits the reduce-scatter (average over dp) of the bucket's
// gradients into this rank's gradient shard; the whole-bucket buffer is freed by
// the job once reduced. Stage 1 only adds them into its whole-bucket gradient,
// which Step reduces.
absl::Status Zero3Engine::EnqueueReduce(BucketState& bucket) {
  bucket.reduced = true;
  if (!bucket.grad_buffer.empty()) ZeroUnwritten(bucket);
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
  if (bucket.grad_buffer.empty()) {
    LOOM_RETURN_IF_ERROR(TakeGradBuffer(bucket));
    ZeroUnwritten(bucket);
  }
  Communicator* dp = dp_;
  BucketState* state = &bucket;
  EngineShared* shared = shared_.get();
  reduce_tickets_.push_back(worker_->Submit([this, dp, state, shared]() -> absl::Status {
    const int64_t held = static_cast<int64_t>(state->grad_buffer.size()) * 4;
    // The f32 gradients are reduced as they are: in bf16 the communicator would
    // widen them to f32 on the wire anyway (it rounds once, at the end), so
    // rounding them first would only add a rounding. The average is rounded once,
    // into the bf16 shard.
    // In place: the average lands in this rank's block of the bucket's buffer (no
    // shard-sized vector per bucket and step: above glibc's mmap threshold each
    // one was fresh pages, zeroed, faulted in and unmapped again).
    const size_t shard = static_cast<size_t>(state->numel);
    const absl::Span<float> mine =
        state->grad_buffer.subspan(static_cast<size_t>(dp->rank()) * shard, shard);
    absl::Status status =
        dp->ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(state->grad_buffer)),
                          BufferView::Of(mine), ReduceOp::kAvg);
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
  // Not zeroed: AddGrad writes each parameter's first gradient, ZeroUnwritten the rest.
  for (const int param : partition_.bucket(bucket.index).params) {
    grad_written_[static_cast<size_t>(param)] = 0;
  }
  CountGradBuffer(bucket.padded_numel * 4);
  return absl::OkStatus();
}

void Zero3Engine::CountGradBuffer(int64_t bytes) {
  const int64_t live = shared_->live_grad_bytes.fetch_add(bytes) + bytes;
  int64_t peak = shared_->peak_grad_bytes.load();
  while (live > peak && !shared_->peak_grad_bytes.compare_exchange_weak(peak, live)) {
  }
}

absl::Status Zero3Engine::AddGrad(int param, absl::Span<const float> grad) {
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> dst, GradientRange("AddGrad", param, grad.size()));
  const ParamSlot& slot = partition_.slot(param);
  // On the rank's threads (core/parallel_for.h); each element is one addition, so
  // the bits do not depend on the split. A bucket's buffer is not zeroed when taken:
  // a parameter's first gradient of the pass is written, not added to the buffer,
  // as g + 0 (0 + g's bits, -0 included), and what no gradient wrote is zeroed
  // before the reduce (ZeroUnwritten).
  char& written = grad_written_[static_cast<size_t>(param)];
  const bool first = !slot.persistent && !written;
  written = 1;
  // Raw pointers: Debian's Abseil is hardened, so Span's operator[] checks every
  // index and keeps the loop scalar.
  float* const into = dst.data();
  const float* const g = grad.data();
  ParallelForEach(static_cast<int64_t>(grad.size()), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
    if (first) {
      for (int64_t i = begin; i < end; ++i) into[i] = g[i] + 0.0f;
    } else {
      for (int64_t i = begin; i < end; ++i) into[i] += g[i];
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<float>> Zero3Engine::GradientSlot(int param) {
  LOOM_RETURN_IF_ERROR(CheckParam("GradientSlot", param));
  const ParamSlot& slot = partition_.slot(param);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> dst,
                        GradientRange("GradientSlot", param, static_cast<size_t>(slot.numel)));
  // The persistent block is zeroed per pass and added into; a second gradient of
  // the pass is added (AddGrad).
  char& written = grad_written_[static_cast<size_t>(param)];
  if (slot.persistent || written) return absl::Span<float>();
  written = 1;
  return dst;
}

absl::StatusOr<absl::Span<float>> Zero3Engine::GradientRange(const char* call, int param,
                                                             size_t numel) {
  LOOM_RETURN_IF_ERROR(CheckParam(call, param));
  const ParamSlot& slot = partition_.slot(param);
  const std::string what = absl::StrCat(call, "(", param, " \"", slot.name, "\")");
  if (!Reducing()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Who(), ": ", what, " outside a backward pass"));
  }
  if (static_cast<int64_t>(numel) != slot.numel) {
    return absl::InvalidArgumentError(absl::StrCat(Who(), ": ", what, " has ", numel,
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
  return bucket.grad_buffer.subspan(static_cast<size_t>(slot.offset),
                                    static_cast<size_t>(slot.numel));
}

void Zero3Engine::ZeroUnwritten(BucketState& bucket) {
  float* const buffer = bucket.grad_buffer.data();
  int64_t covered = 0;  // elements before it are written or zeroed
  for (const int param : partition_.bucket(bucket.index).params) {
    const ParamSlot& slot = partition_.slot(param);
    if (slot.offset > covered) std::fill(buffer + covered, buffer + slot.offset, 0.0f);
    if (!grad_written_[static_cast<size_t>(param)]) {
      std::fill(buffer + slot.offset, buffer + slot.offset + slot.numel, 0.0f);
    }
    covered = std::max(covered, slot.offset + slot.numel);
  }
  std::fill(buffer + covered, buffer + bucket.padded_numel, 0.0f);
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
        LOOM_RETURN_IF_ERROR(disk_->ReadGrads(bucket.index, bucket.numel, bucket.grad_stored, loaded_f32, loaded_bf16));
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

}  // namespace loom
