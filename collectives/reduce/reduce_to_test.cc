// The kernels that combine two buffers of one dtype, ReduceInto (dst = op(dst, src)) and
// ReduceTo (dst = op(a, b)): every dtype x op x ISA against the reference and, bit for
// bit, the scalar kernel, at every length and offset, with no byte outside the windows
// touched.

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

// ReduceInto: every dtype x op x ISA.

class ReduceIntoTest : public ReduceParamTest {};

TEST_P(ReduceIntoTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), static_cast<int64_t>(op())));
    for (const size_t length : kLengths) {
      const auto [src, dst] = RandomPair<T>(length, rng);
      for (const size_t offset : kOffsets) {
        CheckReduceInto<T>(isa(), op(), src, dst, offset);
      }
    }
  });
}

TEST_P(ReduceIntoTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const auto [src, dst] = SpecialPairs<T>();
    for (const size_t offset : kOffsets) CheckReduceInto<T>(isa(), op(), src, dst, offset);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesOpsIsas, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

// ---------------------------------------------------------------------------------
// ReduceTo (three operands): every dtype x op x ISA, out of place and with dst = b.

// CheckReduceTo runs `isa`'s reduce_to on (a, b) into a fresh window and, in place,
// into a copy of b, and holds both to the reference bit for bit.
template <typename T>
void CheckReduceTo(Isa isa, ReduceOp op, absl::Span<const T> a, absl::Span<const T> b,
                   size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", a.size(), ", offset ", offset));
  Window<T> a_window = Window<T>::Create(a, offset);
  Window<T> b_window = Window<T>::Create(b, offset);
  const std::vector<T> zeros(a.size());
  Window<T> out_window = Window<T>::Create(zeros, offset);
  ri::KernelsFor(isa).reduce_to(op, ConstBufferView::Of(a_window.span()),
                                ConstBufferView::Of(b_window.span()),
                                BufferView::Of(out_window.span()));
  Window<T> in_place = Window<T>::Create(b, offset);
  ri::KernelsFor(isa).reduce_to(op, ConstBufferView::Of(a_window.span()),
                                ConstBufferView::Of(in_place.span()),
                                BufferView::Of(in_place.span()));
  Mismatches mismatches;
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t expected = ExpectedReduce(op, a[i], b[i]);
    if (Bits(out_window.span()[i]) != expected || Bits(in_place.span()[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] a ", Hex(Bits(a[i])), " b ", Hex(Bits(b[i])),
                                  ": got ", Hex(Bits(out_window.span()[i])), ", in place ",
                                  Hex(Bits(in_place.span()[i])), ", expected ", Hex(expected)));
    }
    if (Bits(a_window.span()[i]) != Bits(a[i]) || Bits(b_window.span()[i]) != Bits(b[i])) {
      mismatches.Add(absl::StrCat("[", i, "] an operand changed"));
    }
  }
  out_window.CheckGuards("dst", &mismatches);
  in_place.CheckGuards("in place", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

class ReduceToTest : public ReduceParamTest {};

TEST_P(ReduceToTest, MatchesReferenceAtEveryLengthAndOffsetOutOfPlaceAndInPlace) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), 50 + static_cast<int64_t>(op())));
    for (const size_t length : kLengths) {
      const auto [a, b] = RandomPair<T>(length, rng);
      for (const size_t offset : kOffsets) CheckReduceTo<T>(isa(), op(), a, b, offset);
    }
  });
}

TEST_P(ReduceToTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const auto [a, b] = SpecialPairs<T>();
    for (const size_t offset : kOffsets) CheckReduceTo<T>(isa(), op(), a, b, offset);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesOpsIsas, ReduceToTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

}  // namespace
}  // namespace reduce_testing
}  // namespace loom
