// DeviceReduceTo and DeviceFinishAverage. The argument checks and their error texts
// run on every machine; the kernels run on a CUDA device, compared bit for bit with the
// CPU kernels of collectives/reduce, and skip (reported as skipped) where there is none.
#include "core/gpu/device_reduce.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/half.h"
#include "core/reduce_op.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kCounts[] = {0, 1, 7, 1000, 65537, (size_t{1} << 20) + 3};
constexpr ReduceOp kElementwiseOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                        ReduceOp::kMax};

bool HasDevice() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

// Real, aligned host addresses for calls that must fail before any CUDA call (the
// kernels never see them).
struct alignas(64) HostBytes {
  std::byte bytes[256] = {};
};

TEST(DeviceReduceArgsTest, RejectsAvgAndNamesTheWayToAverage) {
  HostBytes mem;
  EXPECT_THAT(
      DeviceReduceTo(ReduceOp::kAvg, DType::kF32, mem.bytes, mem.bytes, mem.bytes, 4, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("DeviceReduceTo: op avg is not element-wise; reduce with sum and "
                         "divide once with DeviceFinishAverage")));
  // Even with nothing to reduce: a forgotten division must not pass silently.
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kAvg, DType::kF32, nullptr, nullptr, nullptr, 0, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("op avg")));
}

TEST(DeviceReduceArgsTest, RejectsValuesOutsideTheEnums) {
  HostBytes mem;
  EXPECT_THAT(DeviceReduceTo(static_cast<ReduceOp>(17), DType::kF32, mem.bytes, mem.bytes,
                             mem.bytes, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceReduceTo: unknown ReduceOp 17")));
  EXPECT_THAT(
      DeviceReduceTo(ReduceOp::kSum, static_cast<DType>(42), mem.bytes, mem.bytes, mem.bytes, 4,
                     nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("DeviceReduceTo: unknown DType 42")));
  EXPECT_THAT(DeviceFinishAverage(static_cast<DType>(42), mem.bytes, 4, 2, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceFinishAverage: unknown DType 42")));
}

TEST(DeviceReduceArgsTest, RejectsNullPointersNamingThem) {
  HostBytes mem;
  std::byte* p = mem.bytes;
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, nullptr, p, p, 5, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceReduceTo: a is null with count 5")));
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kMin, DType::kI64, p, nullptr, p, 3, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceReduceTo: b is null with count 3")));
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kMax, DType::kBF16, p, p, nullptr, 1, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceReduceTo: out is null with count 1")));
  EXPECT_THAT(DeviceFinishAverage(DType::kF16, nullptr, 9, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceFinishAverage: buf is null with count 9")));
}

TEST(DeviceReduceArgsTest, RejectsPointersNotAlignedToTheirElements) {
  HostBytes mem;
  std::byte* p = mem.bytes;
  const std::string odd = absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p + 2)));
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, p + 2, p + 64, p + 128, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("DeviceReduceTo: a (", odd,
                                              ") is not aligned to its 4-byte f32 elements"))));
  EXPECT_THAT(
      DeviceReduceTo(ReduceOp::kProd, DType::kF64, p, p + 68, p + 128, 4, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("b (0x"), HasSubstr("not aligned to its 8-byte f64 elements"))));
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kBF16, p, p + 64, p + 129, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("out (0x"), HasSubstr("its 2-byte bf16 elements"))));
  EXPECT_THAT(DeviceFinishAverage(DType::kI32, p + 1, 4, 2, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("DeviceFinishAverage: buf (0x"), HasSubstr("4-byte i32"))));
  // One-byte elements are aligned anywhere: this fails later, at the partial overlap.
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kU8, p + 1, p + 100, p + 3, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlaps a")));
}

TEST(DeviceReduceArgsTest, RejectsPartialOverlapButAcceptsTheSameMemory) {
  HostBytes mem;
  std::byte* p = mem.bytes;
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, p, p + 128, p + 4, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("overlaps a (0x"), HasSubstr("over 16 bytes without being "
                                                                    "the same memory"))));
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, p + 128, p, p + 12, 4, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlaps b (0x")));
  // Adjacent and identical ranges pass the checks; without a device they then fail at
  // the launch (with one, the kernel must not touch these host addresses).
  if (!HasDevice()) {
    EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, p, p + 16, p + 32, 4, nullptr),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cudaGetDevice")));
    EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, p, p + 16, p, 4, nullptr),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cudaGetDevice")));
  }
}

