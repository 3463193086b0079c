#include "offload/adamw/cpu_adamw.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/internal/helper_team.h"
#include "offload/adamw/blockwise8.h"
#include "offload/adamw/internal/isa_for_testing.h"
#include "offload/adamw/internal/kernels.h"
#include "offload/adamw/internal/simd_tile_kernels.h"

namespace loom {

namespace ai = adamw_internal;

static_assert(ai::kMaxBlockSize == kMaxBlockSize, "kernel scratch must hold the largest block");

// AdamWStateAccess: what AdamWStep needs of a state's storage.
class AdamWStateAccess {
 public:
  static void* m(AdamWState& state) { return state.m_.data(); }
  static void* v(AdamWState& state) { return state.v_.data(); }
  static float* m_absmax(AdamWState& state) { return state.m_absmax_.data(); }
  static float* v_absmax(AdamWState& state) { return state.v_absmax_.data(); }
};

namespace {

constexpr int kMaxThreads = 256;

// The ISA ceiling of SetIsaCeilingForTesting; kAvx512 (no ceiling) outside tests.
std::atomic<CpuIsa> isa_ceiling{CpuIsa::kAvx512};

bool KnownIsa(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
    case CpuIsa::kAvx2:
    case CpuIsa::kAvx512:
      return true;
  }
  return false;
}

// Runs: whether AdamWStep may run `isa`'s kernels here: the CPU runs them
// (core/cpu_features.h, as for every package's kernels) and no test ceiling hides them.
bool Runs(CpuIsa isa) {
  if (isa == CpuIsa::kScalar) return true;
  if (static_cast<int>(isa) > static_cast<int>(isa_ceiling.load(std::memory_order_relaxed))) {
    return false;
  }
  return CpuSupports(isa);
}

CpuIsa FastestRunnable() {
  return Runs(CpuIsa::kAvx512) ? CpuIsa::kAvx512
         : Runs(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                               : CpuIsa::kScalar;
}

size_t ElementBytes(StateFormat format) {
  switch (format) {
    case StateFormat::kF32:
      return 4;
    case StateFormat::kBF16:
      return 2;
    case StateFormat::kBlockwise8:
      return 1;
  }
  return 0;
}

bool KnownFormat(StateFormat format) { return ElementBytes(format) != 0; }

absl::Status OutOfRange(absl::string_view field, float value, absl::string_view range) {
  return absl::InvalidArgumentError(
      absl::StrCat("AdamWHyper: ", field, " is ", value, "; it must be ", range));
}

const ai::TileKernels& KernelsFor(CpuIsa isa) {
  static constexpr ai::TileKernels kScalar = {&ai::StepF32Scalar, &ai::StepBF16Scalar,
                                              &ai::StepBlockwise8Scalar};
  const ai::TileKernels* simd = ai::SimdTileKernels(isa);
  return simd != nullptr ? *simd : kScalar;
}

ai::TileKernel KernelFor(CpuIsa isa, StateFormat format) {
  const ai::TileKernels& kernels = KernelsFor(isa);
  switch (format) {
    case StateFormat::kF32:
      return kernels.f32;
    case StateFormat::kBF16:
      return kernels.bf16;
    case StateFormat::kBlockwise8:
      return kernels.blockwise8;
  }
  return kernels.f32;
}


struct Bytes {
  uintptr_t begin;
  size_t size;
};

template <typename T>
Bytes BytesOf(absl::Span<T> span) {
  return {reinterpret_cast<uintptr_t>(span.data()), span.size() * sizeof(T)};
}

bool Overlap(Bytes a, Bytes b) {
  return a.size != 0 && b.size != 0 && a.begin < b.begin + b.size && b.begin < a.begin + a.size;
}

absl::Status CheckSpans(absl::Span<float> params, absl::Span<const float> grads,
                        const AdamWState& state, const HalfCopy& half_copy) {
  if (grads.size() != params.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWStep: params has ", params.size(),
                                                   " elements but grads has ", grads.size()));
  }
  if (state.count() != static_cast<int64_t>(params.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AdamWStep: params has ", params.size(), " elements but the state holds ", state.count()));
  }
  if (half_copy.kind() != HalfCopy::Kind::kNone && half_copy.size() != params.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWStep: params has ", params.size(), " elements but the ",
                     half_copy.kind() == HalfCopy::Kind::kBF16 ? "bf16" : "f16", " half copy has ",
                     half_copy.size()));
  }
  if (Overlap(BytesOf(params), BytesOf(grads))) {
    return absl::InvalidArgumentError("AdamWStep: params and grads overlap");
  }
  if (half_copy.kind() != HalfCopy::Kind::kNone &&
      Overlap(BytesOf(params), BytesOf(absl::MakeSpan(half_copy.bits(), half_copy.size())))) {
    return absl::InvalidArgumentError("AdamWStep: params and the half copy overlap");
  }
  if (half_copy.kind() != HalfCopy::Kind::kNone &&
      Overlap(BytesOf(grads), BytesOf(absl::MakeSpan(half_copy.bits(), half_copy.size())))) {
    return absl::InvalidArgumentError("AdamWStep: grads and the half copy overlap");
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const AdamWOptions& options) {
  if (options.threads < 1 || options.threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWStep: threads is ", options.threads,
                                                   "; it must be in [1, ", kMaxThreads, "]"));
  }
  if (options.tile < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWStep: tile is ", options.tile, "; it must be at least 1"));
  }
  if (!options.isa.has_value()) return absl::OkStatus();
  const CpuIsa isa = *options.isa;
  if (!KnownIsa(isa)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWStep: unknown isa ", static_cast<int>(isa)));
  }
  if (!Runs(isa)) {
    return absl::FailedPreconditionError(
        absl::StrCat("AdamWStep: isa ", CpuIsaName(isa),
                     " is not supported by this CPU (the fastest supported is ",
                     CpuIsaName(FastestRunnable()), ")"));
  }
  return absl::OkStatus();
}

