#include "collectives/reduce/reduce_kernels.h"

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {
namespace {

namespace ri = reduce_internal;

const ri::Kernels& ActiveKernels() {
  static const ri::Kernels& kernels = ri::KernelsFor(ri::ActiveIsa());
  return kernels;
}

// A byte range, to check alignment and overlap without knowing the element type.
struct Bytes {
  uintptr_t begin;
  size_t size;
};

Bytes BytesOf(ConstBufferView view) {
  return {reinterpret_cast<uintptr_t>(view.data()), view.size_bytes()};
}

template <typename T>
Bytes BytesOf(absl::Span<T> span) {
  return {reinterpret_cast<uintptr_t>(span.data()), span.size() * sizeof(T)};
}

absl::Status CheckOp(absl::string_view function, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kAvg:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": unknown ReduceOp ", static_cast<int>(op)));
}

absl::Status CheckSizes(absl::string_view function, absl::string_view src_name, size_t src_size,
                        absl::string_view dst_name, size_t dst_size) {
  if (src_size == dst_size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(function, ": ", src_name, " has ", src_size,
                                                 " elements but ", dst_name, " has ", dst_size));
}

// Unaligned elements would be undefined behaviour in the scalar kernels.
absl::Status CheckAligned(absl::string_view function, absl::string_view name,
                          ConstBufferView view) {
  const size_t element = DTypeSize(view.dtype());
  if (view.empty() || reinterpret_cast<uintptr_t>(view.data()) % element == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      function, ": ", name, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(view.data())),
      " is not aligned to its ", element, "-byte ", DTypeName(view.dtype()), " elements"));
}

// The kernels read a vector of src before writing the same elements of dst, which is
// safe in place but not for a shifted overlap (nor for a widening one).
absl::Status CheckIdenticalOrDisjoint(absl::string_view function, absl::string_view src_name,
                                      Bytes src, absl::string_view dst_name, Bytes dst) {
  if (src.size == 0 || dst.size == 0) return absl::OkStatus();
  if (src.begin == dst.begin && src.size == dst.size) return absl::OkStatus();
  if (src.begin < dst.begin + dst.size && dst.begin < src.begin + src.size) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": ", src_name, " [0x", absl::Hex(src.begin), ", +", src.size,
                     " bytes) and ", dst_name, " [0x", absl::Hex(dst.begin), ", +", dst.size,
                     " bytes) overlap without being the same memory"));
  }
  return absl::OkStatus();
}

absl::Status CheckAccumulatorDType(absl::string_view function, absl::string_view name,
                                   DType dtype) {
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": ", name, " is ", DTypeName(dtype),
                   "; an f32 accumulator pairs with f32, f16 or bf16"));
}

}  // namespace

absl::Status ReduceInto(ReduceOp op, ConstBufferView src, BufferView dst) {
  constexpr absl::string_view kFunction = "ReduceInto";
  if (absl::Status status = CheckOp(kFunction, op); !status.ok()) return status;
  if (src.dtype() != dst.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(kFunction, ": src is ", DTypeName(src.dtype()),
                                                   " but dst is ", DTypeName(dst.dtype())));
  }
  for (absl::Status status : {
           CheckSizes(kFunction, "src", src.size(), "dst", dst.size()),
           CheckAligned(kFunction, "src", src),
           CheckAligned(kFunction, "dst", dst),
           CheckIdenticalOrDisjoint(kFunction, "src", BytesOf(src), "dst", BytesOf(dst)),
       }) {
    if (!status.ok()) return status;
  }
  ActiveKernels().reduce_into(op, src, dst);
  return absl::OkStatus();
}

absl::Status AccumulateInto(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
  constexpr absl::string_view kFunction = "AccumulateInto";
  for (absl::Status status : {
           CheckOp(kFunction, op),
           CheckAccumulatorDType(kFunction, "src", src.dtype()),
           CheckSizes(kFunction, "src", src.size(), "acc", acc.size()),
           CheckAligned(kFunction, "src", src),
           CheckIdenticalOrDisjoint(kFunction, "src", BytesOf(src), "acc", BytesOf(acc)),
       }) {
    if (!status.ok()) return status;
  }
  ActiveKernels().accumulate_into(op, src, acc);
  return absl::OkStatus();
}

absl::Status LoadAccumulator(ConstBufferView src, absl::Span<float> acc) {
  constexpr absl::string_view kFunction = "LoadAccumulator";
  for (absl::Status status : {
           CheckAccumulatorDType(kFunction, "src", src.dtype()),
           CheckSizes(kFunction, "src", src.size(), "acc", acc.size()),
           CheckAligned(kFunction, "src", src),
           CheckIdenticalOrDisjoint(kFunction, "src", BytesOf(src), "acc", BytesOf(acc)),
       }) {
    if (!status.ok()) return status;
  }
  ActiveKernels().load_accumulator(src, acc);
  return absl::OkStatus();
}

absl::Status StoreAccumulator(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  constexpr absl::string_view kFunction = "StoreAccumulator";
  if (divisor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFunction, ": divisor is ", divisor, "; it must be at least 1"));
  }
  for (absl::Status status : {
           CheckAccumulatorDType(kFunction, "dst", dst.dtype()),
           CheckSizes(kFunction, "acc", acc.size(), "dst", dst.size()),
           CheckAligned(kFunction, "dst", dst),
           CheckIdenticalOrDisjoint(kFunction, "acc", BytesOf(acc), "dst", BytesOf(dst)),
       }) {
    if (!status.ok()) return status;
  }
  ActiveKernels().store_accumulator(acc, divisor, dst);
  return absl::OkStatus();
}

absl::Status FinishAverage(BufferView buf, int64_t num_ranks) {
  constexpr absl::string_view kFunction = "FinishAverage";
  if (num_ranks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFunction, ": num_ranks is ", num_ranks, "; it must be at least 1"));
  }
  if (absl::Status status = CheckAligned(kFunction, "buf", buf); !status.ok()) return status;
  ActiveKernels().finish_average(buf, num_ranks);
  return absl::OkStatus();
}

}  // namespace loom