TEST(DeviceReduceArgsTest, RejectsCountsWhoseByteSizeOverflows) {
  HostBytes mem;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;
  EXPECT_THAT(
      DeviceReduceTo(ReduceOp::kSum, DType::kF32, mem.bytes, mem.bytes, mem.bytes, huge, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("count ", huge, " of f32 overflows the byte size"))));
  EXPECT_THAT(DeviceFinishAverage(DType::kI64, mem.bytes, huge, 2, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("of i64 overflows")));
}

TEST(DeviceReduceArgsTest, FinishAverageNeedsAtLeastOneRank) {
  HostBytes mem;
  EXPECT_THAT(DeviceFinishAverage(DType::kF32, mem.bytes, 4, 0, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceFinishAverage: num_ranks 0 < 1")));
  EXPECT_THAT(DeviceFinishAverage(DType::kF32, mem.bytes, 4, -3, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_ranks -3 < 1")));
}

// Nothing to do means no CUDA call at all, so these succeed on any machine.
TEST(DeviceReduceArgsTest, EmptyCallsAndOneRankSucceedWithoutTouchingTheDevice) {
  HostBytes mem;
  for (const ReduceOp op : kElementwiseOps) {
    for (const DType dtype : AllDTypes()) {
      EXPECT_THAT(DeviceReduceTo(op, dtype, nullptr, nullptr, nullptr, 0, nullptr), IsOk());
    }
  }
  EXPECT_THAT(DeviceFinishAverage(DType::kBF16, nullptr, 0, 8, nullptr), IsOk());
  EXPECT_THAT(DeviceFinishAverage(DType::kI8, mem.bytes, 64, 1, nullptr), IsOk());
  for (const std::byte b : mem.bytes) ASSERT_EQ(b, std::byte{0});
}

TEST(DeviceReduceArgsTest, LaunchWithoutADeviceIsFailedPreconditionNamingTheCall) {
  if (HasDevice()) GTEST_SKIP() << "this machine has a CUDA device";
  HostBytes mem;
  EXPECT_THAT(DeviceReduceTo(ReduceOp::kSum, DType::kF32, mem.bytes, mem.bytes + 64,
                             mem.bytes + 128, 4, nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("DeviceReduceTo: cudaGetDevice(&device) failed: cudaError")));
  EXPECT_THAT(DeviceFinishAverage(DType::kF16, mem.bytes, 4, 3, nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("DeviceFinishAverage: cudaGetDevice(&device) failed")));
}

// --- On a device: bitwise against the CPU kernels. -----------------------------------

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15u;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9u;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBu;
  return x ^ (x >> 31);
}

// Element i of a seeded input: for floats, every fourth is an arbitrary bit pattern
// (NaNs with payloads, Infs, subnormals, extremes); the rest have random mantissas and
// exponents within 2^±8, so sums and products round (and f16 products overflow). Fixed
// slots plant the cases random bits rarely hit: (-0, +0) and (+0, -0) for min / max,
// equal values, a signaling NaN with a payload (quieted, kept or canonicalized),
// (+Inf, -Inf) for sum and (0, Inf) for prod. Integers: random, or small so that
// products do not always wrap, and equal pairs.
template <typename T>
T Element(uint64_t seed, size_t i, bool first) {
  const uint64_t r = SplitMix64(seed * 0x100000001B3u + i);
  const size_t slot = i % 61;
  if constexpr (std::is_integral_v<T>) {
    if (slot == 7) return static_cast<T>(SplitMix64(i));  // Same in a and b.
    return static_cast<T>(i % 4 == 0 ? r % 21 : r);
  } else {
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t,
                                    std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
    constexpr int kBits = 8 * sizeof(T);
    // Stored mantissa bits of T.
    constexpr int kMantissa = std::is_same_v<T, double>    ? 52
                              : std::is_same_v<T, float>   ? 23
                              : std::is_same_v<T, Float16> ? 10
                                                           : 7;
    const auto from_bits = [](uint64_t bits) {
      T value;
      const Bits narrow = static_cast<Bits>(bits);
      std::memcpy(static_cast<void*>(&value), &narrow, sizeof(T));
      return value;
    };
    const auto from_float = [](float f) {
      if constexpr (std::is_same_v<T, Float16>) {
        return ToFloat16(f);
      } else if constexpr (std::is_same_v<T, BFloat16>) {
        return ToBFloat16(f);
      } else {
        return static_cast<T>(f);
      }
    };
    const float inf = std::numeric_limits<float>::infinity();
    switch (slot) {
      case 5: return from_float(first ? -0.0f : 0.0f);
      case 6: return from_float(first ? 0.0f : -0.0f);
      case 8: return from_float(1.5f);
      case 9:
        if (!first) break;
        // Exponent all ones, quiet bit clear, payload nonzero, random sign.
        return from_bits((r >> 63 << (kBits - 1)) |
                         ((~uint64_t{0} >> (64 - kBits + 1 + kMantissa)) << kMantissa) |
                         (r & (~uint64_t{0} >> (65 - kMantissa))) | 1);
      case 10: return from_float(first ? inf : -inf);
      case 11: return from_float(first ? 0.0f : inf);
      default: break;
    }
    if (i % 4 == 0) return from_bits(r);
    if constexpr (std::is_same_v<T, double>) {
      const uint64_t exponent = uint64_t{1023 - 8 + (r >> 40) % 17} << 52;
      return from_bits((r >> 63 << 63) | exponent | (SplitMix64(r) & 0xFFFFFFFFFFFFFu));
    } else {
      const uint32_t exponent = static_cast<uint32_t>(127 - 8 + (r >> 40) % 17) << 23;
      return from_float(half_internal::BitsToFloat(static_cast<uint32_t>(r >> 63 << 31) | exponent |
                                                   static_cast<uint32_t>(r & 0x7FFFFFu)));
    }
  }
}

std::vector<std::byte> Input(DType dtype, size_t count, uint64_t seed, bool first) {
  std::vector<std::byte> bytes(count * DTypeSize(dtype));
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < count; ++i) {
      const T value = Element<T>(seed, i, first);
      std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
    }
  });
  return bytes;
}

