// The table of per-ISA kernels.
#include "collectives/reduce/internal/reduce_kernels.h"

namespace loom {
namespace reduce_internal {

const Kernels& KernelsFor(Isa isa) {
  static constexpr Kernels kScalar = {&ReduceIntoScalar,       &ReduceToScalar,
                                      &AccumulateIntoScalar,   &LoadAccumulatorScalar,
                                      &StoreAccumulatorScalar, &FinishAverageScalar};
  const Kernels* simd = SimdKernels(isa);
  return simd != nullptr ? *simd : kScalar;
}

}  // namespace reduce_internal
}  // namespace loom
