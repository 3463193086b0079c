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

// Convert checks the sizes, then runs the kernel for the active ISA.
template <typename Src, typename Dst>
absl::Status Convert(absl::string_view function, absl::Span<const Src> src, absl::Span<Dst> dst,
                     void (*scalar)(absl::Span<const Src>, absl::Span<Dst>),
                     void (*avx512)(absl::Span<const Src>, absl::Span<Dst>)) {
  if (absl::Status status = CheckSizes(function, src.size(), dst.size()); !status.ok()) {
    return status;
  }
  switch (hci::ActiveIsa()) {
    case hci::Isa::kAvx512:
      avx512(src, dst);
      break;
    case hci::Isa::kScalar:
      scalar(src, dst);
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertF32ToBF16(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  return Convert("ConvertF32ToBF16", src, dst, &hci::F32ToBF16Scalar, &hci::F32ToBF16Avx512);
}

absl::Status ConvertBF16ToF32(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  return Convert("ConvertBF16ToF32", src, dst, &hci::BF16ToF32Scalar, &hci::BF16ToF32Avx512);
}

absl::Status ConvertF32ToF16(absl::Span<const float> src, absl::Span<Float16> dst) {
  return Convert("ConvertF32ToF16", src, dst, &hci::F32ToF16Scalar, &hci::F32ToF16Avx512);
}

absl::Status ConvertF16ToF32(absl::Span<const Float16> src, absl::Span<float> dst) {
  return Convert("ConvertF16ToF32", src, dst, &hci::F16ToF32Scalar, &hci::F16ToF32Avx512);
}

}  // namespace loom
