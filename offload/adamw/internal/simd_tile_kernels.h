// The vector tile kernels (internal/adamw_simd.cc, written once with Highway), one table
// per CPU ISA level.
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_SIMD_TILE_KERNELS_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_SIMD_TILE_KERNELS_H_

#include "core/cpu_features.h"
#include "offload/adamw/internal/kernels.h"

namespace loom {
namespace adamw_internal {

// SimdTileKernels returns the vector kernels of kAvx2 or kAvx512 (null for kScalar, and
// where this compiler could not build the target). Call them only where
// CpuSupports(isa).
const TileKernels* SimdTileKernels(CpuIsa isa);

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_SIMD_TILE_KERNELS_H_
