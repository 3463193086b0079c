// FinishAverage, avg's final division: every dtype x rank count x ISA against the
// reference and, bit for bit, the scalar kernel.

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

// FinishAverage: every dtype x rank count x ISA.

class FinishAverageTest : public DivideTest {};

TEST_P(FinishAverageTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), 400 + divisor()));
    for (const size_t length : kLengths) {
      const std::vector<T> values = RandomPair<T>(length, rng).second;
      for (const size_t offset : kOffsets) {
        CheckFinishAverage<T>(isa(), values, divisor(), offset);
      }
    }
  });
}

TEST_P(FinishAverageTest, DividesSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const std::vector<T> values = Specials<T>();
    for (const size_t offset : kOffsets) CheckFinishAverage<T>(isa(), values, divisor(), offset);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesRankCountsIsas, FinishAverageTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(kDivisors),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DivideParamName);

}  // namespace
}  // namespace reduce_testing
}  // namespace loom