ai::HalfKind HalfKindOf(HalfCopy::Kind kind) {
  switch (kind) {
    case HalfCopy::Kind::kNone:
      break;
    case HalfCopy::Kind::kBF16:
      return ai::HalfKind::kBF16;
    case HalfCopy::Kind::kF16:
      return ai::HalfKind::kF16;
  }
  return ai::HalfKind::kNone;
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

absl::Status ValidateAdamWHyper(const AdamWHyper& h) {
  if (!(std::isfinite(h.lr) && h.lr >= 0.0f)) return OutOfRange("lr", h.lr, "finite and >= 0");
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f)) return OutOfRange("beta1", h.beta1, "in [0, 1)");
  if (!(h.beta2 >= 0.0f && h.beta2 < 1.0f)) return OutOfRange("beta2", h.beta2, "in [0, 1)");
  if (!(std::isfinite(h.eps) && h.eps > 0.0f)) return OutOfRange("eps", h.eps, "finite and > 0");
  if (!(std::isfinite(h.weight_decay) && h.weight_decay >= 0.0f)) {
    return OutOfRange("weight_decay", h.weight_decay, "finite and >= 0");
  }
  if (static_cast<double>(h.lr) * static_cast<double>(h.weight_decay) > 1.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWHyper: lr * weight_decay is ", h.lr, " * ", h.weight_decay,
                     "; it must be at most 1 (the decay factor 1 - lr * weight_decay would "
                     "be negative)"));
  }
  if (h.step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWHyper: step is ", h.step, "; it must be at least 1 (1-based)"));
  }
  if (!(std::isfinite(h.grad_scale) && h.grad_scale >= 0.0f)) {
    return OutOfRange("grad_scale", h.grad_scale, "finite and >= 0");
  }
  return absl::OkStatus();
}

namespace adamw_internal {

// The per-step constants, each computed in double and rounded to float once.
StepConstants DeriveStepConstants(const AdamWHyper& h) {
  const double step = static_cast<double>(h.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  StepConstants c;
  c.beta1 = h.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  c.beta2 = h.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  c.grad_scale = h.grad_scale;
  c.eps = h.eps;
  c.decay =
      static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.weight_decay));
  c.step_size = static_cast<float>(static_cast<double>(h.lr) / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  return c;
}

void SetIsaCeilingForTesting(CpuIsa ceiling) { isa_ceiling.store(ceiling); }
}  // namespace adamw_internal

absl::string_view StateFormatName(StateFormat format) {
  switch (format) {
    case StateFormat::kF32:
      return "f32";
    case StateFormat::kBF16:
      return "bf16";
    case StateFormat::kBlockwise8:
      return "blockwise8";
  }
  return "unknown";
}

AdamWState::AdamWState(int64_t count, StateFormat format, int64_t block_size,
                       AlignedBuffer<std::byte> m, AlignedBuffer<std::byte> v,
                       AlignedBuffer<float> m_absmax, AlignedBuffer<float> v_absmax)
    : count_(count),
      capacity_(count),
      format_(format),
      block_size_(block_size),
      m_(std::move(m)),
      v_(std::move(v)),
      m_absmax_(std::move(m_absmax)),
      v_absmax_(std::move(v_absmax)) {}

