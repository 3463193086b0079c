#include "collectives/reduce/reduce_kernels.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "collectives/reduce/internal/reduce_kernels_testing.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace reduce_testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// The public functions: dispatch, the documented rules, and errors.

TEST(ActiveIsaTest, IsTheFastestSupportedIsa) {
  EXPECT_TRUE(ri::IsaSupported(ri::ActiveIsa()));
  EXPECT_TRUE(ri::IsaSupported(Isa::kScalar));
  if (ri::IsaSupported(Isa::kAvx512)) {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kAvx512);
  } else if (ri::IsaSupported(Isa::kAvx2)) {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kAvx2);
  } else {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kScalar);
  }
}

TEST(ReduceIntoApiTest, PublicFunctionMatchesTheReferenceForEveryDTypeAndOp) {
  for (const DType dtype : AllDTypes()) {
    for (const ReduceOp op : AllReduceOps()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
      VisitDType(dtype, [&](auto type) {
        using T = decltype(type);
        std::mt19937_64 rng(Seed(dtype, 500 + static_cast<int64_t>(op)));
        const auto [src, dst] = RandomPair<T>(1001, rng);
        std::vector<T> out = dst;
        LOOM_ASSERT_OK(ReduceInto(op, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                  BufferView::Of(absl::MakeSpan(out))));
        int wrong = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          wrong += Bits(out[i]) != ExpectedReduce(op, dst[i], src[i]);
        }
        EXPECT_EQ(wrong, 0);
      });
    }
  }
}

// The public ReduceTo at every start of dst within a cache line: the reference bit
// for bit, in place too, and nothing written outside dst.
TEST(ReduceToApiTest, MatchesTheReferenceAtEveryAlignment) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF64, DType::kI8}) {
    for (const ReduceOp op : AllReduceOps()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
      VisitDType(dtype, [&](auto type) {
        using T = decltype(type);
        std::mt19937_64 rng(Seed(dtype, 700 + static_cast<int64_t>(op)));
        const size_t length = 3 * 4096 / sizeof(T) + 5;
        const auto [a, b] = RandomPair<T>(length, rng);
        for (size_t offset = 0; offset < 64 / sizeof(T); offset += 3) {
          const std::vector<T> zeros(length);
          Window<T> out = Window<T>::Create(zeros, offset);
          LOOM_ASSERT_OK(ReduceTo(op, ConstBufferView::Of(absl::MakeConstSpan(a)),
                                  ConstBufferView::Of(absl::MakeConstSpan(b)),
                                  BufferView::Of(out.span())));
          Window<T> in_place = Window<T>::Create(a, offset);
          LOOM_ASSERT_OK(ReduceTo(op, ConstBufferView::Of(in_place.span()),
                                  ConstBufferView::Of(absl::MakeConstSpan(b)),
                                  BufferView::Of(in_place.span())));
          Mismatches mismatches;
          for (size_t i = 0; i < length; ++i) {
            const uint64_t expected = ExpectedReduce(op, a[i], b[i]);
            if (Bits(out.span()[i]) != expected || Bits(in_place.span()[i]) != expected) {
              mismatches.Add(absl::StrCat("[", i, "] offset ", offset));
            }
          }
          out.CheckGuards("dst", &mismatches);
          in_place.CheckGuards("in place", &mismatches);
          EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
        }
      });
    }
  }
}

TEST(ReduceToApiTest, RejectsMismatchesAndOverlapNamingThem) {
  std::vector<float> a(8), b(8), dst(8), longer(9);
  std::vector<BFloat16> half(8);
  const auto view = [](auto& v) { return BufferView::Of(absl::MakeSpan(v)); };
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, view(a), view(half), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceTo: src is bf16 but dst is f32")));
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, view(a), view(longer), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceTo: b has 9 elements but dst has 8")));
  std::vector<float> all(16);
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(all).subspan(1, 8)),
                       view(b), BufferView::Of(absl::MakeSpan(all).subspan(0, 8))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overlap without being the same memory")));
  EXPECT_THAT(ReduceTo(static_cast<ReduceOp>(9), view(a), view(b), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
}

TEST(ReduceIntoApiTest, HeaderExample) {
  std::vector<float> mine = {1.0f, -0.0f, 7.0f};
  const std::vector<float> theirs = {2.0f, 0.0f, std::numeric_limits<float>::quiet_NaN()};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kMin, ConstBufferView::Of(absl::MakeConstSpan(theirs)),
                            BufferView::Of(absl::MakeSpan(mine))));
  EXPECT_EQ(Bits(mine[0]), Bits(1.0f));
  EXPECT_EQ(Bits(mine[1]), Bits(-0.0f));
  EXPECT_EQ(Bits(mine[2]), 0x7FC00000u);

  std::vector<int32_t> counts = {7, -7, std::numeric_limits<int32_t>::max()};
  const BufferView view = BufferView::Of(absl::MakeSpan(counts));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kAvg, view, view));
  EXPECT_THAT(counts, ::testing::ElementsAre(14, -14, -2));
  LOOM_ASSERT_OK(FinishAverage(view, 4));
  EXPECT_THAT(counts, ::testing::ElementsAre(3, -3, 0));
}

