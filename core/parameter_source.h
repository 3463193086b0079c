// ParameterSource: where a model's parameters live when the model does not own
// them. A model that borrows its weights (models/gpt's GptModel::UseParameterSource)
// asks the source for each parameter just before it computes with it, drops the
// view when the pass moves on, and hands its gradients back to the source, so the
// source decides what is resident: zero3's Zero3Engine all-gathers a block's
// parameters from the data-parallel shards and frees them after use (FSDP's
// reshard after forward), a plain store keeps everything, a test store records
// the calls.
//
// Calls come in passes. A pass visits the model's units (a GPT block, the
// embeddings, the head: the parameters gathered and released together) in one
// order: a forward pass in the model's parameter order, a backward pass in
// reverse. Parameters are numbered in the model's Parameters() order.
//
//   kForward    Acquire in forward order.
//   kBackward   Acquire in reverse order; AddGrad gives this pass's gradients.
//   kRegather   Acquire in reverse order; no gradients (the model keeps them and
//               hands them back in one kGradients pass at the end of the step).
//   kGradients  AddGrad only, in reverse order (a zero-bubble schedule's weight
//               pass, or the end of a step that kept its gradients).
//
// A unit is used under a lease (UnitLease, RAII): LeaseUnit holds the unit
// gathered until the lease is destroyed, even while the pass goes on to later
// units, so the order of use is explicit and a unit may be leased again while a
// lease on it is held (tied weights: the embedding table used again by the head).
// A bare Acquire holds its unit only until the pass moves past it.
//
// Example (one block of a model that borrows its weights):
//   LOOM_RETURN_IF_ERROR(source.BeginParameterPass(ParameterPass::kForward));
//   {
//     LOOM_ASSIGN_OR_RETURN(UnitLease block, source.LeaseUnit(units[1]));
//     LOOM_ASSIGN_OR_RETURN(absl::Span<const float> w, block.Get(2));
//     ...compute with w (valid while `block` is held)...
//   }  // the lease ends: the source may free the unit now
//   LOOM_RETURN_IF_ERROR(source.EndPass());
//   LOOM_RETURN_IF_ERROR(source.BeginParameterPass(ParameterPass::kBackward));
//   LOOM_ASSIGN_OR_RETURN(UnitLease block, source.LeaseUnit(units[1]));
//   LOOM_ASSIGN_OR_RETURN(w, block.Get(2));
//   LOOM_RETURN_IF_ERROR(source.AddGrad(2, dw));
//   block.Release();
//   LOOM_RETURN_IF_ERROR(source.EndPass());
//   source.Acquire(2);   // outside a pass: FailedPrecondition naming the parameter
#ifndef LOOM_CORE_PARAMETER_SOURCE_H_
#define LOOM_CORE_PARAMETER_SOURCE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {

enum class ParameterPass { kForward, kBackward, kRegather, kGradients };

// ParameterUnit: parameters [first, end) (in the model's Parameters() order) that
// the model uses together, so a source gathers, releases, offloads and keeps them
// whole or sharded as one (FSDP2's fully_shard(module)). The model declares its
// units (e.g. GptModel::Units()); a source is laid out from them, never from
// parameter names. Units cover the parameters in order, each at least one.
struct ParameterUnit {
  std::string name;  // e.g. "blocks.3", "embed", "head" (the final norm with the head)
  int first = 0;
  int end = 0;
  int size() const { return end - first; }
};

class ParameterSource;

// UnitLease: one unit held for use, until the lease is destroyed or Release()d
// (move-only). Get and GetBf16 are the source's Acquire and AcquireBf16 for the
// unit's own parameters; their views stay valid while the lease is held. A lease
// that outlives its pass does nothing when it ends.
class UnitLease {
 public:
  UnitLease() = default;
  UnitLease(UnitLease&& other) noexcept { *this = std::move(other); }
  UnitLease& operator=(UnitLease&& other) noexcept {
    if (this != &other) {
      Release();
      source_ = std::exchange(other.source_, nullptr);
      unit_ = other.unit_;
      ticket_ = other.ticket_;
    }
    return *this;
  }
  UnitLease(const UnitLease&) = delete;
  UnitLease& operator=(const UnitLease&) = delete;
  ~UnitLease() { Release(); }

  bool held() const { return source_ != nullptr; }
  const ParameterUnit& unit() const { return unit_; }
  // InvalidArgument for a parameter outside the unit, FailedPrecondition for a
  // lease no longer held; otherwise the source's Acquire / AcquireBf16.
  absl::StatusOr<absl::Span<const float>> Get(int param) const;
  absl::StatusOr<absl::Span<const BFloat16>> GetBf16(int param) const;
  // Release ends the lease now (a second call does nothing).
  inline void Release();

 private:
  friend class ParameterSource;
  UnitLease(ParameterSource* source, ParameterUnit unit, int64_t ticket)
      : source_(source), unit_(std::move(unit)), ticket_(ticket) {}
  absl::Status CheckHeld(int param) const;

