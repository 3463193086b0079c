// A fused CPU AdamW step for optimizer state kept in host memory (ZeRO-Offload style): one
// pass per element that reads the fp32 param, the fp32 grad and the moments m and v, and
// writes the param, m, v and, optionally, a bf16 or f16 copy of the new param for the
// accelerator. Runtime-dispatched AVX-512 / AVX2 kernels (written once with Highway) and
// the scalar reference give the same bits; tiles spread over threads give the same bits at
// any thread count.
//
// The moments can be stored as f32, bf16, or 8-bit blockwise codes with a per-block absmax
// and a dynamic (non-linear) code map (blockwise8.h), decoded and re-encoded inside the
// same pass: 28, 20 or about 16 bytes of memory traffic per parameter.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(AdamWState state,
//                         AdamWState::Create(params.size(), StateFormat::kBlockwise8));
//   AdamWHyper hyper;          // lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01
//   hyper.step = 1;            // 1 on the first call, then 2, 3, ...
//   hyper.grad_scale = clip_factor / loss_scale;
//   AdamWOptions options;
//   options.threads = 4;       // isa unset: the fastest this CPU has
//   std::vector<BFloat16> device_copy(params.size());
//   LOOM_RETURN_IF_ERROR(AdamWStep(hyper, absl::MakeSpan(params), grads, state, options,
//                                  absl::MakeSpan(device_copy)));
//   hyper.beta1 = 1.5f;
//   AdamWStep(hyper, ...);
//   // InvalidArgument: "AdamWHyper: beta1 is 1.5; it must be in [0, 1)"
//   options.isa = CpuIsa::kAvx512;
//   AdamWStep(..., options);   // on a CPU without AVX-512:
//   // FailedPrecondition: "AdamWStep: isa avx512 is not supported by this CPU ..."
#ifndef LOOM_OFFLOAD_ADAMW_CPU_ADAMW_H_
#define LOOM_OFFLOAD_ADAMW_CPU_ADAMW_H_

#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "offload/adamw/blockwise8.h"

namespace loom {

// AdamWHyper: the hyperparameters of one step. The defaults are PyTorch's AdamW.
struct AdamWHyper {
  float lr = 1e-3f;            // finite, >= 0
  float beta1 = 0.9f;          // in [0, 1)
  float beta2 = 0.999f;        // in [0, 1)
  float eps = 1e-8f;           // finite, > 0
  float weight_decay = 0.01f;  // finite, >= 0, lr * weight_decay <= 1; decoupled
  int64_t step = 1;            // 1-based count of steps taken, this one included
  // Multiplies every gradient before use: the loss-scale unscale times the
  // gradient-clipping factor. Finite, >= 0.
  float grad_scale = 1.0f;
};

// ValidateAdamWHyper returns InvalidArgument naming the first field out of range and its
// value (NaN is out of every range), OK otherwise.
absl::Status ValidateAdamWHyper(const AdamWHyper& hyper);

// StateFormat: how m and v are stored.
enum class StateFormat {
  kF32,         // 4 + 4 bytes per parameter
  kBF16,        // 2 + 2 bytes, round to nearest even each step
  kBlockwise8,  // 1 + 1 bytes plus two f32 scales per block (blockwise8.h)
};

// StateFormatName returns "f32", "bf16" or "blockwise8".
absl::string_view StateFormatName(StateFormat format);

// AdamWState owns the moments m and v of `count` parameters, zero-initialized.
class AdamWState {
 public:
  static constexpr int64_t kDefaultBlockSize = 2048;

  // Create allocates the state of `count` parameters (64-byte aligned). block_size matters
  // only for kBlockwise8. Returns InvalidArgument for a negative count, an unknown format
  // or (kBlockwise8) an invalid block size (ValidateBlockSize); ResourceExhausted if the
  // memory cannot be allocated.
  static absl::StatusOr<AdamWState> Create(int64_t count, StateFormat format = StateFormat::kF32,
                                           int64_t block_size = kDefaultBlockSize);

  AdamWState(AdamWState&&) = default;
  AdamWState& operator=(AdamWState&&) = default;

  int64_t count() const { return count_; }
  // capacity: the most parameters this state's memory holds (Create's count).
  int64_t capacity() const { return capacity_; }

  // Resize makes the state hold `count` parameters in the memory it has, so that
  // one state serves buffers of several sizes in turn (zero3's NVMe step, which
  // reads each bucket's moments in, steps and writes them out). The moments are
  // unspecified until WriteMoments. InvalidArgument naming both for a negative
  // count or one above capacity().
  absl::Status Resize(int64_t count);
  StateFormat format() const { return format_; }
  int64_t block_size() const { return block_size_; }

