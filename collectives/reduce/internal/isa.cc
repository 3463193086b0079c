// CPU detection and the table of per-ISA kernels.
#include <array>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"

namespace loom {
namespace reduce_internal {

const Kernels& KernelsFor(Isa isa) {
  static constexpr Kernels kScalar = {&ReduceIntoScalar,       &ReduceToScalar,
                                      &AccumulateIntoScalar,   &LoadAccumulatorScalar,
                                      &StoreAccumulatorScalar, &FinishAverageScalar};
  static constexpr Kernels kAvx2 = {&ReduceIntoAvx2,       &ReduceToAvx2,
                                    &AccumulateIntoAvx2,   &LoadAccumulatorAvx2,
                                    &StoreAccumulatorAvx2, &FinishAverageAvx2};
  static constexpr Kernels kAvx512 = {&ReduceIntoAvx512,       &ReduceToAvx512,
                                      &AccumulateIntoAvx512,   &LoadAccumulatorAvx512,
                                      &StoreAccumulatorAvx512, &FinishAverageAvx512};
  switch (isa) {
    case Isa::kAvx2:
      return kAvx2;
    case Isa::kAvx512:
      return kAvx512;
    case Isa::kScalar:
      break;
  }
  return kScalar;
}

}  // namespace reduce_internal
}  // namespace loom
