#include "offload/disk/internal/stripe_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace disk_internal {
namespace {

TEST(StripeLayoutTest, DocumentedExample) {
  const StripeLayout l = StripeLayout::For(10 << 20, 4 << 20, 1 << 20, 2);
  EXPECT_EQ(l.file_count, 2u);
  EXPECT_EQ(l.stripe_count(), 3u);
  EXPECT_EQ(l.FileOfStripe(2), 0u);
  EXPECT_EQ(l.SlotOfStripe(2), 1u);
  EXPECT_EQ(l.StripeLength(2), uint64_t{2} << 20);
  EXPECT_EQ(l.FileDataBytes(0), uint64_t{6} << 20);
  EXPECT_EQ(l.FileDataBytes(1), uint64_t{4} << 20);
  EXPECT_EQ(l.FileBlockCount(0), 6u);
  EXPECT_EQ(l.FirstBlockOfStripe(2), 4u);
  EXPECT_EQ(l.StripeBlockCount(2), 2u);
}

TEST(StripeLayoutTest, SmallTensorsMakeNoEmptyFiles) {
  EXPECT_EQ(StripeLayout::For(0, 4096, 4096, 3).file_count, 1u);
  EXPECT_EQ(StripeLayout::For(0, 4096, 4096, 3).FileDataBytes(0), 0u);
  EXPECT_EQ(StripeLayout::For(1, 4096, 4096, 3).file_count, 1u);
  EXPECT_EQ(StripeLayout::For(4097, 4096, 4096, 3).file_count, 2u);
  EXPECT_EQ(StripeLayout::For(100 * 4096, 4096, 4096, 3).file_count, 3u);
}

TEST(StripeLayoutTest, FilesPartitionTheTensor) {
  for (uint64_t total : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{3 * 8192 + 5},
                         uint64_t{10 * 8192}, uint64_t{10 * 8192 + 1}}) {
    for (uint32_t dirs : {1u, 2u, 3u, 4u}) {
      const StripeLayout l = StripeLayout::For(total, 8192, 4096, dirs);
      uint64_t sum = 0, stripes = 0;
      for (uint32_t k = 0; k < l.file_count; ++k) {
        sum += l.FileDataBytes(k);
        stripes += l.StripesInFile(k);
        EXPECT_EQ(l.FilePaddedDataBytes(k) % 4096, 0u);
        EXPECT_GE(l.FilePaddedDataBytes(k), l.FileDataBytes(k));
      }
      EXPECT_EQ(sum, total) << total << " bytes over " << dirs;
      EXPECT_EQ(stripes, l.stripe_count());
      // Every stripe's blocks fall inside its file's block range.
      for (uint64_t i = 0; i < l.stripe_count(); ++i) {
        EXPECT_LE(l.FirstBlockOfStripe(i) + l.StripeBlockCount(i),
                  l.FileBlockCount(l.FileOfStripe(i)));
      }
    }
  }
}

}  // namespace
}  // namespace disk_internal
}  // namespace loom
