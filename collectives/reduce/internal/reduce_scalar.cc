// Scalar kernels. They define every result: the vector kernels are tested to give the
// same bits.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

namespace loom {
namespace reduce_internal {
namespace {

template <typename F>
using BitsOf = std::conditional_t<sizeof(F) == sizeof(uint32_t), uint32_t, uint64_t>;

template <typename F>
BitsOf<F> ToBits(F value) {
  BitsOf<F> bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

template <typename F>
F FromBits(BitsOf<F> bits) {
  F value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

template <typename F>
F CanonicalNaN() {
  if constexpr (std::is_same_v<F, float>) {
    return FromBits<float>(kCanonicalNaNF32Bits);
  } else {
    return FromBits<double>(kCanonicalNaNF64Bits);
  }
}

template <typename F>
F Canonicalize(F value) {
  return std::isnan(value) ? CanonicalNaN<F>() : value;
}

// MinFloat and MaxFloat return NaN when either input is NaN and order -0 below +0 (the
// minimum / maximum of IEEE 754-2019). Equal inputs differ at most in the sign of zero,
// so OR-ing their bits picks -0 and AND-ing picks +0.
template <typename F>
F MinFloat(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return CanonicalNaN<F>();
  if (a == b) return FromBits<F>(ToBits(a) | ToBits(b));
  return a < b ? a : b;
}

template <typename F>
F MaxFloat(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return CanonicalNaN<F>();
  if (a == b) return FromBits<F>(ToBits(a) & ToBits(b));
  return a > b ? a : b;
}

// Combine applies one reduction to two values of an arithmetic type (16-bit floats are
// widened by the callers). Integer sums and products are computed in an unsigned type at
// least as wide as `unsigned`, so they wrap modulo 2^bits without signed-overflow UB and
// without the promotion of narrow unsigned types to (signed) int.
template <ReduceOp kOp, typename T>
T Combine(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
      return Canonicalize(a + b);
    } else if constexpr (kOp == ReduceOp::kProd) {
      return Canonicalize(a * b);
    } else if constexpr (kOp == ReduceOp::kMin) {
      return MinFloat(a, b);
    } else {
      return MaxFloat(a, b);
    }
  } else {
    using Unsigned = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
    if constexpr (kOp == ReduceOp::kSum || kOp == ReduceOp::kAvg) {
      return static_cast<T>(static_cast<Unsigned>(a) + static_cast<Unsigned>(b));
    } else if constexpr (kOp == ReduceOp::kProd) {
      return static_cast<T>(static_cast<Unsigned>(a) * static_cast<Unsigned>(b));
    } else if constexpr (kOp == ReduceOp::kMin) {
      return a < b ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
}

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// Widen and Narrow move 16-bit floats to and from the f32 they are computed in.
template <typename T>
float Widen(T value) {
  if constexpr (kIsHalf<T>) {
    return ToFloat(value);
  } else {
    return value;
  }
}

template <typename T>
T Narrow(float value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return ToFloat16(value);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ToBFloat16(value);
  } else {
    return value;
  }
}

template <typename T>
const T* Data(ConstBufferView view) {
  return reinterpret_cast<const T*>(view.data());
}

template <typename T>
T* Data(BufferView view) {
  return reinterpret_cast<T*>(view.data());
}

// WithOp calls fn(std::integral_constant<ReduceOp, op>), with kAvg passed as kSum.
template <typename Fn>
void WithOp(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      fn(std::integral_constant<ReduceOp, ReduceOp::kSum>());
      return;
    case ReduceOp::kProd:
      fn(std::integral_constant<ReduceOp, ReduceOp::kProd>());
      return;
    case ReduceOp::kMin:
      fn(std::integral_constant<ReduceOp, ReduceOp::kMin>());
      return;
    case ReduceOp::kMax:
      fn(std::integral_constant<ReduceOp, ReduceOp::kMax>());
      return;
  }
}

// WithAccumulatorType is VisitDType for the dtypes an f32 accumulator pairs with.
template <typename Fn>
void WithAccumulatorType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn(float{});
    case DType::kF16:
      return fn(Float16{});
    case DType::kBF16:
      return fn(BFloat16{});
    default:
      return;
  }
}

// ReduceLoop: dst[i] = op(a[i], b[i]); `dst` may be `a` (in place).
template <ReduceOp kOp, typename T>
void ReduceLoop(const T* a, const T* b, T* dst, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if constexpr (kIsHalf<T>) {
      dst[i] = Narrow<T>(Combine<kOp>(Widen(a[i]), Widen(b[i])));
    } else {
      dst[i] = Combine<kOp>(a[i], b[i]);
    }
  }
}

template <ReduceOp kOp, typename T>
void AccumulateLoop(const T* src, float* acc, size_t size) {
  for (size_t i = 0; i < size; ++i) acc[i] = Combine<kOp>(acc[i], Widen(src[i]));
}

}  // namespace

void ReduceToScalar(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
  VisitDType(dst.dtype(), [&](auto type) {
    using T = decltype(type);
    WithOp(op, [&](auto kernel_op) {
      ReduceLoop<decltype(kernel_op)::value>(Data<T>(a), Data<T>(b), Data<T>(dst), dst.size());
    });
  });
}

void ReduceIntoScalar(ReduceOp op, ConstBufferView src, BufferView dst) {
  ReduceToScalar(op, dst, src, dst);
}

void AccumulateIntoScalar(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
  WithAccumulatorType(src.dtype(), [&](auto type) {
    using T = decltype(type);
    WithOp(op, [&](auto kernel_op) {
      AccumulateLoop<decltype(kernel_op)::value>(Data<T>(src), acc.data(), acc.size());
    });
  });
}

void LoadAccumulatorScalar(ConstBufferView src, absl::Span<float> acc) {
  WithAccumulatorType(src.dtype(), [&](auto type) {
    using T = decltype(type);
    const T* in = Data<T>(src);
    for (size_t i = 0; i < acc.size(); ++i) acc[i] = Widen(in[i]);
  });
}

void StoreAccumulatorScalar(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  WithAccumulatorType(dst.dtype(), [&](auto type) {
    using T = decltype(type);
    T* out = Data<T>(dst);
    if (divisor == 1) {
      for (size_t i = 0; i < acc.size(); ++i) out[i] = Narrow<T>(acc[i]);
      return;
    }
    const float scale = static_cast<float>(divisor);
    for (size_t i = 0; i < acc.size(); ++i) out[i] = Narrow<T>(acc[i] / scale);
  });
}

void FinishAverageScalar(BufferView buf, int64_t num_ranks) {
  if (num_ranks == 1) return;
  VisitDType(buf.dtype(), [&](auto type) {
    using T = decltype(type);
    T* data = Data<T>(buf);
    if constexpr (std::is_same_v<T, double>) {
      const double ranks = static_cast<double>(num_ranks);
      for (size_t i = 0; i < buf.size(); ++i) data[i] /= ranks;
    } else if constexpr (std::is_same_v<T, float> || kIsHalf<T>) {
      const float ranks = static_cast<float>(num_ranks);
      for (size_t i = 0; i < buf.size(); ++i) data[i] = Narrow<T>(Widen(data[i]) / ranks);
    } else {
      // |x / n| <= |x| for n >= 1, so the quotient always fits back into T.
      for (size_t i = 0; i < buf.size(); ++i) {
        data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / num_ranks);
      }
    }
  });
}

}  // namespace reduce_internal
}  // namespace loom
