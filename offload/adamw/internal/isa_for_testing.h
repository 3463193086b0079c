// A test hook: pretend the CPU lacks the ISAs above a ceiling, so that tests on an AVX-512
// machine can check what AdamWStep does on older ones.
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_ISA_FOR_TESTING_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_ISA_FOR_TESTING_H_

#include "core/cpu_features.h"

namespace loom {
namespace adamw_internal {

// SetIsaCeilingForTesting makes AdamWStep treat every ISA above `ceiling` (kScalar <
// kAvx2 < kAvx512) as unsupported until called again with kAvx512: naming one fails, and
// an unset AdamWOptions::isa picks the best one at or below it. Not thread-safe with
// concurrent AdamWStep calls.
void SetIsaCeilingForTesting(CpuIsa ceiling);

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_ISA_FOR_TESTING_H_
