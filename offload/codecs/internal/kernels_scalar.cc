// The scalar reference kernels (Isa::kScalar).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "offload/codecs/internal/kernels.h"

namespace loom {
namespace codecs_internal {

size_t QuantizeInt8Scalar(absl::Span<const float> x, size_t block_size, std::byte* out) {
  for (size_t begin = 0, block = 0; begin < x.size(); begin += block_size, ++block) {
    const size_t len = std::min(block_size, x.size() - begin);
    const float* p = x.data() + begin;
    // Integer max of |x|'s bits: the order of non-negative floats, NaN and Inf on top.
    uint32_t absmax_bits = 0;
    for (size_t i = 0; i < len; ++i)
      absmax_bits = std::max(absmax_bits, FloatBits(p[i]) & 0x7FFFFFFFu);
    if (absmax_bits >= 0x7F800000u) return block;
    float scale;
    float inv;
    Int8Scale(BitsToFloat(absmax_bits), &scale, &inv);
    std::memcpy(out, &scale, sizeof(scale));
    out += sizeof(scale);
    for (size_t i = 0; i < len; ++i) out[i] = static_cast<std::byte>(QuantizeOne(p[i], inv));
    out += len;
  }
  return kAllFinite;
}

void DequantizeInt8Scalar(const std::byte* in, size_t block_size, absl::Span<float> x) {
  for (size_t begin = 0; begin < x.size(); begin += block_size) {
    const size_t len = std::min(block_size, x.size() - begin);
    float scale;
    std::memcpy(&scale, in, sizeof(scale));
    in += sizeof(scale);
    float* p = x.data() + begin;
    for (size_t i = 0; i < len; ++i) p[i] = DequantizeOne(in[i], scale);
    in += len;
  }
}

void Shuffle4Scalar(const std::byte* in, size_t count, std::byte* out) {
  for (size_t i = 0; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[j * count + i] = in[4 * i + j];
  }
}

void Unshuffle4Scalar(const std::byte* in, size_t count, std::byte* out) {
  for (size_t i = 0; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[4 * i + j] = in[j * count + i];
  }
}

size_t FindOverflowScalar(absl::Span<const float> x, uint32_t overflow_abs_bits) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (Overflows(x[i], overflow_abs_bits)) return i;
  }
  return x.size();
}

}  // namespace codecs_internal
}  // namespace loom
