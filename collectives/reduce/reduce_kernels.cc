#include "collectives/reduce/reduce_kernels.h"

#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"
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

// The checks are plain comparisons, inline; building an error message is not, and
// happens only when one fails (the *Error functions, out of line and cold). On the
// latency path of a small collective these functions run several times per call.

bool IsValid(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
    case ReduceOp::kAvg:
      return true;
  }
  return false;
}

// Unaligned elements would be undefined behaviour in the scalar kernels. Element
// sizes are powers of two.
bool IsAligned(ConstBufferView view) {
  return view.empty() ||
         (reinterpret_cast<uintptr_t>(view.data()) & (DTypeSize(view.dtype()) - 1)) == 0;
}

// The kernels read a vector of src before writing the same elements of dst, which is
// safe in place but not for a shifted overlap (nor for a widening one).
bool IdenticalOrDisjoint(Bytes src, Bytes dst) {
  if (src.size == 0 || dst.size == 0) return true;
  if (src.begin == dst.begin && src.size == dst.size) return true;
  return !(src.begin < dst.begin + dst.size && dst.begin < src.begin + src.size);
}

bool IsAccumulatorDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status OpError(absl::string_view function,
                                                                ReduceOp op) {
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": unknown ReduceOp ", static_cast<int>(op)));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status DTypeMismatchError(
    absl::string_view function, DType src, DType dst) {
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": src is ", DTypeName(src), " but dst is ", DTypeName(dst)));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status SizeError(absl::string_view function,
                                                                  absl::string_view src_name,
                                                                  size_t src_size,
                                                                  absl::string_view dst_name,
                                                                  size_t dst_size) {
  return absl::InvalidArgumentError(absl::StrCat(function, ": ", src_name, " has ", src_size,
                                                 " elements but ", dst_name, " has ", dst_size));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status AlignmentError(absl::string_view function,
                                                                       absl::string_view name,
                                                                       ConstBufferView view) {
  return absl::InvalidArgumentError(absl::StrCat(
      function, ": ", name, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(view.data())),
      " is not aligned to its ", DTypeSize(view.dtype()), "-byte ", DTypeName(view.dtype()),
      " elements"));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status OverlapError(absl::string_view function,
                                                                     absl::string_view src_name,
                                                                     Bytes src,
                                                                     absl::string_view dst_name,
                                                                     Bytes dst) {
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": ", src_name, " [0x", absl::Hex(src.begin), ", +", src.size,
                   " bytes) and ", dst_name, " [0x", absl::Hex(dst.begin), ", +", dst.size,
                   " bytes) overlap without being the same memory"));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status AccumulatorDTypeError(
    absl::string_view function, absl::string_view name, DType dtype) {
  return absl::InvalidArgumentError(
      absl::StrCat(function, ": ", name, " is ", DTypeName(dtype),
                   "; an f32 accumulator pairs with f32, f16 or bf16"));
}

}  // namespace

absl::Status ReduceInto(ReduceOp op, ConstBufferView src, BufferView dst) {
  constexpr absl::string_view kFunction = "ReduceInto";
  if (!IsValid(op)) return OpError(kFunction, op);
  if (src.dtype() != dst.dtype()) return DTypeMismatchError(kFunction, src.dtype(), dst.dtype());
  if (src.size() != dst.size()) return SizeError(kFunction, "src", src.size(), "dst", dst.size());
  if (!IsAligned(src)) return AlignmentError(kFunction, "src", src);
  if (!IsAligned(dst)) return AlignmentError(kFunction, "dst", dst);
  if (!IdenticalOrDisjoint(BytesOf(src), BytesOf(dst))) {
    return OverlapError(kFunction, "src", BytesOf(src), "dst", BytesOf(dst));
  }
  ActiveKernels().reduce_into(op, src, dst);
  return absl::OkStatus();
}

absl::Status ReduceTo(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
  constexpr absl::string_view kFunction = "ReduceTo";
  if (!IsValid(op)) return OpError(kFunction, op);
  if (a.dtype() != dst.dtype()) return DTypeMismatchError(kFunction, a.dtype(), dst.dtype());
  if (b.dtype() != dst.dtype()) return DTypeMismatchError(kFunction, b.dtype(), dst.dtype());
  if (a.size() != dst.size()) return SizeError(kFunction, "a", a.size(), "dst", dst.size());
  if (b.size() != dst.size()) return SizeError(kFunction, "b", b.size(), "dst", dst.size());
  if (!IsAligned(a)) return AlignmentError(kFunction, "a", a);
  if (!IsAligned(b)) return AlignmentError(kFunction, "b", b);
  if (!IsAligned(dst)) return AlignmentError(kFunction, "dst", dst);
  if (!IdenticalOrDisjoint(BytesOf(a), BytesOf(dst))) {
    return OverlapError(kFunction, "a", BytesOf(a), "dst", BytesOf(dst));
  }
  if (!IdenticalOrDisjoint(BytesOf(b), BytesOf(dst))) {
    return OverlapError(kFunction, "b", BytesOf(b), "dst", BytesOf(dst));
  }
  ActiveKernels().reduce_to(op, a, b, dst);
  return absl::OkStatus();
}

absl::Status AccumulateInto(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
  constexpr absl::string_view kFunction = "AccumulateInto";
  if (!IsValid(op)) return OpError(kFunction, op);
  if (!IsAccumulatorDType(src.dtype())) return AccumulatorDTypeError(kFunction, "src", src.dtype());
  if (src.size() != acc.size()) return SizeError(kFunction, "src", src.size(), "acc", acc.size());
  if (!IsAligned(src)) return AlignmentError(kFunction, "src", src);
  if (!IdenticalOrDisjoint(BytesOf(src), BytesOf(acc))) {
    return OverlapError(kFunction, "src", BytesOf(src), "acc", BytesOf(acc));
  }
  ActiveKernels().accumulate_into(op, src, acc);
  return absl::OkStatus();
}

absl::Status LoadAccumulator(ConstBufferView src, absl::Span<float> acc) {
  constexpr absl::string_view kFunction = "LoadAccumulator";
  if (!IsAccumulatorDType(src.dtype())) return AccumulatorDTypeError(kFunction, "src", src.dtype());
  if (src.size() != acc.size()) return SizeError(kFunction, "src", src.size(), "acc", acc.size());
  if (!IsAligned(src)) return AlignmentError(kFunction, "src", src);
  if (!IdenticalOrDisjoint(BytesOf(src), BytesOf(acc))) {
    return OverlapError(kFunction, "src", BytesOf(src), "acc", BytesOf(acc));
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
  if (!IsAccumulatorDType(dst.dtype())) return AccumulatorDTypeError(kFunction, "dst", dst.dtype());
  if (acc.size() != dst.size()) return SizeError(kFunction, "acc", acc.size(), "dst", dst.size());
  if (!IsAligned(dst)) return AlignmentError(kFunction, "dst", dst);
  if (!IdenticalOrDisjoint(BytesOf(acc), BytesOf(dst))) {
    return OverlapError(kFunction, "acc", BytesOf(acc), "dst", BytesOf(dst));
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
  if (!IsAligned(buf)) return AlignmentError(kFunction, "buf", buf);
  ActiveKernels().finish_average(buf, num_ranks);
  return absl::OkStatus();
}

}  // namespace loom