std::string HexElement(const std::byte* p, size_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, size);  // Little-endian: the low bytes are the element.
  return absl::StrCat("0x", absl::Hex(bits, absl::PadSpec(static_cast<int>(2 * size))));
}

// FirstMismatch: "" when got == want, else the first differing element, spelled out
// with the inputs that produced it.
std::string FirstMismatch(DType dtype, const std::vector<std::byte>& got,
                          const std::vector<std::byte>& want, const std::vector<std::byte>& a,
                          const std::vector<std::byte>* b) {
  if (got == want) return "";
  const size_t size = DTypeSize(dtype);
  size_t i = 0;
  while (std::memcmp(got.data() + i * size, want.data() + i * size, size) == 0) ++i;
  return absl::StrCat(
      "element ", i, " of ", want.size() / size, ": a ", HexElement(a.data() + i * size, size),
      b ? absl::StrCat(", b ", HexElement(b->data() + i * size, size)) : "", " -> got ",
      HexElement(got.data() + i * size, size), ", want ", HexElement(want.data() + i * size, size));
}

// The device comparisons are only as strong as their inputs and their reports: checked
// here, without a device.
TEST(DeviceReduceInputsTest, CoverTheEdgeCasesAndMismatchesAreReported) {
  constexpr size_t kCount = 1000;
  for (const DType dtype : AllDTypes()) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<std::byte> a = Input(dtype, kCount, 11, /*first=*/true);
    const std::vector<std::byte> b = Input(dtype, kCount, 12, /*first=*/false);
    const size_t size = DTypeSize(dtype);
    size_t equal = 0;
    for (size_t i = 0; i < kCount; ++i) {
      equal += std::memcmp(a.data() + i * size, b.data() + i * size, size) == 0;
    }
    EXPECT_LT(equal, kCount / 10);  // Distinct inputs, save the planted ties.
    EXPECT_GT(equal, 0u);
    if (IsFloatingPoint(dtype)) {
      size_t nans = 0;
      size_t negative_zeros = 0;
      VisitDType(dtype, [&](auto zero) {
        using T = decltype(zero);
        for (size_t i = 0; i < kCount; ++i) {
          T x;
          std::memcpy(static_cast<void*>(&x), a.data() + i * size, size);
          T y;
          std::memcpy(static_cast<void*>(&y), b.data() + i * size, size);
          if constexpr (std::is_floating_point_v<T>) {
            nans += std::isnan(x) || std::isnan(y);
            negative_zeros += (x == 0 && std::signbit(x)) + (y == 0 && std::signbit(y));
          } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
            nans += std::isnan(ToFloat(x)) || std::isnan(ToFloat(y));
            negative_zeros += (x.bits == 0x8000) + (y.bits == 0x8000);
          }
        }
      });
      EXPECT_GE(negative_zeros, 2 * (kCount / 61));  // One in each planted (-0, +0) pair.
      EXPECT_GE(nans, kCount / 61);                  // The planted signaling NaNs, at least.
    }
    std::vector<std::byte> changed = a;
    changed[3 * size] ^= std::byte{1};
    EXPECT_EQ(FirstMismatch(dtype, a, a, a, &b), "");
    EXPECT_THAT(FirstMismatch(dtype, changed, a, a, &b),
                AllOf(HasSubstr("element 3 of 1000: a 0x"), HasSubstr(", b 0x"),
                      HasSubstr("-> got 0x"), HasSubstr(", want 0x")));
  }
}

