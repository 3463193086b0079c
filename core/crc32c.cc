#include "core/crc32c.h"

#include <nmmintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"

namespace loom {
namespace crc32c_internal {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Reflected 0x1EDC6F41.

using Table = std::array<std::array<uint32_t, 256>, 8>;

// kSlicing[k][b] is the CRC register after byte b followed by k zero bytes: the
// slicing-by-8 tables (Intel's "Slicing-by-8" / Kounavis and Berry).
constexpr Table MakeSlicingTables() {
  Table t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1u)));
    t[0][b] = crc;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}
constexpr Table kSlicing = MakeSlicingTables();

// GF(2) 32x32 matrices (column k is the image of bit k) that describe appending zero
// bits to a CRC register; squaring one doubles the number of zeros it appends. This is
// zlib's crc32_combine construction, as Mark Adler's crc32c.c applies it to CRC-32C.
using Matrix = std::array<uint32_t, 32>;

constexpr uint32_t MatrixTimes(const Matrix& m, uint32_t vector) {
  uint32_t sum = 0;
  for (int k = 0; vector != 0; ++k, vector >>= 1) {
    if (vector & 1u) sum ^= m[k];
  }
  return sum;
}

constexpr Matrix MatrixSquare(const Matrix& m) {
  Matrix square{};
  for (int k = 0; k < 32; ++k) square[k] = MatrixTimes(m, m[k]);
  return square;
}

// ZerosOperator returns the matrix that appends `bytes` (a power of two) zero bytes.
constexpr Matrix ZerosOperator(size_t bytes) {
  Matrix op{};  // One zero bit: shift right, XOR the polynomial if bit 0 was set.
  op[0] = kPolynomial;
  for (int k = 1; k < 32; ++k) op[k] = 1u << (k - 1);
  for (int i = 0; i < 3; ++i) op = MatrixSquare(op);  // 8 bits: one byte.
  for (size_t n = 1; n < bytes; n <<= 1) op = MatrixSquare(op);
  return op;
}

// ShiftTable[k][b] applies the zeros operator to byte k of the register, so that
// appending `bytes` zero bytes to a register costs four lookups.
using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

constexpr ShiftTable MakeShiftTable(size_t bytes) {
  const Matrix op = ZerosOperator(bytes);
  ShiftTable t{};
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 0; k < 4; ++k) t[k][b] = MatrixTimes(op, b << (8 * k));
  }
  return t;
}

// The hardware loop runs three streams of kLong (then kShort) bytes at a time.
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;
constexpr ShiftTable kShiftLong = MakeShiftTable(kLong);
constexpr ShiftTable kShiftShort = MakeShiftTable(kShort);

inline uint32_t Shift(const ShiftTable& t, uint32_t crc) {
  return t[0][crc & 0xFFu] ^ t[1][(crc >> 8) & 0xFFu] ^ t[2][(crc >> 16) & 0xFFu] ^ t[3][crc >> 24];
}

inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

#define LOOM_SSE42 __attribute__((target("sse4.2")))

// Three streams over [p, p + 3 * block): the first continues `crc`, the other two start
// from zero; the result is their combination, as if one stream had run.
LOOM_SSE42 inline uint64_t ThreeStreams(uint64_t crc, const unsigned char* p, size_t block,
                                        const ShiftTable& shift) {
  uint64_t crc1 = 0;
  uint64_t crc2 = 0;
  for (const unsigned char* end = p + block; p < end; p += 8) {
    crc = _mm_crc32_u64(crc, Load64(p));
    crc1 = _mm_crc32_u64(crc1, Load64(p + block));
    crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * block));
  }
  crc = Shift(shift, static_cast<uint32_t>(crc)) ^ crc1;
  return Shift(shift, static_cast<uint32_t>(crc)) ^ crc2;
}

}  // namespace

bool HasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}

uint32_t ExtendSoftware(uint32_t crc, absl::Span<const std::byte> data) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = Load64(p) ^ c;  // Little-endian: the register meets bytes 0..3.
    c = kSlicing[7][v & 0xFFu] ^ kSlicing[6][(v >> 8) & 0xFFu] ^ kSlicing[5][(v >> 16) & 0xFFu] ^
        kSlicing[4][(v >> 24) & 0xFFu] ^ kSlicing[3][(v >> 32) & 0xFFu] ^
        kSlicing[2][(v >> 40) & 0xFFu] ^ kSlicing[1][(v >> 48) & 0xFFu] ^ kSlicing[0][v >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kSlicing[0][(c ^ *p) & 0xFFu];
  return ~c;
}

LOOM_SSE42 uint32_t ExtendHardware(uint32_t crc, absl::Span<const std::byte> data) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint64_t c = ~crc;
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0; --n, ++p) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  }
  for (; n >= 3 * kLong; n -= 3 * kLong, p += 3 * kLong) c = ThreeStreams(c, p, kLong, kShiftLong);
  for (; n >= 3 * kShort; n -= 3 * kShort, p += 3 * kShort) {
    c = ThreeStreams(c, p, kShort, kShiftShort);
  }
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, Load64(p));
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p);
  return ~static_cast<uint32_t>(c);
}

}  // namespace crc32c_internal

uint32_t ExtendCrc32c(uint32_t crc, absl::Span<const std::byte> data) {
  return crc32c_internal::HasHardware() ? crc32c_internal::ExtendHardware(crc, data)
                                        : crc32c_internal::ExtendSoftware(crc, data);
}

uint32_t Crc32c(absl::Span<const std::byte> data) { return ExtendCrc32c(0, data); }

void Crc32cBlocks(absl::Span<const std::byte> data, size_t block_bytes, absl::Span<uint32_t> out) {
  for (size_t b = 0; b < out.size(); ++b) {
    const size_t begin = b * block_bytes;
    out[b] = Crc32c(data.subspan(begin, std::min(block_bytes, data.size() - begin)));
  }
}

}  // namespace loom