TEST(ReduceIntoApiTest, MinAndMaxPropagateNaNAndOrderSignedZerosOnEveryIsa) {
  const float nan_payload = FromBits<float>(0xFFC12345u);
  const float one = 1.0f;
  for (const Isa isa : ri::AllIsas()) {
    if (!ri::IsaSupported(isa)) continue;  // The parametrized tests report the skip.
    SCOPED_TRACE(ri::IsaName(isa));
    for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<float> dst = {nan_payload, one, -0.0f, 0.0f};
      const std::vector<float> src = {one, nan_payload, 0.0f, -0.0f};
      ri::KernelsFor(isa).reduce_into(op, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                      BufferView::Of(absl::MakeSpan(dst)));
      EXPECT_EQ(Bits(dst[0]), 0x7FC00000u);
      EXPECT_EQ(Bits(dst[1]), 0x7FC00000u);
      const uint64_t zero = op == ReduceOp::kMin ? Bits(-0.0f) : Bits(0.0f);
      EXPECT_EQ(Bits(dst[2]), zero);
      EXPECT_EQ(Bits(dst[3]), zero);
    }
  }
}

TEST(ReduceIntoApiTest, SumAndProdWrapAround) {
  std::vector<int8_t> bytes = {127, -128, 100};
  const std::vector<int8_t> more = {1, -1, 3};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(more)),
                            BufferView::Of(absl::MakeSpan(bytes))));
  EXPECT_THAT(bytes, ::testing::ElementsAre(-128, 127, 103));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kProd, ConstBufferView::Of(absl::MakeConstSpan(more)),
                            BufferView::Of(absl::MakeSpan(bytes))));
  EXPECT_THAT(bytes, ::testing::ElementsAre(-128, -127, 53));  // 309 mod 256 = 53

  std::vector<int64_t> wide = {std::numeric_limits<int64_t>::min()};
  const std::vector<int64_t> minus_one = {-1};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kProd, ConstBufferView::Of(absl::MakeConstSpan(minus_one)),
                            BufferView::Of(absl::MakeSpan(wide))));
  EXPECT_EQ(wide[0], std::numeric_limits<int64_t>::min());  // -(-2^63) wraps to itself
}

TEST(AccumulatorApiTest, Bf16GradientsOfFourRanksAverageWithOneRounding) {
  // 1 + 3 * 2^-8 is not a bf16 value; summing in bf16 would round at every step
  // (1 + 2^-8 ties back to 1), the accumulator rounds once at the end.
  const std::vector<BFloat16> rank0 = {BFloat16{0x3F80}};  // 1
  const std::vector<BFloat16> tiny = {BFloat16{0x3B80}};   // 2^-8
  std::vector<float> acc(1);
  LOOM_ASSERT_OK(
      LoadAccumulator(ConstBufferView::Of(absl::MakeConstSpan(rank0)), absl::MakeSpan(acc)));
  for (int rank = 1; rank < 4; ++rank) {
    LOOM_ASSERT_OK(AccumulateInto(ReduceOp::kAvg, ConstBufferView::Of(absl::MakeConstSpan(tiny)),
                                  absl::MakeSpan(acc)));
  }
  EXPECT_EQ(acc[0], 1.01171875f);
  std::vector<BFloat16> out(1);
  LOOM_ASSERT_OK(StoreAccumulator(acc, 1, BufferView::Of(absl::MakeSpan(out))));
  EXPECT_EQ(out[0].bits, 0x3F82);  // 1.01171875 ties to even 1.015625

  std::vector<BFloat16> bf16_sum = rank0;
  for (int rank = 1; rank < 4; ++rank) {
    LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(tiny)),
                              BufferView::Of(absl::MakeSpan(bf16_sum))));
  }
  EXPECT_EQ(bf16_sum[0].bits, 0x3F80);  // each 1 + 2^-8 ties back to 1

  LOOM_ASSERT_OK(StoreAccumulator(acc, 4, BufferView::Of(absl::MakeSpan(out))));
  EXPECT_EQ(out[0].bits, 0x3E82);  // 0.2529296875 rounds to 0.25390625
}

