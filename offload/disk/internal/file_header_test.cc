#include "offload/disk/internal/file_header.h"

#include <cstdint>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace disk_internal {
namespace {

using ::testing::HasSubstr;

FileHeader Sample() {
  FileHeader h;
  h.write_id = 0x1122334455667788ull;
  h.total_bytes = 3 * 8192 + 5;  // 4 stripes of 8 KiB over 2 files
  h.stripe_bytes = 8192;
  h.block_bytes = 4096;
  h.file_index = 1;
  h.file_count = 2;
  h.file_data_bytes = 8192 + 5;  // stripes 1 and 3
  h.tensor_name = "layers.0/attn";
  h.block_crcs = {0xDEADBEEF, 0x01234567, 0x89ABCDEF};
  return h;
}

std::vector<std::byte> Encode(const FileHeader& h) {
  std::vector<std::byte> bytes(HeaderBytes(h.tensor_name.size(), h.block_crcs.size()));
  EncodeHeader(h, absl::MakeSpan(bytes));
  return bytes;
}

TEST(FileHeaderTest, RoundTrips) {
  const FileHeader h = Sample();
  const std::vector<std::byte> bytes = Encode(h);
  EXPECT_EQ(bytes.size(), 4096u);
  EXPECT_THAT(HeaderBytesFromPrefix(bytes), IsOkAndHolds(4096u));
  LOOM_ASSERT_OK_AND_ASSIGN(FileHeader back, DecodeHeader(bytes));
  EXPECT_EQ(back.write_id, h.write_id);
  EXPECT_EQ(back.total_bytes, h.total_bytes);
  EXPECT_EQ(back.stripe_bytes, h.stripe_bytes);
  EXPECT_EQ(back.block_bytes, h.block_bytes);
  EXPECT_EQ(back.file_index, h.file_index);
  EXPECT_EQ(back.file_count, h.file_count);
  EXPECT_EQ(back.file_data_bytes, h.file_data_bytes);
  EXPECT_EQ(back.tensor_name, h.tensor_name);
  EXPECT_EQ(back.block_crcs, h.block_crcs);
}

TEST(FileHeaderTest, LargeBlockListsSpanSeveralPages) {
  EXPECT_EQ(HeaderBytes(10, 0), 4096u);
  EXPECT_EQ(HeaderBytes(10, 2000), 8192u);  // 72 + 10 + 8000 + 4 = 8086
  EXPECT_EQ(HeaderBytes(10, 3000), 12288u);
}

TEST(FileHeaderTest, EveryFlippedByteIsDataLoss) {
  const std::vector<std::byte> clean = Encode(Sample());
  const size_t used = kHeaderFixedBytes + Sample().tensor_name.size() + 4 * 3 + 4;
  for (size_t i = 0; i < used; ++i) {
    std::vector<std::byte> bad = clean;
    bad[i] ^= std::byte{0x20};
    EXPECT_EQ(DecodeHeader(bad).status().code(), absl::StatusCode::kDataLoss) << "byte " << i;
  }
}

TEST(FileHeaderTest, ExactErrors) {
  std::vector<std::byte> bytes = Encode(Sample());
  EXPECT_THAT(HeaderBytesFromPrefix(absl::MakeConstSpan(bytes).first(10)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header truncated: 10 bytes")));
  EXPECT_THAT(DecodeHeader(absl::MakeConstSpan(bytes).first(100)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("100 of 4096")));
  std::vector<std::byte> bad = bytes;
  bad[0] = std::byte{'X'};
  EXPECT_THAT(DecodeHeader(bad), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad magic")));
  bad = bytes;
  bad[8] = std::byte{2};
  EXPECT_THAT(DecodeHeader(bad),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unsupported header version 2")));
  bad = bytes;
  bad[100] ^= std::byte{1};  // a CRC byte
  EXPECT_THAT(DecodeHeader(bad),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header checksum mismatch")));
}

TEST(FileHeaderTest, RejectsLayoutsThatDisagree) {
  FileHeader h = Sample();
  h.file_data_bytes = 8192;  // the layout says 8197
  EXPECT_THAT(DecodeHeader(Encode(h)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the layout gives 8197")));
  h = Sample();
  h.file_index = 2;
  EXPECT_THAT(DecodeHeader(Encode(h)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("invalid file 2 of 2")));
  h = Sample();
  h.stripe_bytes = 6000;
  EXPECT_THAT(DecodeHeader(Encode(h)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("invalid stripe_bytes 6000")));
}

}  // namespace
}  // namespace disk_internal
}  // namespace loom
