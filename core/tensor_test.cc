#include "core/tensor.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(TensorTest, CreateIsZeroAndShaped) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Create({2, 3, 4}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.size_bytes(), 96u);
  EXPECT_THAT(t.ToF32(), ElementsAreArray(std::vector<float>(24, 0.0f)));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor empty, Tensor::Create({0, 5}));
  EXPECT_EQ(empty.numel(), 0);
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor scalar, Tensor::Create({}));
  EXPECT_EQ(scalar.numel(), 1);
}

TEST(TensorTest, BadShapesAndDTypesAreRefused) {
  EXPECT_THAT(Tensor::Create({2, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[2,-1]")));
  EXPECT_THAT(Tensor::Create({2}, DType::kU8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("u8")));
  EXPECT_THAT(Tensor::FromInts({3}, {1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[3] has 3 elements, got 2")));
  EXPECT_THAT(Tensor::Create({1, 1, 1, 1, 1, 1, 1, 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("9 dimensions")));
  EXPECT_THAT(Tensor::FromValues({2, 2}, Iota(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[2,2] has 4 elements, got 3")));
}

TEST(TensorTest, SliceEveryDim) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues({2, 3, 4}, Iota(24)));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor d0, x.Slice(0, 1, 1));
  EXPECT_THAT(d0.shape(), ElementsAre(1, 3, 4));
  EXPECT_EQ(d0.ToF32()[0], 12.0f);
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor d1, x.Slice(1, 1, 2));
  EXPECT_THAT(d1.ToF32(), ElementsAre(4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor d2, x.Slice(2, 3, 1));
  EXPECT_THAT(d2.ToF32(), ElementsAre(3, 7, 11, 15, 19, 23));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor none, x.Slice(2, 4, 0));
  EXPECT_THAT(none.shape(), ElementsAre(2, 3, 0));
  EXPECT_THAT(x.Slice(3, 0, 1), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("dim 3 is out of range for shape [2,3,4]")));
  EXPECT_THAT(x.Slice(1, 2, 2), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("[2, 4) along dim 1 is outside shape [2,3,4]")));
}

TEST(TensorTest, ConcatUndoesSlices) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues({3, 5, 2}, Iota(30)));
  for (int dim = 0; dim < 3; ++dim) {
    // Uneven pieces, one of them empty.
    const int64_t n = x.dim(dim);
    std::vector<Tensor> parts;
    parts.push_back(*x.Slice(dim, 0, n - 1));
    parts.push_back(*x.Slice(dim, n - 1, 0));
    parts.push_back(*x.Slice(dim, n - 1, 1));
    LOOM_ASSERT_OK_AND_ASSIGN(Tensor back, Tensor::Concat(parts, dim));
    EXPECT_EQ(back.shape(), x.shape());
    EXPECT_EQ(back.ToF32(), x.ToF32()) << "dim " << dim;
  }
  std::vector<Tensor> bad;
  bad.push_back(*Tensor::Create({2, 3}));
  bad.push_back(*Tensor::Create({2, 4}));
  EXPECT_THAT(Tensor::Concat(bad, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("part 1 is f32 [2,4], part 0 is f32 [2,3]")));
}

TEST(TensorTest, ReshapeKeepsValues) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues({2, 6}, Iota(12)));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor y, std::move(x).Reshape({3, 4}));
  EXPECT_THAT(y.shape(), ElementsAre(3, 4));
  EXPECT_EQ(y.ToF32(), Iota(12));
  EXPECT_THAT(std::move(y).Reshape({5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[3,4] (12 elements) cannot become [5]")));
}

TEST(TensorTest, Bf16StorageRoundsToNearestEven) {
  // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: even is 1.
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues({3}, {1.00390625f, 3.0f, -0.1f}));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor h, x.ConvertTo(DType::kBF16));
  EXPECT_EQ(h.dtype(), DType::kBF16);
  EXPECT_EQ(h.size_bytes(), 6u);
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const BFloat16> bits, h.As<BFloat16>());
  EXPECT_EQ(bits[0].bits, 0x3F80);
  const std::vector<float> back = h.ToF32();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 3.0f);
  EXPECT_EQ(back[2], ToFloat(ToBFloat16(-0.1f)));
  EXPECT_THAT(h.As<float>(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bf16")));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor f, h.ConvertTo(DType::kF32));
  EXPECT_EQ(f.ToF32(), back);
}

TEST(TensorTest, CloneIsDeep) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, Tensor::FromValues({2}, {1, 2}));
  Tensor y = x.Clone();
  (*y.As<float>())[0] = 7;
  EXPECT_THAT(x.ToF32(), ElementsAre(1, 2));
  EXPECT_THAT(y.ToF32(), ElementsAre(7, 2));
}

// Token ids: i64 tensors keep every id exactly (past float's 2^24), slice and
// concat as the floating ones, and refuse a conversion to a floating dtype.
TEST(TensorTest, IntegerTensorsHoldTokenIdsExactly) {
  const std::vector<int64_t> ids = {0, 50256, (int64_t{1} << 24) + 1, -3, 7, 1};
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::FromInts({2, 3}, ids));
  EXPECT_EQ(t.dtype(), DType::kI64);
  EXPECT_EQ(t.size_bytes(), 48u);
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const int64_t> back, std::as_const(t).As<int64_t>());
  EXPECT_THAT(back, ElementsAre(0, 50256, (int64_t{1} << 24) + 1, -3, 7, 1));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor row, t.Slice(0, 1, 1));
  EXPECT_THAT(*std::as_const(row).As<int64_t>(), ElementsAre(-3, 7, 1));
  const Tensor parts[] = {row.Clone(), std::move(row)};
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor both, Tensor::Concat(parts, 0));
  EXPECT_THAT(*std::as_const(both).As<int64_t>(), ElementsAre(-3, 7, 1, -3, 7, 1));
  EXPECT_THAT(t.ConvertTo(DType::kF32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("i64 to f32")));
  EXPECT_FALSE(t.As<float>().ok());
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor i32, Tensor::Create({2}, DType::kI32));
  EXPECT_THAT(i32.ToF32(), ElementsAre(0, 0));
}

TEST(TensorTest, EqualsIsBitwise) {
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::FromValues({2}, {1.0f, 0.0f}));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::FromValues({2}, {1.0f, -0.0f}));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor c, Tensor::FromValues({1, 2}, {1.0f, 0.0f}));
  EXPECT_TRUE(a.Equals(a.Clone()));
  EXPECT_FALSE(a.Equals(b));  // -0 is another bit pattern
  EXPECT_FALSE(a.Equals(c));  // another shape
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor d, a.ConvertTo(DType::kBF16));
  EXPECT_FALSE(a.Equals(d));  // another dtype
}

}  // namespace
}  // namespace loom
