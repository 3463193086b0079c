#include "core/buffer_view.h"

#include <cstdint>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BufferViewTest, ViewsATypedSpan) {
  std::vector<float> values = {1.5f, 2.5f, 3.5f, 4.5f};
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  EXPECT_EQ(view.dtype(), DType::kF32);
  EXPECT_EQ(view.size(), 4u);
  EXPECT_EQ(view.size_bytes(), 16u);
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<float> typed, view.As<float>());
  typed[2] = -1.0f;
  EXPECT_THAT(values, ElementsAre(1.5f, 2.5f, -1.0f, 4.5f));
}

TEST(BufferViewTest, RejectsTheWrongType) {
  std::vector<int64_t> values(3);
  const ConstBufferView view = ConstBufferView::Of(absl::MakeConstSpan(values));
  EXPECT_THAT(view.As<int32_t>(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("view holds i64, requested i32")));
}

TEST(BufferViewTest, SubviewsStayInBounds) {
  std::vector<int32_t> values = {10, 11, 12, 13, 14, 15};
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  LOOM_ASSERT_OK_AND_ASSIGN(BufferView middle, view.Subview(2, 3));
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<int32_t> typed, middle.As<int32_t>());
  EXPECT_THAT(typed, ElementsAre(12, 13, 14));
  LOOM_EXPECT_OK(view.Subview(6, 0));
  EXPECT_THAT(view.Subview(4, 3),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("subview [4, 7) of a view of 6")));
}

TEST(BufferViewTest, MutableConvertsToConst) {
  std::vector<uint8_t> values = {7, 8};
  const ConstBufferView view = BufferView::Of(absl::MakeSpan(values));
  EXPECT_EQ(view.dtype(), DType::kU8);
  EXPECT_EQ(static_cast<int>(view.bytes()[1]), 8);
}

}  // namespace
}  // namespace loom
