#include "core/aligned_buffer.h"

#include <cstdint>
#include <limits>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(AlignedBufferTest, AllocatesZeroedAlignedElements) {
  for (size_t alignment : {size_t{8}, size_t{64}, size_t{4096}}) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
      LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<double> buffer,
                                AlignedBuffer<double>::Create(size, alignment));
      EXPECT_EQ(buffer.size(), size);
      EXPECT_EQ(buffer.size_bytes(), size * sizeof(double));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % alignment, 0u);
      for (double x : buffer.span()) EXPECT_EQ(x, 0.0);
    }
  }
}

TEST(AlignedBufferTest, IsWritableAndMovable) {
  LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<int32_t> buffer, AlignedBuffer<int32_t>::Create(100));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<int32_t>(i * 7);
  const int32_t* data = buffer.data();
  AlignedBuffer<int32_t> moved = std::move(buffer);
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(moved[99], 693);
}

// Its contents are unspecified until written, so only what is promised is checked:
// the size, the alignment, the same validation as Create, and that it is writable.
TEST(AlignedBufferTest, CreateUninitializedIsAlignedWritableAndValidated) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{1000}}) {
    LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<float> buffer,
                              AlignedBuffer<float>::CreateUninitialized(size, 128));
    EXPECT_EQ(buffer.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 128, 0u);
    for (size_t i = 0; i < size; ++i) buffer[i] = static_cast<float>(i);
    if (size > 0) {
      EXPECT_EQ(buffer[size - 1], static_cast<float>(size - 1));
    }
  }
  EXPECT_THAT(AlignedBuffer<float>::CreateUninitialized(10, 48),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 48")));
  EXPECT_THAT(AlignedBuffer<uint8_t>::CreateUninitialized(size_t{1} << 60),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("aligned_alloc")));
}

TEST(AlignedBufferTest, RejectsBadAlignment) {
  EXPECT_THAT(AlignedBuffer<float>::Create(10, 48),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 48")));
  EXPECT_THAT(AlignedBuffer<double>::Create(10, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 4 ")));
  EXPECT_THAT(AlignedBuffer<float>::Create(10, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 0")));
}

TEST(AlignedBufferTest, RejectsOverflowingSizes) {
  EXPECT_THAT(AlignedBuffer<double>::Create(std::numeric_limits<size_t>::max() / 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
}

TEST(AlignedBufferTest, ReportsExhaustionInsteadOfCrashing) {
  // 2^60 bytes cannot be allocated on any machine this runs on.
  EXPECT_THAT(AlignedBuffer<uint8_t>::Create(size_t{1} << 60),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("aligned_alloc")));
}

}  // namespace
}  // namespace loom
