#include "core/crc32c.h"

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

namespace cc = crc32c_internal;

absl::Span<const std::byte> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> bytes(n);
  for (std::byte& b : bytes) b = static_cast<std::byte>(rng() & 0xFFu);
  return bytes;
}

TEST(Crc32cTest, StandardCheckValues) {
  EXPECT_EQ(Crc32c(Bytes("123456789")), 0xE3069283u);
  EXPECT_EQ(Crc32c({}), 0u);
  // RFC 3720 (iSCSI), appendix B.4.
  std::vector<std::byte> v(32, std::byte{0});
  EXPECT_EQ(Crc32c(v), 0x8A9136AAu);
  for (auto& b : v) b = std::byte{0xFF};
  EXPECT_EQ(Crc32c(v), 0x62A8AB43u);
  for (size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(i);
  EXPECT_EQ(Crc32c(v), 0x46DD794Eu);
  for (size_t i = 0; i < 32; ++i) v[i] = static_cast<std::byte>(31 - i);
  EXPECT_EQ(Crc32c(v), 0x113FDB5Cu);
}

TEST(Crc32cTest, SoftwareMatchesCheckValue) {
  EXPECT_EQ(cc::ExtendSoftware(0, Bytes("123456789")), 0xE3069283u);
}

// Lengths around the hardware path's three-stream boundaries (3 x 256, 3 x 8192) and
// every start offset modulo 8.
TEST(Crc32cTest, HardwareMatchesSoftware) {
  if (!cc::HasHardware()) GTEST_SKIP() << "no SSE4.2";
  const std::vector<std::byte> data = RandomBytes(3 * 8192 * 3 + 4096, 11);
  std::vector<size_t> lengths;
  for (size_t n = 0; n < 64; ++n) lengths.push_back(n);
  for (size_t base : {768u, 1536u, 24576u, 49152u, 73728u}) {
    for (size_t delta = 0; delta < 17; ++delta) {
      lengths.push_back(base + delta - 8);
    }
  }
  lengths.push_back(12345);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n : lengths) {
      if (offset + n > data.size()) continue;
      const auto span = absl::MakeConstSpan(data).subspan(offset, n);
      ASSERT_EQ(cc::ExtendHardware(0x12345678u, span), cc::ExtendSoftware(0x12345678u, span))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWhole) {
  const std::vector<std::byte> data = RandomBytes(60000, 12);
  const uint32_t whole = Crc32c(data);
  for (size_t split : {0u, 1u, 7u, 768u, 24577u, 59999u, 60000u}) {
    const auto span = absl::MakeConstSpan(data);
    EXPECT_EQ(ExtendCrc32c(Crc32c(span.first(split)), span.subspan(split)), whole) << split;
    EXPECT_EQ(cc::ExtendSoftware(cc::ExtendSoftware(0, span.first(split)), span.subspan(split)),
              whole)
        << split;
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<std::byte> data = RandomBytes(4096, 13);
  const uint32_t original = Crc32c(data);
  for (size_t bit = 0; bit < 8 * data.size(); bit += 7) {
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
    EXPECT_NE(Crc32c(data), original) << bit;
    data[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));
  }
}

TEST(Crc32cTest, BlocksAreEachBlocksChecksum) {
  std::vector<std::byte> data(3 * 1000 + 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 131 + (i >> 7));
  std::vector<uint32_t> crcs(4);
  Crc32cBlocks(data, 1000, absl::MakeSpan(crcs));
  for (size_t b = 0; b < 4; ++b) {
    const absl::Span<const std::byte> block =
        absl::MakeConstSpan(data).subspan(b * 1000, b == 3 ? 17 : 1000);
    EXPECT_EQ(crcs[b], Crc32c(block)) << "block " << b;
  }
}

}  // namespace
}  // namespace loom