TEST(ReduceIntoApiTest, EmptyViewsAndInPlaceAreAccepted) {
  LOOM_EXPECT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView(nullptr, 0, DType::kF32),
                            BufferView(nullptr, 0, DType::kF32)));
  std::vector<float> values = {1.5f, -2.0f};
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, view, view));
  EXPECT_THAT(values, ::testing::ElementsAre(3.0f, -4.0f));
}

TEST(ReduceIntoApiTest, ConcurrentCallsOnDisjointDestinationsSharingASource) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 8;
  const std::vector<float> src(4097, 2.0f);
  std::vector<std::vector<float>> dst(kThreads, std::vector<float>(src.size(), 1.0f));
  std::vector<std::vector<float>> acc(kThreads, std::vector<float>(src.size(), 0.0f));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                               BufferView::Of(absl::MakeSpan(dst[t]))),
                    IsOk());
        EXPECT_THAT(AccumulateInto(ReduceOp::kMax, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                   absl::MakeSpan(acc[t])),
                    IsOk());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(dst[t], ::testing::Each(1.0f + 2.0f * kRounds));
    EXPECT_THAT(acc[t], ::testing::Each(2.0f));
  }
}

TEST(ReduceIntoApiTest, RejectsMismatchedDTypesNamingBoth) {
  std::vector<float> src(4, 1.0f);
  std::vector<BFloat16> dst(4, BFloat16{0x3F80});
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                         BufferView::Of(absl::MakeSpan(dst))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceInto: src is f32 but dst is bf16")));
  EXPECT_EQ(dst[0].bits, 0x3F80);  // Nothing written.
}

TEST(ReduceIntoApiTest, RejectsMismatchedSizesNamingBoth) {
  std::vector<int32_t> src(3, 1);
  std::vector<int32_t> dst(4, 7);
  EXPECT_THAT(
      ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                 BufferView::Of(absl::MakeSpan(dst))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("src has 3 elements but dst has 4")));
  EXPECT_THAT(dst, ::testing::Each(7));
}

TEST(ReduceIntoApiTest, RejectsShiftedOverlap) {
  std::vector<float> values(10, 1.0f);
  const absl::Span<float> all = absl::MakeSpan(values);
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(all.subspan(0, 8)),
                         BufferView::Of(all.subspan(1, 8))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overlap without being the same memory")));
  EXPECT_THAT(values, ::testing::Each(1.0f));
}

TEST(ReduceIntoApiTest, RejectsElementsNotAlignedToTheirSize) {
  alignas(8) std::byte bytes[64] = {};
  const BufferView misaligned(bytes + 1, 4, DType::kF32);
  const ConstBufferView aligned(bytes + 32, 4, DType::kF32);
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, aligned, misaligned),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dst at 0x"), HasSubstr("not aligned to its 4-byte f32"))));
  EXPECT_THAT(FinishAverage(misaligned, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
}

TEST(ReduceIntoApiTest, RejectsAnUnknownOp) {
  std::vector<float> values(2, 1.0f);
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  EXPECT_THAT(ReduceInto(static_cast<ReduceOp>(9), view, view),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
  std::vector<float> acc(2);
  EXPECT_THAT(AccumulateInto(static_cast<ReduceOp>(9), view, absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
}

TEST(AccumulatorApiTest, RejectsSourcesThatAreNotF32F16OrBf16) {
  std::vector<float> acc(2, 5.0f);
  for (const DType dtype : {DType::kF64, DType::kI8, DType::kU8, DType::kI32, DType::kI64}) {
    alignas(8) std::byte bytes[16] = {};
    const ConstBufferView src(bytes, 2, dtype);
    const std::string message = absl::StrCat("src is ", DTypeName(dtype),
                                             "; an f32 accumulator pairs with f32, f16 or bf16");
    EXPECT_THAT(AccumulateInto(ReduceOp::kSum, src, absl::MakeSpan(acc)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("AccumulateInto"), HasSubstr(message))));
    EXPECT_THAT(LoadAccumulator(src, absl::MakeSpan(acc)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("LoadAccumulator"), HasSubstr(message))));
    const BufferView dst(bytes, 2, dtype);
    EXPECT_THAT(StoreAccumulator(acc, 1, dst),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("StoreAccumulator: dst is ", DTypeName(dtype)))));
  }
  EXPECT_THAT(acc, ::testing::Each(5.0f));
}

