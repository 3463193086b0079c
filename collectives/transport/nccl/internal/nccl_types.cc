#include "collectives/transport/nccl/internal/nccl_types.h"

#include "absl/strings/str_cat.h"

namespace loom {
namespace nccl_internal {

absl::StatusOr<ncclDataType_t> NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kF16: return ncclFloat16;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI8: return ncclInt8;
    case DType::kU8: return ncclUint8;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL type for DType(", static_cast<int>(dtype), ")"));
}

absl::StatusOr<ncclRedOp_t> NcclRedOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("nccl: no NCCL op for ReduceOp(", static_cast<int>(op), ")"));
}

}  // namespace nccl_internal
}  // namespace loom