// Where the operands sit. Offsets are in elements from a 256-byte aligned allocation;
// an operand one element in shares its offset within 16 bytes with the others (vector
// kernel with a scalar head) or not (scalar kernel).
enum class Placement { kAligned, kAllShifted, kMixedOffsets, kInPlaceA, kInPlaceB };
constexpr Placement kPlacements[] = {Placement::kAligned, Placement::kAllShifted,
                                     Placement::kMixedOffsets, Placement::kInPlaceA,
                                     Placement::kInPlaceB};

const char* PlacementName(Placement p) {
  switch (p) {
    case Placement::kAligned: return "aligned";
    case Placement::kAllShifted: return "all one element in";
    case Placement::kMixedOffsets: return "a one element in, b and out aligned";
    case Placement::kInPlaceA: return "in place, out = a (one element in, b aligned)";
    case Placement::kInPlaceB: return "in place, out = b (all one element in)";
  }
  return "?";
}

constexpr std::byte kGuard{0xCD};

// DeviceArrays: three device buffers with room for `capacity` elements plus guards.
struct DeviceArrays {
  static absl::StatusOr<DeviceArrays> Create(size_t capacity, size_t element_size) {
    DeviceArrays arrays;
    const size_t bytes = (capacity + 2) * element_size;
    LOOM_ASSIGN_OR_RETURN(arrays.a, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
    LOOM_ASSIGN_OR_RETURN(arrays.b, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
    LOOM_ASSIGN_OR_RETURN(arrays.out, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
    return arrays;
  }
  DeviceBuffer a, b, out;
};

// Guarded copies `data` into `buffer` at element `offset` inside a region of count + 2
// elements filled with kGuard.
absl::Status Guarded(DeviceBuffer& buffer, const std::vector<std::byte>& data, size_t offset,
                     size_t size) {
  std::vector<std::byte> region(data.size() + 2 * size, kGuard);
  std::memcpy(region.data() + offset * size, data.data(), data.size());
  return buffer.CopyFromHost(region);
}

// Unguarded reads the count + 2 element region back, checks that only [offset, offset +
// count) changed from kGuard, and returns those elements.
absl::StatusOr<std::vector<std::byte>> Unguarded(const DeviceBuffer& buffer, size_t count,
                                                 size_t offset, size_t size) {
  std::vector<std::byte> region((count + 2) * size);
  LOOM_RETURN_IF_ERROR(buffer.CopyToHost(absl::MakeSpan(region)));
  for (size_t i = 0; i < region.size(); ++i) {
    if ((i < offset * size || i >= (offset + count) * size) && region[i] != kGuard) {
      return absl::InternalError(absl::StrCat("byte ", i, " outside the ", count,
                                              " elements at offset ", offset, " was written"));
    }
  }
  return std::vector<std::byte>(region.begin() + offset * size,
                                region.begin() + (offset + count) * size);
}

absl::Status Drain(CudaStream& stream) {
  return stream.Synchronize(absl::Now() + absl::Seconds(60));
}

class DeviceReduceToTest : public ::testing::TestWithParam<std::tuple<DType, ReduceOp>> {};

TEST_P(DeviceReduceToTest, MatchesTheCpuKernelsBitwise) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  const auto [dtype, op] = GetParam();
  const size_t size = DTypeSize(dtype);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceArrays dev, DeviceArrays::Create(kCounts[5], size));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create(0));
  for (const size_t count : kCounts) {
    const std::vector<std::byte> a = Input(dtype, count, 1 + count, /*first=*/true);
    const std::vector<std::byte> b = Input(dtype, count, 2 + count, /*first=*/false);
    std::vector<std::byte> want(a.size());
    ASSERT_THAT(
        ReduceTo(op, ConstBufferView(a.data(), count, dtype),
                 ConstBufferView(b.data(), count, dtype), BufferView(want.data(), count, dtype)),
        IsOk());
    for (const Placement placement : kPlacements) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), ", count ", count, ", ",
                                PlacementName(placement)));
      const size_t a_at = placement == Placement::kAligned ? 0 : 1;
      const size_t b_at =
          placement == Placement::kAllShifted || placement == Placement::kInPlaceB ? 1 : 0;
      const size_t out_at = placement == Placement::kAllShifted ? 1 : 0;
      ASSERT_THAT(Guarded(dev.a, a, a_at, size), IsOk());
      ASSERT_THAT(Guarded(dev.b, b, b_at, size), IsOk());
      ASSERT_THAT(Guarded(dev.out, std::vector<std::byte>(a.size(), kGuard), out_at, size), IsOk());
      // Pageable-host cudaMemcpy may return before its DMA lands, and the stream does
      // not wait on the legacy default stream.
      ASSERT_THAT(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize()"), IsOk());
      const std::byte* pa = dev.a.data() + a_at * size;
      const std::byte* pb = dev.b.data() + b_at * size;
      const DeviceBuffer* result = placement == Placement::kInPlaceA   ? &dev.a
                                   : placement == Placement::kInPlaceB ? &dev.b
                                                                       : &dev.out;
      const size_t result_at = placement == Placement::kInPlaceA   ? a_at
                               : placement == Placement::kInPlaceB ? b_at
                                                                   : out_at;
      std::byte* pout = const_cast<DeviceBuffer*>(result)->data() + result_at * size;
      ASSERT_THAT(DeviceReduceTo(op, dtype, pa, pb, pout, count, stream.get()), IsOk());
      ASSERT_THAT(Drain(stream), IsOk());
      LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> got,
                                Unguarded(*result, count, result_at, size));
      ASSERT_EQ(FirstMismatch(dtype, got, want, a, &b), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOps, DeviceReduceToTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(kElementwiseOps)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, ReduceOp>>& param) {
                           return absl::StrCat(DTypeName(std::get<0>(param.param)), "_",
                                               ReduceOpName(std::get<1>(param.param)));
                         });

