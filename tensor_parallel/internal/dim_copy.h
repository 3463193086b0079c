// Copies of a range along one dimension of a row-major tensor held as raw bytes:
// the packing and unpacking under every sharded collective. A shape seen around
// dimension d is [outer, extent, inner]; a range [offset, offset + length) along d
// is `outer` contiguous runs of length * inner elements.
#ifndef LOOM_TENSOR_PARALLEL_INTERNAL_DIM_COPY_H_
#define LOOM_TENSOR_PARALLEL_INTERNAL_DIM_COPY_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "core/dtype.h"

namespace loom {
namespace tensor_parallel_internal {

// DimLayout: a shape seen around one of its dimensions.
struct DimLayout {
  int64_t outer = 1;       // product of the dimensions before it
  int64_t extent = 0;      // the dimension itself
  size_t inner_bytes = 0;  // bytes of one index along it (dimensions after it)
};

// LayoutAround returns `shape` seen around `dim` (0 <= dim < shape.size()).
DimLayout LayoutAround(absl::Span<const int64_t> shape, int dim, DType dtype);

// CopyAlongDim copies indices [src_offset, src_offset + length) along the dimension
// of a source laid out as [outer, src_extent, inner] into [dst_offset, ...) of a
// destination laid out as [outer, dst_extent, inner]. The caller guarantees the
// ranges fit; a zero-sized copy touches no memory (so null data is fine).
void CopyAlongDim(const std::byte* src, int64_t src_extent, int64_t src_offset, std::byte* dst,
                  int64_t dst_extent, int64_t dst_offset, int64_t length, int64_t outer,
                  size_t inner_bytes);

}  // namespace tensor_parallel_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_INTERNAL_DIM_COPY_H_
