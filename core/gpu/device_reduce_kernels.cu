// Element-wise reduction and average kernels. Each result is the one
// collectives/reduce's scalar kernels define (reduce_scalar.cc), bit for bit:
// - Floats: one IEEE operation rounded once to nearest even, with the explicitly
//   rounded intrinsics (__fadd_rn, __fmul_rn, ...) so that nvcc can never contract or
//   reassociate them. f16 / bf16 are widened exactly, combined in f32, rounded once.
// - Every NaN that sum, prod, min and max produce is the canonical quiet NaN (a GPU's
//   own NaN is 0x7FFFFFFF, x86's propagates a payload; neither is reproducible).
//   Division (the average) keeps a NaN's sign and payload and sets the quiet bit.
// - min / max order -0 below +0 and return NaN when either input is NaN (IEEE
//   754-2019 minimum / maximum), unlike fminf / fmaxf.
// - Integer sum and prod wrap modulo 2^bits (computed unsigned); the average
//   truncates toward zero.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/gpu/device_reduce_kernels.h"

namespace loom {
namespace device_reduce_internal {
namespace {

constexpr unsigned kThreads = 256;
// 8 blocks of 256 threads fill an sm_90 SM (2048 resident threads); a larger grid
// only adds block scheduling, the grid-stride loop covers the rest.
constexpr size_t kBlocksPerSm = 8;
// One 128-bit load or store per thread and operand in the main body.
constexpr size_t kVectorBytes = 16;

// 16-bit float storage types (core/half.h's Float16 / BFloat16 are host-only).
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

// No fast-math flags are in effect, so x != x is exactly isnan(x).
__device__ __forceinline__ bool IsNaN(float x) { return x != x; }
__device__ __forceinline__ bool IsNaN(double x) { return x != x; }

__device__ __forceinline__ uint32_t Bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint64_t Bits(double x) {
  return static_cast<uint64_t>(__double_as_longlong(x));
}
__device__ __forceinline__ float FromBits(uint32_t bits) { return __uint_as_float(bits); }
__device__ __forceinline__ double FromBits(uint64_t bits) {
  return __longlong_as_double(static_cast<long long>(bits));
}

// CanonicalNaN: the positive quiet NaN with payload 0 (kCanonicalNaNF32Bits and
// kCanonicalNaNF64Bits of collectives/reduce).
template <typename F>
__device__ __forceinline__ F CanonicalNaN() {
  if constexpr (std::is_same_v<F, float>) {
    return FromBits(uint32_t{0x7FC00000u});
  } else {
    return FromBits(uint64_t{0x7FF8000000000000u});
  }
}

template <typename F>
__device__ __forceinline__ F Canonicalize(F x) {
  return IsNaN(x) ? CanonicalNaN<F>() : x;
}

// Quiet keeps a NaN's sign and payload and sets its quiet bit, as x86 division does.
__device__ __forceinline__ float Quiet(float x) { return FromBits(Bits(x) | 0x00400000u); }
__device__ __forceinline__ double Quiet(double x) {
  return FromBits(Bits(x) | uint64_t{0x0008000000000000u});
}

__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }

// Widen is exact (cvt.f32.f16 reads subnormals; bf16 is the top half of an f32).
__device__ __forceinline__ float Widen(F16 x) { return __half2float(__ushort_as_half(x.bits)); }
__device__ __forceinline__ float Widen(BF16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

__device__ __forceinline__ bool IsNaN(F16 x) { return (x.bits & 0x7FFFu) > 0x7C00u; }
__device__ __forceinline__ bool IsNaN(BF16 x) { return (x.bits & 0x7FFFu) > 0x7F80u; }
__device__ __forceinline__ F16 Quiet(F16 x) { return F16{static_cast<uint16_t>(x.bits | 0x0200u)}; }
__device__ __forceinline__ BF16 Quiet(BF16 x) {
  return BF16{static_cast<uint16_t>(x.bits | 0x0040u)};
}

// Narrow rounds to nearest, ties to even, overflowing to ±Inf, as core/half.h's
// ToFloat16 / ToBFloat16 do; a NaN keeps its sign and leading payload bits, quieted.
template <typename T>
__device__ T Narrow(float value);

template <>
__device__ __forceinline__ F16 Narrow<F16>(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    return F16{static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7E00u | ((bits >> 13) & 0x3FFu))};
  }
  return F16{__half_as_ushort(__float2half_rn(value))};  // cvt.rn.f16.f32: IEEE RNE.
}

template <>
__device__ __forceinline__ BF16 Narrow<BF16>(float value) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return BF16{static_cast<uint16_t>((bits >> 16) | 0x40u)};
  // The carry of 0x7FFF (+1 for an odd kept lsb) into bit 16 is round to nearest even.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return BF16{static_cast<uint16_t>(bits >> 16)};
}

