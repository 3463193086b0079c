#include "tensor_parallel/internal/dim_copy.h"

#include <cstring>

namespace loom {
namespace tensor_parallel_internal {

DimLayout LayoutAround(absl::Span<const int64_t> shape, int dim, DType dtype) {
  DimLayout layout;
  const size_t d = static_cast<size_t>(dim);
  for (size_t i = 0; i < d; ++i) layout.outer *= shape[i];
  layout.extent = shape[d];
  int64_t inner = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  layout.inner_bytes = static_cast<size_t>(inner) * DTypeSize(dtype);
  return layout;
}

void CopyAlongDim(const std::byte* src, int64_t src_extent, int64_t src_offset, std::byte* dst,
                  int64_t dst_extent, int64_t dst_offset, int64_t length, int64_t outer,
                  size_t inner_bytes) {
  // memcpy with a null pointer is undefined even for zero bytes, and empty tensors
  // may have no storage at all.
  if (length <= 0 || outer <= 0 || inner_bytes == 0) return;
  const size_t run = static_cast<size_t>(length) * inner_bytes;
  for (int64_t o = 0; o < outer; ++o) {
    std::memcpy(dst + static_cast<size_t>(o * dst_extent + dst_offset) * inner_bytes,
                src + static_cast<size_t>(o * src_extent + src_offset) * inner_bytes, run);
  }
}

}  // namespace tensor_parallel_internal
}  // namespace loom
