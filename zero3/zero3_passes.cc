// Zero3Engine (zero3_engine.h), part 2 of 4: the gather/release coordinator. A
// pass walks the buckets in its order (forward 0..B-1, backward B-1..0), gathers
// a window of them ahead of use on the communication thread (prefetch_depth,
// max_live_gathered_bytes), releases each as the pass moves past it or, under a
// lease, when the lease ends, keeps the last window for the next pass, and checks
// with the other dp ranks that they stand at the same place.
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
using zero3_internal::GatherBuffer;

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
  ++pass_serial_;
  position_ = 0;
  next_gather_ = 0;
  pass_error_ = absl::OkStatus();
  TakeOverKept();
  for (const auto& bucket : buckets_) {
    bucket->reduced = false;
    bucket->leases = 0;
    bucket->release_deferred = false;
    if (bucket->buffer < 0) bucket->gather_waited = false;
  }
  // The persistent block's buffer stays (allocated once): zeroed for the pass.
  std::fill(persistent_->grad_buffer.begin(), persistent_->grad_buffer.end(), 0.0f);
  EnqueueGathers();
  return absl::OkStatus();
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
    if (LendsShard(bucket)) {
      // Nothing to gather: Acquire lends the shard itself.
      bucket.gather_waited = true;
      ++next_gather_;
      continue;
    }
    const bool own_shard = bf16 && gather && WidensOwnShard(bucket);
    const bool on_demand = WidensOnDemand(bucket);
    if (bf16) {
      // A shard from disk is widened whole below; otherwise each parameter is
      // widened by its first Acquire (Acquire waits for this gather first).
      for (const int param : partition_.bucket(bucket.index).params) {
        widened_[static_cast<size_t>(param)] = on_demand ? 0 : 1;
      }
    }
    if (bf16 && !on_demand) stats_.widened_numel += bucket.padded_numel;
    if (on_demand && (!gather || own_shard)) {
      // Nothing to move: the bf16 values are in memory already.
      bucket.gather_waited = true;
      ++next_gather_;
      continue;
    }
    bucket.gather_ticket = worker_->Submit(
        [this, dp, state, &buffer, bf16, gather, padded, own_shard, on_demand]() -> absl::Status {
          if (!gather) {
            return ConvertBF16ToF32(absl::MakeConstSpan(state->whole_bf16),
                                    absl::MakeSpan(buffer.widened).first(padded));
          }
          // param_disk: the shard comes from disk first, here on the communication
          // thread, so a prefetched bucket is read ahead of use as well.
          absl::Span<const std::byte> shard;
          if (state->params_on_disk) {
            const size_t bytes = static_cast<size_t>(disk_->ShardBytes(state->numel));
            const absl::Span<std::byte> into = absl::MakeSpan(shared_->staged).first(bytes);
            LOOM_RETURN_IF_ERROR(disk_->ReadParams(state->index, into));
            shard = into;
          }
          if (bf16) {
            const absl::Span<const BFloat16> in =
                state->params_on_disk
                    ? absl::MakeConstSpan(reinterpret_cast<const BFloat16*>(shard.data()),
                                          shard.size() / sizeof(BFloat16))
                    : absl::MakeConstSpan(state->compute);
            if (own_shard) {
              // One rank: its shard is the bucket; widened straight from it.
              return ConvertBF16ToF32(in.first(padded),
                                      absl::MakeSpan(buffer.widened).first(padded));
            }
            const absl::Span<BFloat16> gathered = absl::MakeSpan(buffer.bf16).first(padded);
            LOOM_RETURN_IF_ERROR(
                dp->AllGather(ConstBufferView::Of(in), BufferView::Of(gathered)));
            if (on_demand) return absl::OkStatus();
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

// ReleaseBefore moves the pass to `position`: each bucket passed is gathered (so
// every rank makes the same calls) and released (FinishRelease), or, while a
// lease holds it, marked for release when the last lease ends.
absl::Status Zero3Engine::ReleaseBefore(int position) {
  while (position_ < position) {
    EnqueueGathers();
    BucketState& bucket = *buckets_[BucketAt(position_)];
    if (pass_ != Zero3Pass::kGradients && UsesBuffers()) {
      if (bucket.buffer < 0) {
        // Only leases held past their turn keep the pool from the window.
        return RecordError(NoBufferError(bucket));
      }
      const absl::Status gathered =
          bucket.gather_waited ? absl::OkStatus()
                               : WaitTimed(bucket.gather_ticket, &stats_.gather_wait_seconds);
      bucket.gather_waited = true;
      if (!gathered.ok()) {
        FreeBuffer(bucket);
        return RecordError(gathered);
      }
    }
    if (bucket.leases > 0) {
      // Leased: the last lease to end releases it (ReleaseUnit).
      bucket.release_deferred = true;
    } else {
      LOOM_RETURN_IF_ERROR(FinishRelease(bucket, position_, absl::OkStatus()));
    }
    ++position_;
  }
  EnqueueGathers();
  return absl::OkStatus();
}

absl::Status Zero3Engine::FinishRelease(BucketState& bucket, int position,
                                        const absl::Status& gathered) {
  if (pass_ != Zero3Pass::kGradients && UsesBuffers() && bucket.buffer >= 0) {
    // The pass's last window stays gathered for the next pass (TakeOverKept).
    // Its buffers are never needed again in this pass: the positions after it
    // need at most the pool less the kept ones, unless leases kept past their
    // turn hold buffers too; then nothing is kept.
    const int buckets = partition_.num_buckets();
    bool leases_hold_buffers = false;
    for (const auto& other : buckets_) {
      leases_hold_buffers |= other.get() != &bucket && other->release_deferred;
    }
    if (gathered.ok() && pass_error_.ok() && !leases_hold_buffers &&
        position >= buckets - std::min(slots_, buckets)) {
      bucket.kept = true;
    } else {
      FreeBuffer(bucket);
    }
  }
  bucket.release_deferred = false;
  if (Reducing()) return RecordError(EnqueueReduce(bucket));
  return absl::OkStatus();
}

// NoBufferError: a bucket's turn came with every pool buffer held, which only
// leases kept past their turn can do.
absl::Status Zero3Engine::NoBufferError(const BucketState& bucket) const {
  std::string leased;
  for (const auto& other : buckets_) {
    if (other->leases > 0 && other.get() != &bucket) {
      absl::StrAppend(&leased, leased.empty() ? "" : ", ", other->index, " (",
                      bucket_names_[static_cast<size_t>(other->index)], ")");
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      Who(), ": bucket ", bucket.index, " (", bucket_names_[static_cast<size_t>(bucket.index)],
      ") has no gather buffer: the pool's ", shared_->pool.size(),
      " are held by leases on bucket(s) ", leased,
      " past their turn; end those leases first or raise prefetch_depth / "
      "max_live_gathered_bytes"));
}

absl::StatusOr<int> Zero3Engine::BucketOfUnit(const ParameterUnit& unit) const {
  if (unit.first < 0 || unit.end > partition_.num_params() || unit.end <= unit.first) {
    return absl::InvalidArgumentError(absl::StrCat(
        Who(), ": unit \"", unit.name, "\" holds parameters [", unit.first, ", ", unit.end,
        "); the model has ", partition_.num_params()));
  }
  const ParamSlot& first = partition_.slot(unit.first);
  for (int p = unit.first + 1; p < unit.end; ++p) {
    const ParamSlot& slot = partition_.slot(p);
    if (slot.persistent != first.persistent || slot.bucket != first.bucket) {
      return absl::InvalidArgumentError(absl::StrCat(
          Who(), ": unit \"", unit.name, "\" is not one of the partition's units: parameters ",
          unit.first, " and ", p, " lie in different buckets"));
    }
  }
  return first.persistent ? -1 : first.bucket;
}

absl::StatusOr<int64_t> Zero3Engine::HoldUnit(const ParameterUnit& unit) {
  LOOM_ASSIGN_OR_RETURN(const int b, BucketOfUnit(unit));
  const std::string what = absl::StrCat("LeaseUnit(\"", unit.name, "\")");
  if (pass_ == Zero3Pass::kNone || pass_ == Zero3Pass::kGradients) {
    return absl::FailedPreconditionError(absl::StrCat(
        Who(), ": ", what, pass_ == Zero3Pass::kNone ? " outside a pass"
                                                    : " in a kGradients pass, which gathers nothing"));
  }
  if (b < 0) return pass_serial_;  // persistent: resident on every rank
  BucketState& bucket = *buckets_[static_cast<size_t>(b)];
  MarkUsed(b);
  const int position = PositionOf(b);
  if (position < position_) {
    if (bucket.leases == 0) {
      return RecordError(absl::FailedPreconditionError(absl::StrCat(
          Who(), ": ", what, ": its bucket ", b, " was already released in this ",
          pass_ == Zero3Pass::kForward ? "forward" : "backward",
          " pass (no lease held it when the pass moved past; lease a unit used twice for as "
          "long as it is used)")));
    }
    ++bucket.leases;  // used again while held: tied weights
    return pass_serial_;
  }
  LOOM_RETURN_IF_ERROR(ReleaseBefore(position));
  if (UsesBuffers()) {
    if (bucket.buffer < 0) return RecordError(NoBufferError(bucket));
    if (!bucket.gather_waited) {
      LOOM_RETURN_IF_ERROR(
          RecordError(WaitTimed(bucket.gather_ticket, &stats_.gather_wait_seconds)));
      bucket.gather_waited = true;
    }
  }
  ++bucket.leases;
  return pass_serial_;
}

void Zero3Engine::ReleaseUnit(const ParameterUnit& unit, int64_t ticket) {
  // A lease of an earlier pass: EndPass released its bucket already.
  if (ticket != pass_serial_ || pass_ == Zero3Pass::kNone) return;
  absl::StatusOr<int> b = BucketOfUnit(unit);
  if (!b.ok() || *b < 0) return;
  BucketState& bucket = *buckets_[static_cast<size_t>(*b)];
  if (bucket.leases == 0) return;
  if (--bucket.leases > 0 || !bucket.release_deferred) return;
  (void)FinishRelease(bucket, PositionOf(*b), absl::OkStatus());
  EnqueueGathers();  // its buffer may be free again
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

absl::StatusOr<absl::Span<const float>> Zero3Engine::Acquire(int param) {
  return AcquireChecked(param, /*widen=*/true);
}

absl::StatusOr<absl::Span<const float>> Zero3Engine::AcquireChecked(int param, bool widen) {
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
  if (position < position_ && buckets_[slot.bucket]->leases == 0) {
    return RecordError(absl::FailedPreconditionError(absl::StrCat(
        Who(), ": ", what, ": its bucket ", slot.bucket, " was already released in this ",
        pass_ == Zero3Pass::kForward ? "forward" : "backward",
        " pass (parameters are used in pass order: forward in the partition's order, backward "
        "in reverse; a unit used again later in the pass is held by a lease)")));
  }
  LOOM_RETURN_IF_ERROR(ReleaseBefore(position));
  BucketState& bucket = *buckets_[slot.bucket];
  if (UsesBuffers() && bucket.buffer < 0) return RecordError(NoBufferError(bucket));
  if (!UsesBuffers()) {
    return absl::MakeConstSpan(bucket.whole_f32).subspan(static_cast<size_t>(slot.offset),
                                                         static_cast<size_t>(slot.numel));
  }
  if (!bucket.gather_waited) {
    LOOM_RETURN_IF_ERROR(
        RecordError(WaitTimed(bucket.gather_ticket, &stats_.gather_wait_seconds)));
    bucket.gather_waited = true;
  }
  GatherBuffer& buffer = shared_->pool[bucket.buffer];
  if (widen && options_.compute_dtype == DType::kBF16 && !widened_[static_cast<size_t>(param)]) {
    const absl::StatusOr<absl::Span<const BFloat16>> whole = Bf16Values(bucket, param);
    if (!whole.ok()) return RecordError(whole.status());
    const size_t offset = static_cast<size_t>(slot.offset);
    const size_t numel = static_cast<size_t>(slot.numel);
    LOOM_RETURN_IF_ERROR(RecordError(ConvertBF16ToF32(
        whole->subspan(offset, numel), absl::MakeSpan(buffer.widened).subspan(offset, numel))));
    widened_[static_cast<size_t>(param)] = 1;
    stats_.widened_numel += slot.numel;
  }
  // One rank lends its shard (LendsShard); otherwise the gathered (bf16: widened) copy.
  const float* base = LendsShard(bucket)                         ? bucket.weights.data()
                      : options_.compute_dtype == DType::kBF16 ? buffer.widened.data()
                                                               : buffer.f32.data();
  return absl::MakeConstSpan(base + slot.offset, static_cast<size_t>(slot.numel));
}

absl::StatusOr<absl::Span<const BFloat16>> Zero3Engine::Bf16Values(const BucketState& bucket,
                                                                   int param) const {
  const ParamSlot& slot = partition_.slot(param);
  absl::Span<const BFloat16> whole;
  if (options_.stage < 3) {
    whole = bucket.whole_bf16;
  } else if (WidensOwnShard(bucket)) {
    // One rank: its own shard is the whole bucket (no all-gather).
    if (bucket.params_on_disk) {
      return absl::UnimplementedError(absl::StrCat(
          Who(), ": AcquireBf16(", param, " \"", slot.name,
          "\"): its shard was read from disk into a buffer the next bucket reuses"));
    }
    whole = bucket.compute;
  } else {
    whole = shared_->pool[bucket.buffer].bf16;  // where the all-gather landed
  }
  const size_t end = static_cast<size_t>(slot.offset + slot.numel);
  if (whole.size() < end) {
    return absl::InternalError(absl::StrCat(Who(), ": AcquireBf16(", param,
                                            "): the bf16 copy holds ", whole.size(),
                                            " values, the parameter ends at ", end));
  }
  return whole;
}

absl::StatusOr<absl::Span<const BFloat16>> Zero3Engine::AcquireBf16(int param) {
  // The same checks and waits as Acquire, without the widening: a bf16 product
  // reads these values, so a projection's f32 widening is never made.
  LOOM_RETURN_IF_ERROR(AcquireChecked(param, /*widen=*/false).status());
  const ParamSlot& slot = partition_.slot(param);
  if (options_.compute_dtype != DType::kBF16) {
    return absl::UnimplementedError(absl::StrCat(Who(), ": AcquireBf16(", param, " \"",
                                                 slot.name, "\"): the engine computes in f32"));
  }
  if (slot.persistent) {
    return absl::UnimplementedError(
        absl::StrCat(Who(), ": AcquireBf16(", param, " \"", slot.name,
                     "\"): a persistent parameter is kept widened only"));
  }
  absl::StatusOr<absl::Span<const BFloat16>> whole = Bf16Values(*buckets_[slot.bucket], param);
  if (!whole.ok()) {
    return absl::IsUnimplemented(whole.status()) ? whole.status() : RecordError(whole.status());
  }
  return whole->subspan(static_cast<size_t>(slot.offset), static_cast<size_t>(slot.numel));
}

absl::Status Zero3Engine::EndPass() {
  if (pass_ == Zero3Pass::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Who(), ": EndPass outside a pass"));
  }
  absl::Status status = ReleaseBefore(partition_.num_buckets());
  // Leases still held at the end of the pass: released here, so every rank still
  // makes the same calls, and named as the caller's error.
  std::string held;
  for (const auto& bucket : buckets_) {
    if (bucket->leases == 0) continue;
    absl::StrAppend(&held, held.empty() ? "" : ", ", bucket->index, " (",
                    bucket_names_[static_cast<size_t>(bucket->index)], ")");
    bucket->leases = 0;
    if (bucket->release_deferred) {
      const absl::Status released = FinishRelease(*bucket, PositionOf(bucket->index), status);
      if (status.ok()) status = released;
    }
  }
  if (!held.empty() && status.ok()) {
    status = RecordError(absl::FailedPreconditionError(
        absl::StrCat(Who(), ": EndPass with leases still held on bucket(s) ", held)));
  }
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
      LOOM_ASSIGN_OR_RETURN(stored, disk_->ReadOptimizer(bucket.index, bucket.numel));
      in = absl::MakeConstSpan(stored).subspan(static_cast<size_t>(2 * bucket.numel));
    } else if (bucket.weights.empty() && bucket.params_on_disk) {  // f32 on param_disk
      LOOM_ASSIGN_OR_RETURN(stored, disk_->ReadParamWeights(bucket.index, bucket.numel));
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

}  // namespace loom