  // size_bytes returns the bytes of m, v and (kBlockwise8) their scales.
  size_t size_bytes() const;

  // ReadMoments decodes m and v into f32. Returns InvalidArgument if either span does not
  // have count() elements.
  absl::Status ReadMoments(absl::Span<float> m, absl::Span<float> v) const;

  // WriteMoments stores m and v as the format does after a step (bf16: round to nearest
  // even; kBlockwise8: QuantizeBlockwise8), e.g. to restore a checkpoint or convert between
  // formats. Returns InvalidArgument if either span does not have count() elements.
  absl::Status WriteMoments(absl::Span<const float> m, absl::Span<const float> v);

 private:
  friend class AdamWStateAccess;

  AdamWState(int64_t count, StateFormat format, int64_t block_size, AlignedBuffer<std::byte> m,
             AlignedBuffer<std::byte> v, AlignedBuffer<float> m_absmax,
             AlignedBuffer<float> v_absmax);

  // The scales in use (kBlockwise8): those of count_, not of the capacity.
  size_t Blocks() const;

  int64_t count_ = 0;
  int64_t capacity_ = 0;
  StateFormat format_ = StateFormat::kF32;
  int64_t block_size_ = kDefaultBlockSize;
  AlignedBuffer<std::byte> m_;  // float, bf16 bits or codes
  AlignedBuffer<std::byte> v_;
  AlignedBuffer<float> m_absmax_;  // kBlockwise8 only
  AlignedBuffer<float> v_absmax_;
};

// AdamWOptions: how a step runs. None of them changes the result's bits.
struct AdamWOptions {
  // Which kernels run (core/cpu_features.h): unset picks the fastest this CPU runs,
  // BestCpuIsa(); CpuIsa::kScalar is the reference.
  std::optional<CpuIsa> isa;
  // Threads working on the tiles, the caller included (1 runs inline; more use the
  // calling thread's own parked helpers, core's thread team, which also runs a training
  // rank's other passes: core/parallel_for.h). In [1, 256].
  int threads = 1;
  // Elements per tile, the unit of work a thread takes; >= 1. Rounded up to a multiple of
  // 64 and, for kBlockwise8, of the block size.
  int64_t tile = 16384;
};

// HalfCopy: an optional 16-bit copy of the updated params, written in the same pass (round
// to nearest even, as core/half.h's ToBFloat16 / ToFloat16).
class HalfCopy {
 public:
  enum class Kind { kNone, kBF16, kF16 };

  HalfCopy() = default;
  HalfCopy(absl::Span<BFloat16> bf16)  // NOLINT(google-explicit-constructor)
      : kind_(Kind::kBF16), data_(reinterpret_cast<uint16_t*>(bf16.data())), size_(bf16.size()) {}
  HalfCopy(absl::Span<Float16> f16)  // NOLINT(google-explicit-constructor)
      : kind_(Kind::kF16), data_(reinterpret_cast<uint16_t*>(f16.data())), size_(f16.size()) {}

  Kind kind() const { return kind_; }
  uint16_t* bits() const { return data_; }
  size_t size() const { return size_; }

 private:
  static_assert(sizeof(BFloat16) == 2 && sizeof(Float16) == 2, "16-bit storage types");
  Kind kind_ = Kind::kNone;
  uint16_t* data_ = nullptr;
  size_t size_ = 0;
};

// AdamWStep applies one AdamW step to params[i] with gradient grads[i] and the moments in
// `state`, and writes half_copy[i] (if any) from the new params[i]:
//
//   g = grads[i] * grad_scale
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   params[i] = params[i] * (1 - lr * weight_decay)
//               - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
//
// in f32 with one rounding per operation, in that order (internal/adamw_scalar.cc),
// bit-identical on every ISA and thread count for finite inputs. Non-finite inputs give
// non-finite results at the same elements on every path (for kBlockwise8, in the whole
// block), but NaN payloads may differ.
//
// Returns, changing nothing: InvalidArgument for bad hyperparameters (ValidateAdamWHyper),
// spans whose sizes differ from each other or from state.count(), params overlapping grads
// or the half copy, or options out of range (an isa outside CpuIsa); FailedPrecondition if
// options.isa is not supported by this CPU (CpuSupports).
absl::Status AdamWStep(const AdamWHyper& hyper, absl::Span<float> params,
                       absl::Span<const float> grads, AdamWState& state,
                       const AdamWOptions& options = {}, HalfCopy half_copy = {});

}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_CPU_ADAMW_H_