TEST(AccumulatorApiTest, RejectsMismatchedSizesNamingBoth) {
  const std::vector<Float16> src(3);
  std::vector<float> acc(5);
  EXPECT_THAT(AccumulateInto(ReduceOp::kMax, ConstBufferView::Of(absl::MakeConstSpan(src)),
                             absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AccumulateInto: src has 3 elements but acc has 5")));
  EXPECT_THAT(LoadAccumulator(ConstBufferView::Of(absl::MakeConstSpan(src)), absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LoadAccumulator: src has 3 elements but acc has 5")));
  std::vector<BFloat16> dst(4);
  EXPECT_THAT(StoreAccumulator(acc, 2, BufferView::Of(absl::MakeSpan(dst))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("StoreAccumulator: acc has 5 elements but dst has 4")));
}

TEST(AccumulatorApiTest, RejectsOverlapThatIsNotInPlace) {
  std::vector<float> values(8, 1.0f);
  const absl::Span<float> all = absl::MakeSpan(values);
  // In place, element by element: fine.
  LOOM_EXPECT_OK(AccumulateInto(ReduceOp::kSum, ConstBufferView::Of(all), all));
  EXPECT_THAT(values, ::testing::Each(2.0f));
  // bf16 widened into the f32 memory it was read from: rejected.
  const ConstBufferView bf16_in_place(reinterpret_cast<const std::byte*>(values.data()), 4,
                                      DType::kBF16);
  EXPECT_THAT(LoadAccumulator(bf16_in_place, all.subspan(0, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  const BufferView bf16_out(reinterpret_cast<std::byte*>(values.data() + 2), 4, DType::kBF16);
  EXPECT_THAT(StoreAccumulator(all.subspan(0, 4), 1, bf16_out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  EXPECT_THAT(values, ::testing::Each(2.0f));
}

TEST(AccumulatorApiTest, RejectsDivisorBelowOne) {
  const std::vector<float> acc(2, 1.0f);
  std::vector<float> dst(2, 9.0f);
  for (const int64_t divisor : {int64_t{0}, int64_t{-4}}) {
    EXPECT_THAT(
        StoreAccumulator(acc, divisor, BufferView::Of(absl::MakeSpan(dst))),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("divisor is ", divisor, "; it must be at least 1"))));
  }
  EXPECT_THAT(dst, ::testing::Each(9.0f));
}

TEST(FinishAverageApiTest, RejectsRankCountBelowOne) {
  std::vector<int32_t> values = {8, -8};
  for (const int64_t num_ranks : {int64_t{0}, int64_t{-1}}) {
    EXPECT_THAT(FinishAverage(BufferView::Of(absl::MakeSpan(values)), num_ranks),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("FinishAverage: num_ranks is ", num_ranks,
                                                "; it must be at least 1"))));
  }
  EXPECT_THAT(values, ::testing::ElementsAre(8, -8));
}

TEST(FinishAverageApiTest, IntegersTruncateTowardZero) {
  std::vector<int64_t> values = {7, -7, 6, -6, std::numeric_limits<int64_t>::min()};
  LOOM_ASSERT_OK(FinishAverage(BufferView::Of(absl::MakeSpan(values)), 2));
  EXPECT_THAT(values,
              ::testing::ElementsAre(3, -3, 3, -3, std::numeric_limits<int64_t>::min() / 2));
  std::vector<uint8_t> bytes = {255, 3};
  LOOM_ASSERT_OK(FinishAverage(BufferView::Of(absl::MakeSpan(bytes)), 4));
  EXPECT_THAT(bytes, ::testing::ElementsAre(63, 0));
}

}  // namespace
}  // namespace reduce_testing
}  // namespace loom
