// The f32 accumulator kernels, AccumulateInto, LoadAccumulator and StoreAccumulator:
// f32 / f16 / bf16 x op or divisor x ISA against the reference and, bit for bit, the
// scalar kernel.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "collectives/reduce/internal/reduce_kernels_testing.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace reduce_testing {
namespace {

// AccumulateInto: f32 / f16 / bf16 sources x op x ISA.

class AccumulateIntoTest : public ReduceParamTest {};

TEST_P(AccumulateIntoTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 100 + static_cast<int64_t>(op())));
      for (const size_t length : kLengths) {
        const std::vector<T> src = RandomPair<T>(length, rng).first;
        const std::vector<float> acc = RandomPair<float>(length, rng).second;
        for (const size_t offset : kOffsets) {
          CheckAccumulateInto<T>(isa(), op(), src, acc, offset);
        }
      }
    }
  });
}

TEST_P(AccumulateIntoTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<T> src;
      std::vector<float> acc;
      for (const float a : Specials<float>()) {
        for (const T& b : Specials<T>()) {
          acc.push_back(a);
          src.push_back(b);
        }
      }
      for (const size_t offset : kOffsets) CheckAccumulateInto<T>(isa(), op(), src, acc, offset);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesOpsIsas, AccumulateIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

// ---------------------------------------------------------------------------------
// LoadAccumulator: f32 / f16 / bf16 x ISA.

class LoadAccumulatorTest : public DTypeIsaTest {};

TEST_P(LoadAccumulatorTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 200));
      for (const size_t length : kLengths) {
        const std::vector<T> src = RandomPair<T>(length, rng).first;
        for (const size_t offset : kOffsets) CheckLoadAccumulator<T>(isa(), src, offset);
      }
    }
  });
}

TEST_P(LoadAccumulatorTest, WidensSpecialValuesAndEvery16BitPattern) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<T> src = Specials<T>();
      if constexpr (kIsHalf<T>) {
        for (uint32_t bits = 0; bits <= 0xFFFF; ++bits)
          src.push_back(T{static_cast<uint16_t>(bits)});
      }
      for (const size_t offset : kOffsets) CheckLoadAccumulator<T>(isa(), src, offset);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesIsas, LoadAccumulatorTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DTypeIsaName);

// ---------------------------------------------------------------------------------
// StoreAccumulator: f32 / f16 / bf16 x divisor (rank count) x ISA.



class StoreAccumulatorTest : public DivideTest {};

TEST_P(StoreAccumulatorTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 300 + divisor()));
      for (const size_t length : kLengths) {
        const std::vector<float> acc = RandomPair<float>(length, rng).second;
        for (const size_t offset : kOffsets) {
          CheckStoreAccumulator<T>(isa(), acc, divisor(), offset);
        }
      }
    }
  });
}

TEST_P(StoreAccumulatorTest, RoundsSpecialValuesAndEvery16BitNeighbourhood) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<float> acc = Specials<float>();
      // Around each bf16 / f16 value: the value, and the f32s just below, at and above
      // the midpoint to its upper neighbour, so every rounding tie and carry shows.
      for (uint32_t pattern = 0; pattern <= 0xFFFF; pattern += 7) {
        const uint32_t bf16 = pattern << 16;
        for (const uint32_t bits : {bf16, bf16 | 0x7FFFu, bf16 | 0x8000u, bf16 | 0x8001u}) {
          acc.push_back(FromBits<float>(bits));
        }
        const uint32_t f16 = static_cast<uint32_t>(
            Bits(static_cast<float>(Decode(Float16{static_cast<uint16_t>(pattern)}))));
        for (const uint32_t bits : {f16, f16 + 0x0FFFu, f16 + 0x1000u, f16 + 0x1001u}) {
          acc.push_back(FromBits<float>(bits));
        }
      }
      for (const size_t offset : kOffsets) {
        CheckStoreAccumulator<T>(isa(), acc, divisor(), offset);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesDivisorsIsas, StoreAccumulatorTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(kDivisors),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DivideParamName);

}  // namespace
}  // namespace reduce_testing
}  // namespace loom