absl::StatusOr<AdamWState> AdamWState::Create(int64_t count, StateFormat format,
                                              int64_t block_size) {
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWState::Create: count is ", count, "; it must be >= 0"));
  }
  if (!KnownFormat(format)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AdamWState::Create: unknown format ", static_cast<int>(format)));
  }
  if (format == StateFormat::kBlockwise8) {
    if (absl::Status status = ValidateBlockSize(block_size); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("AdamWState::Create: ", status.message()));
    }
  }
  const size_t bytes = static_cast<size_t>(count) * ElementBytes(format);
  const size_t blocks =
      format == StateFormat::kBlockwise8 ? static_cast<size_t>(NumBlocks(count, block_size)) : 0;
  absl::StatusOr<AlignedBuffer<std::byte>> m = AlignedBuffer<std::byte>::Create(bytes);
  if (!m.ok()) return m.status();
  absl::StatusOr<AlignedBuffer<std::byte>> v = AlignedBuffer<std::byte>::Create(bytes);
  if (!v.ok()) return v.status();
  absl::StatusOr<AlignedBuffer<float>> m_absmax = AlignedBuffer<float>::Create(blocks);
  if (!m_absmax.ok()) return m_absmax.status();
  absl::StatusOr<AlignedBuffer<float>> v_absmax = AlignedBuffer<float>::Create(blocks);
  if (!v_absmax.ok()) return v_absmax.status();
  return AdamWState(count, format, block_size, std::move(m).value(), std::move(v).value(),
                    std::move(m_absmax).value(), std::move(v_absmax).value());
}

absl::Status AdamWState::Resize(int64_t count) {
  if (count < 0 || count > capacity_) {
    return absl::InvalidArgumentError(absl::StrCat("AdamWState::Resize: count ", count,
                                                   " is not in [0, ", capacity_,
                                                   "] (the capacity it was created with)"));
  }
  count_ = count;
  return absl::OkStatus();
}

size_t AdamWState::Blocks() const {
  return format_ == StateFormat::kBlockwise8 ? static_cast<size_t>(NumBlocks(count_, block_size_))
                                             : 0;
}

size_t AdamWState::size_bytes() const {
  return m_.size_bytes() + v_.size_bytes() + m_absmax_.size_bytes() + v_absmax_.size_bytes();
}

namespace {

absl::Status CheckMomentSizes(absl::string_view function, int64_t count, size_t m, size_t v) {
  if (static_cast<int64_t>(m) != count || static_cast<int64_t>(v) != count) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": m has ", m, " and v has ", v,
                                                   " elements but the state holds ", count));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AdamWState::ReadMoments(absl::Span<float> m, absl::Span<float> v) const {
  if (absl::Status status = CheckMomentSizes("AdamWState::ReadMoments", count_, m.size(), v.size());
      !status.ok()) {
    return status;
  }
  const size_t n = static_cast<size_t>(count_);
  switch (format_) {
    case StateFormat::kF32: {
      const float* ms = reinterpret_cast<const float*>(m_.data());
      const float* vs = reinterpret_cast<const float*>(v_.data());
      for (size_t i = 0; i < n; ++i) {
        m[i] = ms[i];
        v[i] = vs[i];
      }
      return absl::OkStatus();
    }
    case StateFormat::kBF16: {
      const BFloat16* ms = reinterpret_cast<const BFloat16*>(m_.data());
      const BFloat16* vs = reinterpret_cast<const BFloat16*>(v_.data());
      for (size_t i = 0; i < n; ++i) {
        m[i] = ToFloat(ms[i]);
        v[i] = ToFloat(vs[i]);
      }
      return absl::OkStatus();
    }
    case StateFormat::kBlockwise8: {
      const auto* mc = reinterpret_cast<const uint8_t*>(m_.data());
      const auto* vc = reinterpret_cast<const uint8_t*>(v_.data());
      if (absl::Status status = DequantizeBlockwise8(
              CodeMap::kSigned, block_size_, absl::MakeConstSpan(mc, n), m_absmax_.span().first(Blocks()), m);
          !status.ok()) {
        return status;
      }
      return DequantizeBlockwise8(CodeMap::kUnsigned, block_size_, absl::MakeConstSpan(vc, n),
                                  v_absmax_.span().first(Blocks()), v);
    }
  }
  return absl::InternalError("AdamWState::ReadMoments: unknown format");
}

