// CPU detection and the table of per-ISA kernels.
#include <array>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"

namespace loom {
namespace reduce_internal {

absl::Span<const Isa> AllIsas() {
  static constexpr std::array<Isa, 3> kIsas = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  return kIsas;
}

bool IsaSupported(Isa isa) {
  // __builtin_cpu_supports also checks XCR0, so an OS that does not save the wider
  // register state reports false.
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("f16c");
  }
  return false;
}

Isa ActiveIsa() {
  static const Isa isa = IsaSupported(Isa::kAvx512) ? Isa::kAvx512
                         : IsaSupported(Isa::kAvx2) ? Isa::kAvx2
                                                    : Isa::kScalar;
  return isa;
}

absl::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

const Kernels& KernelsFor(Isa isa) {
  static constexpr Kernels kScalar = {&ReduceIntoScalar, &AccumulateIntoScalar,
                                      &LoadAccumulatorScalar, &StoreAccumulatorScalar,
                                      &FinishAverageScalar};
  static constexpr Kernels kAvx2 = {&ReduceIntoAvx2, &AccumulateIntoAvx2, &LoadAccumulatorAvx2,
                                    &StoreAccumulatorAvx2, &FinishAverageAvx2};
  static constexpr Kernels kAvx512 = {&ReduceIntoAvx512, &AccumulateIntoAvx512,
                                      &LoadAccumulatorAvx512, &StoreAccumulatorAvx512,
                                      &FinishAverageAvx512};
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
