// Batch conversions between f32 and the 16-bit float storage types, vectorized.
//
// Each function converts src[i] into dst[i] exactly as the scalar functions of
// core/half.h do (round to nearest even, overflow to Inf, f16 subnormals kept, NaN
// quieted with its sign and leading payload bits), bit for bit on every CPU. The path
// is chosen once at run time: AVX-512 (F, BW, VL, DQ) or AVX2 with F16C, one Highway
// source compiled for each, and a scalar loop elsewhere. Spans may start at any address
// and must not overlap; nothing outside them is read or written.
//
// Example:
//   std::vector<float> grads = {1.0f, 1.00390625f, 65520.0f};
//   std::vector<BFloat16> packed(grads.size());
//   LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(grads, absl::MakeSpan(packed)));
//   // packed == {0x3F80, 0x3F80 (tie, to even), 0x4780}
//   std::vector<Float16> halves(grads.size());
//   LOOM_RETURN_IF_ERROR(ConvertF32ToF16(grads, absl::MakeSpan(halves)));
//   // halves == {0x3C00, 0x3C04 (exact in f16), 0x7C00 (+Inf: past max 65504)}
//   ConvertF16ToF32(halves, absl::MakeSpan(grads).first(2));
//   // InvalidArgument: "ConvertF16ToF32: src has 3 elements but dst has 2"
#ifndef LOOM_CORE_HALF_CONVERT_H_
#define LOOM_CORE_HALF_CONVERT_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {

// ConvertF32ToBF16 rounds each src[i] to bf16 into dst[i]. Returns InvalidArgument,
// writing nothing, if the spans differ in size.
absl::Status ConvertF32ToBF16(absl::Span<const float> src, absl::Span<BFloat16> dst);

// ConvertBF16ToF32 widens each src[i] exactly into dst[i]. Returns InvalidArgument,
// writing nothing, if the spans differ in size.
absl::Status ConvertBF16ToF32(absl::Span<const BFloat16> src, absl::Span<float> dst);

// ConvertF32ToF16 rounds each src[i] to IEEE binary16 into dst[i]. Returns
// InvalidArgument, writing nothing, if the spans differ in size.
absl::Status ConvertF32ToF16(absl::Span<const float> src, absl::Span<Float16> dst);

// ConvertF16ToF32 widens each src[i] exactly into dst[i]. Returns InvalidArgument,
// writing nothing, if the spans differ in size.
absl::Status ConvertF16ToF32(absl::Span<const Float16> src, absl::Span<float> dst);

}  // namespace loom

#endif  // LOOM_CORE_HALF_CONVERT_H_