absl::Status AdamWState::WriteMoments(absl::Span<const float> m, absl::Span<const float> v) {
  if (absl::Status status =
          CheckMomentSizes("AdamWState::WriteMoments", count_, m.size(), v.size());
      !status.ok()) {
    return status;
  }
  const size_t n = static_cast<size_t>(count_);
  switch (format_) {
    case StateFormat::kF32: {
      float* ms = reinterpret_cast<float*>(m_.data());
      float* vs = reinterpret_cast<float*>(v_.data());
      for (size_t i = 0; i < n; ++i) {
        ms[i] = m[i];
        vs[i] = v[i];
      }
      return absl::OkStatus();
    }
    case StateFormat::kBF16: {
      BFloat16* ms = reinterpret_cast<BFloat16*>(m_.data());
      BFloat16* vs = reinterpret_cast<BFloat16*>(v_.data());
      for (size_t i = 0; i < n; ++i) {
        ms[i] = ToBFloat16(m[i]);
        vs[i] = ToBFloat16(v[i]);
      }
      return absl::OkStatus();
    }
    case StateFormat::kBlockwise8: {
      auto* mc = reinterpret_cast<uint8_t*>(m_.data());
      auto* vc = reinterpret_cast<uint8_t*>(v_.data());
      if (absl::Status status = QuantizeBlockwise8(CodeMap::kSigned, block_size_, m,
                                                   absl::MakeSpan(mc, n), m_absmax_.span().first(Blocks()));
          !status.ok()) {
        return status;
      }
      return QuantizeBlockwise8(CodeMap::kUnsigned, block_size_, v, absl::MakeSpan(vc, n),
                                v_absmax_.span().first(Blocks()));
    }
  }
  return absl::InternalError("AdamWState::WriteMoments: unknown format");
}

absl::Status AdamWStep(const AdamWHyper& hyper, absl::Span<float> params,
                       absl::Span<const float> grads, AdamWState& state,
                       const AdamWOptions& options, HalfCopy half_copy) {
  if (absl::Status status = ValidateAdamWHyper(hyper); !status.ok()) return status;
  if (absl::Status status = CheckSpans(params, grads, state, half_copy); !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;

  const CpuIsa isa = options.isa.value_or(FastestRunnable());
  const ai::TileKernel kernel = KernelFor(isa, state.format());
  const ai::StepConstants constants = ai::DeriveStepConstants(hyper);
  const bool blockwise = state.format() == StateFormat::kBlockwise8;
  const int64_t count = static_cast<int64_t>(params.size());
  const int64_t block_size = state.block_size();
  // Tiles start on cache lines and, for 8-bit state, on block boundaries, so a tile's
  // result does not depend on which thread runs it or what its neighbours do.
  const int64_t tile = RoundUp(options.tile, blockwise ? block_size : 64);
  const int64_t num_tiles = (count + tile - 1) / tile;
  const size_t element_bytes = ElementBytes(state.format());
  auto* const m = static_cast<std::byte*>(AdamWStateAccess::m(state));
  auto* const v = static_cast<std::byte*>(AdamWStateAccess::v(state));
  float* const m_absmax = AdamWStateAccess::m_absmax(state);
  float* const v_absmax = AdamWStateAccess::v_absmax(state);
  const ai::HalfKind half_kind = HalfKindOf(half_copy.kind());

  // The tiles run on the calling thread and its own parked helpers (core's thread team,
  // handing tiles out one at a time), the team that runs the rank's other passes.
  const auto run_tile = [&](int64_t t) {
    const int64_t begin = t * tile;
    const size_t offset = static_cast<size_t>(begin) * element_bytes;
    ai::TileArgs args;
    args.params = params.data() + begin;
    args.grads = grads.data() + begin;
    args.m = m + offset;
    args.v = v + offset;
    args.m_absmax = blockwise ? m_absmax + begin / block_size : nullptr;
    args.v_absmax = blockwise ? v_absmax + begin / block_size : nullptr;
    args.half = half_kind == ai::HalfKind::kNone ? nullptr : half_copy.bits() + begin;
    args.count = count - begin < tile ? count - begin : tile;
    args.block_size = block_size;
    args.half_kind = half_kind;
    kernel(constants, args);
  };
  if (num_tiles == 0) return absl::OkStatus();
  // Parts of whole tiles, at most 2^20 of them (a part index is an int).
  constexpr int64_t kMaxParts = int64_t{1} << 20;
  const int64_t tiles_per_part = (num_tiles + kMaxParts - 1) / kMaxParts;
  const int64_t parts = (num_tiles + tiles_per_part - 1) / tiles_per_part;
  return core_internal::HelperTeam::ForThisThread().Run(
      options.threads, static_cast<int>(parts), [&](int p) {
        const int64_t first = p * tiles_per_part;
        const int64_t last = std::min(num_tiles, first + tiles_per_part);
        for (int64_t t = first; t < last; ++t) run_tile(t);
        return absl::OkStatus();
      });
}

}  // namespace loom
