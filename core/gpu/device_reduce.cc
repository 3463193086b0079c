#include "core/gpu/device_reduce.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/device_reduce_kernels.h"
#include "core/status_macros.h"

namespace loom {
namespace {

using device_reduce_internal::KernelOp;
using device_reduce_internal::KernelType;
using device_reduce_internal::LaunchResult;

bool ToKernelType(DType dtype, KernelType* type) {
  switch (dtype) {
    case DType::kF32: *type = KernelType::kF32; return true;
    case DType::kF64: *type = KernelType::kF64; return true;
    case DType::kF16: *type = KernelType::kF16; return true;
    case DType::kBF16: *type = KernelType::kBF16; return true;
    case DType::kI8: *type = KernelType::kI8; return true;
    case DType::kU8: *type = KernelType::kU8; return true;
    case DType::kI32: *type = KernelType::kI32; return true;
    case DType::kI64: *type = KernelType::kI64; return true;
  }
  return false;
}

std::string Address(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

// CheckBuffer: `p`, named `name` in the message, must be a non-null, aligned array of dtype.
absl::Status CheckBuffer(absl::string_view fn, absl::string_view name, const void* p, size_t count,
                         DType dtype) {
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", name, " is null with count ", count));
  }
  const size_t size = DTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(p) % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(fn, ": ", name, " (", Address(p),
                                                   ") is not aligned to its ", size, "-byte ",
                                                   DTypeName(dtype), " elements"));
  }
  return absl::OkStatus();
}

// CheckAliasing: out must be exactly `in` or disjoint from its `bytes` bytes; a partial
// overlap would let one thread read what another has already written.
absl::Status CheckAliasing(absl::string_view fn, absl::string_view name, const void* in,
                           const void* out, size_t bytes) {
  const uintptr_t i = reinterpret_cast<uintptr_t>(in);
  const uintptr_t o = reinterpret_cast<uintptr_t>(out);
  if (i == o || i + bytes <= o || o + bytes <= i) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(fn, ": out (", Address(out), ") overlaps ", name,
                                                 " (", Address(in), ") over ", bytes,
                                                 " bytes without being the same memory"));
}

absl::Status CheckByteSize(absl::string_view fn, size_t count, DType dtype) {
  if (count > std::numeric_limits<size_t>::max() / DTypeSize(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": count ", count, " of ", DTypeName(dtype), " overflows the byte size"));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(absl::string_view fn, DType dtype, KernelType* type) {
  if (!ToKernelType(dtype, type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(fn, ": unknown DType ", static_cast<int>(dtype)));
  }
  return absl::OkStatus();
}

// LaunchStatus spells out the failed call: a CUDA runtime call as written, a kernel as
// Name<op, dtype><<<blocks, threads, 0, stream>>>.
absl::Status LaunchStatus(absl::string_view fn, const LaunchResult& result,
                          absl::string_view template_args) {
  if (result.error == cudaSuccess) return absl::OkStatus();
  const std::string call = result.kernel
                               ? absl::StrCat(result.call, "<", template_args, "><<<",
                                              result.blocks, ", ", result.threads, ", 0, stream>>>")
                               : std::string(result.call);
  return CudaStatus(result.error, absl::StrCat(fn, ": ", call));
}

}  // namespace

absl::Status DeviceReduceTo(ReduceOp op, DType dtype, const void* a, const void* b, void* out,
                            size_t count, cudaStream_t stream) {
  constexpr absl::string_view kFn = "DeviceReduceTo";
  KernelOp kernel_op = KernelOp::kSum;
  switch (op) {
    case ReduceOp::kSum: kernel_op = KernelOp::kSum; break;
    case ReduceOp::kProd: kernel_op = KernelOp::kProd; break;
    case ReduceOp::kMin: kernel_op = KernelOp::kMin; break;
    case ReduceOp::kMax: kernel_op = KernelOp::kMax; break;
    case ReduceOp::kAvg:
      return absl::InvalidArgumentError(
          absl::StrCat(kFn,
                       ": op avg is not element-wise; reduce with sum and divide once with "
                       "DeviceFinishAverage"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(kFn, ": unknown ReduceOp ", static_cast<int>(op)));
  }
  KernelType type = KernelType::kF32;
  LOOM_RETURN_IF_ERROR(CheckDType(kFn, dtype, &type));
  if (count == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(CheckBuffer(kFn, "a", a, count, dtype));
  LOOM_RETURN_IF_ERROR(CheckBuffer(kFn, "b", b, count, dtype));
  LOOM_RETURN_IF_ERROR(CheckBuffer(kFn, "out", out, count, dtype));
  LOOM_RETURN_IF_ERROR(CheckByteSize(kFn, count, dtype));
  const size_t bytes = count * DTypeSize(dtype);
  LOOM_RETURN_IF_ERROR(CheckAliasing(kFn, "a", a, out, bytes));
  LOOM_RETURN_IF_ERROR(CheckAliasing(kFn, "b", b, out, bytes));
  const LaunchResult result =
      device_reduce_internal::LaunchReduce(kernel_op, type, a, b, out, count, stream);
  return LaunchStatus(kFn, result, absl::StrCat(ReduceOpName(op), ", ", DTypeName(dtype)));
}

absl::Status DeviceFinishAverage(DType dtype, void* buf, size_t count, int64_t num_ranks,
                                 cudaStream_t stream) {
  constexpr absl::string_view kFn = "DeviceFinishAverage";
  if (num_ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kFn, ": num_ranks ", num_ranks, " < 1"));
  }
  KernelType type = KernelType::kF32;
  LOOM_RETURN_IF_ERROR(CheckDType(kFn, dtype, &type));
  if (count == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(CheckBuffer(kFn, "buf", buf, count, dtype));
  LOOM_RETURN_IF_ERROR(CheckByteSize(kFn, count, dtype));
  if (num_ranks == 1) return absl::OkStatus();
  const LaunchResult result =
      device_reduce_internal::LaunchFinishAverage(type, buf, count, num_ranks, stream);
  return LaunchStatus(kFn, result, DTypeName(dtype));
}

}  // namespace loom