  ParameterSource* source_ = nullptr;
  ParameterUnit unit_;
  int64_t ticket_ = 0;
};

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;

  // LeaseUnit holds `unit` (one of the model's units, in the pass) for use until
  // the lease ends: a source that frees units after use (zero3) keeps it gathered,
  // and in a backward pass reduces its gradients only then, even if the pass has
  // moved on to later units. FailedPrecondition outside an acquiring pass or for a
  // unit the pass already released (passed with no lease held).
  absl::StatusOr<UnitLease> LeaseUnit(const ParameterUnit& unit) {
    if (unit.first < 0 || unit.end <= unit.first) {
      return absl::InvalidArgumentError(absl::StrCat("LeaseUnit(\"", unit.name,
                                                     "\"): parameters [", unit.first, ", ",
                                                     unit.end, ") are not a unit"));
    }
    absl::StatusOr<int64_t> ticket = HoldUnit(unit);
    if (!ticket.ok()) return ticket.status();
    return UnitLease(this, unit, *ticket);
  }

  // BeginParameterPass starts a pass; FailedPrecondition inside one.
  virtual absl::Status BeginParameterPass(ParameterPass pass) = 0;
  // Acquire returns parameter `param` (f32, this rank's tensor-parallel shard,
  // row-major), valid until the pass releases its unit (moves past it, or ends).
  // FailedPrecondition outside an acquiring pass or for a unit already released.
  virtual absl::StatusOr<absl::Span<const float>> Acquire(int param) = 0;
  // AcquireBf16 returns the same parameter's bf16 compute copy where the source keeps
  // one (mixed precision: Acquire's values are this copy widened), valid as long as
  // Acquire's view, so that a bf16 product need not round the weights again. It makes
  // Acquire's checks and waits itself: a caller that only multiplies the bf16 copy
  // need not call Acquire at all (a source that widens on demand, as zero3 does,
  // then never widens that parameter). Unimplemented where the source keeps none
  // (the default): the caller then rounds Acquire's values itself.
  virtual absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param) {
    return absl::UnimplementedError(
        absl::StrCat("this parameter source keeps no bf16 copy (parameter ", param, ")"));
  }
  // AddGrad adds `grad` (the parameter's element count) to `param`'s gradient, in
  // a kBackward or kGradients pass.
  virtual absl::Status AddGrad(int param, absl::Span<const float> grad) = 0;
  // GradientSlot offers, in place of AddGrad, where `param`'s gradient lies, for a
  // caller that computes it straight there (a weight product writing its output
  // into it, with no tensor of its own and no pass adding it in): a span of the
  // parameter's element count that the caller must overwrite whole before the
  // pass moves past the parameter's unit (before the source touches a unit
  // before it in pass order, or EndPass) — the same as AddGrad(param, values),
  // with AddGrad's checks. Empty where the source has no such place (the
  // default), or the parameter already has a gradient in this pass: AddGrad then.
  virtual absl::StatusOr<absl::Span<float>> GradientSlot(int param) {
    (void)param;
    return absl::Span<float>();
  }
  // EndPass finishes the pass (its collectives, for a distributed source) and
  // returns the pass's first error.
  virtual absl::Status EndPass() = 0;

 protected:
  friend class UnitLease;
  // HoldUnit pins `unit` for a lease and returns a ticket that ReleaseUnit gets
  // back (a source tells a stale lease, from a pass that ended, by it);
  // ReleaseUnit ends that hold. The default (a source that keeps every parameter
  // resident) pins nothing.
  virtual absl::StatusOr<int64_t> HoldUnit(const ParameterUnit& unit) {
    (void)unit;
    return 0;
  }
  virtual void ReleaseUnit(const ParameterUnit& unit, int64_t ticket) {
    (void)unit;
    (void)ticket;
  }
};

inline void UnitLease::Release() {
  if (source_ == nullptr) return;
  ParameterSource* source = std::exchange(source_, nullptr);
  source->ReleaseUnit(unit_, ticket_);
}

inline absl::Status UnitLease::CheckHeld(int param) const {
  if (source_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "UnitLease(\"", unit_.name, "\"): parameter ", param, " asked for after the lease ended"));
  }
  if (param < unit_.first || param >= unit_.end) {
    return absl::InvalidArgumentError(absl::StrCat("UnitLease(\"", unit_.name, "\"): parameter ",
                                                   param, " is not in the unit's [", unit_.first,
                                                   ", ", unit_.end, ")"));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<absl::Span<const float>> UnitLease::Get(int param) const {
  absl::Status held = CheckHeld(param);
  if (!held.ok()) return held;
  return source_->Acquire(param);
}

inline absl::StatusOr<absl::Span<const BFloat16>> UnitLease::GetBf16(int param) const {
  absl::Status held = CheckHeld(param);
  if (!held.ok()) return held;
  return source_->AcquireBf16(param);
}

}  // namespace loom

#endif  // LOOM_CORE_PARAMETER_SOURCE_H_