// Combine applies one op to two values of an arithmetic type.
template <KernelOp kOp, typename T>
__device__ __forceinline__ T Combine(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if constexpr (kOp == KernelOp::kSum) {
      return Canonicalize(Add(a, b));
    } else if constexpr (kOp == KernelOp::kProd) {
      return Canonicalize(Mul(a, b));
    } else {
      if (IsNaN(a) || IsNaN(b)) return CanonicalNaN<T>();
      // Equal inputs differ at most in the sign of zero: OR picks -0, AND picks +0.
      if (a == b) return FromBits(kOp == KernelOp::kMin ? Bits(a) | Bits(b) : Bits(a) & Bits(b));
      if constexpr (kOp == KernelOp::kMin) {
        return a < b ? a : b;
      } else {
        return a > b ? a : b;
      }
    }
  } else {
    // Unsigned and at least as wide as `unsigned`: wraps, with no signed-overflow UB and
    // no promotion of narrow types to int.
    using Unsigned = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
    if constexpr (kOp == KernelOp::kSum) {
      return static_cast<T>(static_cast<Unsigned>(a) + static_cast<Unsigned>(b));
    } else if constexpr (kOp == KernelOp::kProd) {
      return static_cast<T>(static_cast<Unsigned>(a) * static_cast<Unsigned>(b));
    } else if constexpr (kOp == KernelOp::kMin) {
      return a < b ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
}

// The per-element functions the kernels map: kArity inputs, one output.
template <KernelOp kOp, typename T>
struct ReduceFn {
  static constexpr int kArity = 2;
  __device__ __forceinline__ T operator()(T a, T b) const {
    if constexpr (kIsHalf<T>) {
      return Narrow<T>(Combine<kOp>(Widen(a), Widen(b)));
    } else {
      return Combine<kOp>(a, b);
    }
  }
};

template <typename T>
struct AverageFn {
  static constexpr int kArity = 1;
  int64_t num_ranks;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (std::is_same_v<T, double>) {
      return IsNaN(x) ? Quiet(x) : Div(x, static_cast<double>(num_ranks));
    } else if constexpr (std::is_same_v<T, float>) {
      return IsNaN(x) ? Quiet(x) : Div(x, static_cast<float>(num_ranks));
    } else if constexpr (kIsHalf<T>) {
      return IsNaN(x) ? Quiet(x) : Narrow<T>(Div(Widen(x), static_cast<float>(num_ranks)));
    } else {
      // |x / n| <= |x| for n >= 1, so the quotient fits back into T.
      return static_cast<T>(static_cast<int64_t>(x) / num_ranks);
    }
  }
};

template <typename T, typename Fn>
__device__ __forceinline__ void ApplyAt(const Fn& fn, const T* a, const T* b, T* out, size_t i) {
  if constexpr (Fn::kArity == 2) {
    out[i] = fn(a[i], b[i]);
  } else {
    out[i] = fn(a[i]);
  }
}

template <typename T>
union Pack {
  uint4 raw;
  T lanes[kVectorBytes / sizeof(T)];
};

__device__ __forceinline__ size_t FirstThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t GridThreads() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}

// ScalarKernel: one element per thread and step, for pointers with different offsets
// within 16 bytes (no common vector alignment exists) and for short arrays.
template <typename T, typename Fn>
__global__ void ScalarKernel(Fn fn, const T* a, const T* b, T* out, size_t count) {
  for (size_t i = FirstThread(); i < count; i += GridThreads()) ApplyAt(fn, a, b, out, i);
}

// VectorKernel: elements [head, head + packs * lanes) as 16-byte packs (a + head, b +
// head and out + head are 16-byte aligned); the head before the first boundary and the
// tail after the last full pack, each shorter than a pack, go to the first threads.
// Each element is read and written by one thread only, so out may be a or b.
template <typename T, typename Fn>
__global__ void VectorKernel(Fn fn, const T* a, const T* b, T* out, size_t head, size_t packs,
                             size_t count) {
  constexpr size_t kLanes = kVectorBytes / sizeof(T);
  const uint4* packed_a = reinterpret_cast<const uint4*>(a + head);
  const uint4* packed_b = reinterpret_cast<const uint4*>(b + head);
  uint4* packed_out = reinterpret_cast<uint4*>(out + head);
  const size_t first = FirstThread();
  for (size_t p = first; p < packs; p += GridThreads()) {
    Pack<T> x;
    Pack<T> z;
    x.raw = packed_a[p];
    if constexpr (Fn::kArity == 2) {
      Pack<T> y;
      y.raw = packed_b[p];
#pragma unroll
      for (size_t k = 0; k < kLanes; ++k) z.lanes[k] = fn(x.lanes[k], y.lanes[k]);
    } else {
#pragma unroll
      for (size_t k = 0; k < kLanes; ++k) z.lanes[k] = fn(x.lanes[k]);
    }
    packed_out[p] = z.raw;
  }
  if (first < head) ApplyAt(fn, a, b, out, first);
  const size_t tail = head + packs * kLanes + first;
  if (first < kLanes && tail < count) ApplyAt(fn, a, b, out, tail);
}

