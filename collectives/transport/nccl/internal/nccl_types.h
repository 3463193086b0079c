// Loom's element types and reductions as NCCL's: DType to ncclDataType_t and
// ReduceOp to ncclRedOp_t.
//
// Example:
//   NcclDataType(DType::kBF16);   // ncclBfloat16
//   NcclRedOp(ReduceOp::kAvg);    // ncclAvg
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_TYPES_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_TYPES_H_

#include <nccl.h>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {
namespace nccl_internal {

// NcclDataType maps every DType (NCCL has all of Loom's: f32, f64, f16, bf16, i8,
// u8, i32, i64). InvalidArgument naming the value for an invalid enumerator.
absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype);

// NcclRedOp maps every ReduceOp (sum, prod, min, max, and avg as ncclAvg, which
// divides by the number of ranks, truncating for integers as ReduceOp::kAvg says).
// InvalidArgument naming the value for an invalid enumerator.
absl::StatusOr<ncclRedOp_t> NcclRedOp(ReduceOp op);

}  // namespace nccl_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_TYPES_H_
