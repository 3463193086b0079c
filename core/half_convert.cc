#include "core/half_convert.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/half.h"
#include "core/internal/half_convert.h"

namespace loom {
namespace {

namespace hci = half_convert_internal;

absl::Status CheckSizes(absl::string_view function, size_t src_size, size_t dst_size) {
  if (src_size == dst_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": src has ", src_size, " elements but dst has ", dst_size));
}

// Convert checks the sizes, then runs the active ISA's `kernel`.
template <typename Src, typename Dst>
absl::Status Convert(absl::string_view function, absl::Span<const Src> src, absl::Span<Dst> dst,
                     hci::Kernel<Src, Dst> hci::Kernels::*kernel) {
  if (absl::Status status = CheckSizes(function, src.size(), dst.size()); !status.ok()) {
    return status;
  }
  static const hci::Kernels& active = hci::KernelsFor(hci::ActiveIsa());
  (active.*kernel)(src, dst);
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertF32ToBF16(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  return Convert("ConvertF32ToBF16", src, dst, &hci::Kernels::f32_to_bf16);
}

absl::Status ConvertBF16ToF32(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  return Convert("ConvertBF16ToF32", src, dst, &hci::Kernels::bf16_to_f32);
}

absl::Status ConvertF32ToF16(absl::Span<const float> src, absl::Span<Float16> dst) {
  return Convert("ConvertF32ToF16", src, dst, &hci::Kernels::f32_to_f16);
}

absl::Status ConvertF16ToF32(absl::Span<const Float16> src, absl::Span<float> dst) {
  return Convert("ConvertF16ToF32", src, dst, &hci::Kernels::f16_to_f32);
}

}  // namespace loom
