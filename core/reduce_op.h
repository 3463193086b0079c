// ReduceOp: the element-wise reductions of Loom's collectives.
//
// Example:
//   ReduceOpName(ReduceOp::kMax);          // "max"
//   ParseReduceOp("avg");                  // ReduceOp::kAvg
//   ParseReduceOp("mean");                 // InvalidArgument: unknown reduce op "mean" ...
#ifndef LOOM_CORE_REDUCE_OP_H_
#define LOOM_CORE_REDUCE_OP_H_

#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// kAvg is a sum divided by the number of contributing ranks; for integer dtypes the
// division truncates toward zero, as NCCL's ncclAvg does.
enum class ReduceOp : uint8_t { kSum, kProd, kMin, kMax, kAvg };

// AllReduceOps returns every ReduceOp in declaration order.
absl::Span<const ReduceOp> AllReduceOps();

// ReduceOpName returns "sum", "prod", "min", "max" or "avg".
absl::string_view ReduceOpName(ReduceOp op);

// ParseReduceOp accepts the names above, case-insensitively; InvalidArgument naming
// the text otherwise.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

std::ostream& operator<<(std::ostream& os, ReduceOp op);

}  // namespace loom

#endif  // LOOM_CORE_REDUCE_OP_H_