class DeviceFinishAverageTest : public ::testing::TestWithParam<DType> {};

TEST_P(DeviceFinishAverageTest, MatchesTheCpuKernelsBitwise) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  const DType dtype = GetParam();
  const size_t size = DTypeSize(dtype);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceArrays dev, DeviceArrays::Create(kCounts[5], size));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create(0));
  for (const size_t count : kCounts) {
    const std::vector<std::byte> sums = Input(dtype, count, 3 + count, /*first=*/true);
    for (const int64_t ranks : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{1} << 40}) {
      std::vector<std::byte> want = sums;
      ASSERT_THAT(FinishAverage(BufferView(want.data(), count, dtype), ranks), IsOk());
      for (const size_t at : {size_t{0}, size_t{1}}) {
        SCOPED_TRACE(
            absl::StrCat(DTypeName(dtype), ", count ", count, ", ", ranks, " ranks, offset ", at));
        ASSERT_THAT(Guarded(dev.out, sums, at, size), IsOk());
        ASSERT_THAT(CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize()"), IsOk());
        ASSERT_THAT(
            DeviceFinishAverage(dtype, dev.out.data() + at * size, count, ranks, stream.get()),
            IsOk());
        ASSERT_THAT(Drain(stream), IsOk());
        LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<std::byte> got,
                                  Unguarded(dev.out, count, at, size));
        ASSERT_EQ(FirstMismatch(dtype, got, want, sums, nullptr), "");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DeviceFinishAverageTest, ::testing::ValuesIn(AllDTypes()),
                         [](const ::testing::TestParamInfo<DType>& param) {
                           return std::string(DTypeName(param.param));
                         });

}  // namespace
}  // namespace loom