unsigned BlocksFor(size_t work, size_t max_blocks) {
  const size_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < max_blocks ? blocks : max_blocks);
}

// Launch maps fn over [0, count) on `stream`: the vector kernel when a, b and out
// share their offset within 16 bytes and at least one full pack lies past it, else
// the scalar kernel. For a unary fn, b is a.
template <typename T, typename Fn>
LaunchResult Launch(const Fn& fn, const T* a, const T* b, T* out, size_t count, cudaStream_t stream,
                    const char* vector_name, const char* scalar_name) {
  LaunchResult result;
  int device = 0;
  result.error = cudaGetDevice(&device);
  if (result.error != cudaSuccess) {
    result.call = "cudaGetDevice(&device)";
    return result;
  }
  int sms = 0;
  result.error = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (result.error != cudaSuccess) {
    result.call = "cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)";
    return result;
  }
  const size_t max_blocks = static_cast<size_t>(sms > 0 ? sms : 1) * kBlocksPerSm;
  constexpr size_t kLanes = kVectorBytes / sizeof(T);
  const uintptr_t offset = reinterpret_cast<uintptr_t>(a) % kVectorBytes;
  const bool same_offset = reinterpret_cast<uintptr_t>(b) % kVectorBytes == offset &&
                           reinterpret_cast<uintptr_t>(out) % kVectorBytes == offset;
  // Pointers are aligned to sizeof(T), so the bytes up to the boundary are whole elements.
  const size_t to_boundary = offset == 0 ? 0 : (kVectorBytes - offset) / sizeof(T);
  const size_t head = to_boundary < count ? to_boundary : count;
  const size_t packs = same_offset ? (count - head) / kLanes : 0;
  result.kernel = true;
  result.threads = kThreads;
  if (packs > 0) {
    result.call = vector_name;
    result.blocks = BlocksFor(packs, max_blocks);
    VectorKernel<T, Fn><<<result.blocks, kThreads, 0, stream>>>(fn, a, b, out, head, packs, count);
  } else {
    result.call = scalar_name;
    result.blocks = BlocksFor(count, max_blocks);
    ScalarKernel<T, Fn><<<result.blocks, kThreads, 0, stream>>>(fn, a, b, out, count);
  }
  result.error = cudaGetLastError();
  return result;
}

// VisitType calls fn(T{}) with the device storage type of `type`.
template <typename Fn>
LaunchResult VisitType(KernelType type, Fn&& fn) {
  switch (type) {
    case KernelType::kF32: return fn(float{});
    case KernelType::kF64: return fn(double{});
    case KernelType::kF16: return fn(F16{});
    case KernelType::kBF16: return fn(BF16{});
    case KernelType::kI8: return fn(int8_t{});
    case KernelType::kU8: return fn(uint8_t{});
    case KernelType::kI32: return fn(int32_t{});
    case KernelType::kI64: return fn(int64_t{});
  }
  LaunchResult invalid;
  invalid.call = "VisitType(type)";
  invalid.error = cudaErrorInvalidValue;
  return invalid;
}

template <typename T>
LaunchResult ReduceTyped(KernelOp op, const T* a, const T* b, T* out, size_t count,
                         cudaStream_t stream) {
  constexpr const char* kVector = "DeviceReduceVectorKernel";
  constexpr const char* kScalar = "DeviceReduceScalarKernel";
  switch (op) {
    case KernelOp::kSum:
      return Launch(ReduceFn<KernelOp::kSum, T>{}, a, b, out, count, stream, kVector, kScalar);
    case KernelOp::kProd:
      return Launch(ReduceFn<KernelOp::kProd, T>{}, a, b, out, count, stream, kVector, kScalar);
    case KernelOp::kMin:
      return Launch(ReduceFn<KernelOp::kMin, T>{}, a, b, out, count, stream, kVector, kScalar);
    case KernelOp::kMax:
      return Launch(ReduceFn<KernelOp::kMax, T>{}, a, b, out, count, stream, kVector, kScalar);
  }
  LaunchResult invalid;
  invalid.call = "ReduceTyped(op)";
  invalid.error = cudaErrorInvalidValue;
  return invalid;
}

}  // namespace

LaunchResult LaunchReduce(KernelOp op, KernelType type, const void* a, const void* b, void* out,
                          size_t count, cudaStream_t stream) {
  return VisitType(type, [&](auto zero) {
    using T = decltype(zero);
    return ReduceTyped<T>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                          static_cast<T*>(out), count, stream);
  });
}

LaunchResult LaunchFinishAverage(KernelType type, void* buf, size_t count, int64_t num_ranks,
                                 cudaStream_t stream) {
  return VisitType(type, [&](auto zero) {
    using T = decltype(zero);
    T* data = static_cast<T*>(buf);
    return Launch(AverageFn<T>{num_ranks}, static_cast<const T*>(data), static_cast<const T*>(data),
                  data, count, stream, "DeviceAverageVectorKernel", "DeviceAverageScalarKernel");
  });
}

}  // namespace device_reduce_internal
}  // namespace loom
