#include "offload/codecs/codec.h"

#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/status_macros.h"
#include "core/crc32c.h"
#include "offload/codecs/internal/kernels.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "frames are little-endian and fields are copied as host integers");

namespace loom {
namespace {

namespace ci = codecs_internal;

// ----------------------------------------------------------------------------------
// Frame header (little-endian), kEncodedHeaderBytes = 64:
//   0  magic "LMCD"        4  version u16         6  codec u8        7  flags u8
//   8  count u64          16  payload bytes u64  24  block size u32  28  payload CRC-32C
//  32  reserved, zero (28 bytes)                 60  CRC-32C of bytes [0, 60)
constexpr std::array<char, 4> kMagic = {'L', 'M', 'C', 'D'};
constexpr size_t kVersionOffset = 4;
constexpr size_t kCodecOffset = 6;
constexpr size_t kFlagsOffset = 7;
constexpr size_t kCountOffset = 8;
constexpr size_t kPayloadBytesOffset = 16;
constexpr size_t kBlockSizeOffset = 24;
constexpr size_t kPayloadCrcOffset = 28;
constexpr size_t kReservedOffset = 32;
constexpr size_t kHeaderCrcOffset = 60;

constexpr uint8_t kFlagByteShuffle = 0x01;

// lz4/zstd payload: a table of one u32 per chunk (the compressed size, or the raw size
// with kStoredChunk set for a chunk stored uncompressed), then the chunks back to back.
constexpr uint32_t kStoredChunk = 0x80000000u;

// Block sizes a frame may carry (int8_blockwise; lz4/zstd chunks).
constexpr int64_t kMinInt8Block = 32;
constexpr int64_t kMaxInt8Block = 65536;
constexpr int64_t kMinLosslessChunk = 1024;
constexpr int64_t kMaxLosslessChunk = int64_t{1} << 20;

// Element counts above this are refused (their byte sizes would overflow).
constexpr uint64_t kMaxCount = uint64_t{1} << 60;

// raw/fp16/bf16/int8 encode and decode this many elements at a time and checksum the
// chunk's payload while it is still in L1 (32 KiB of f32).
constexpr size_t kFusedChunkElements = 8192;

template <typename T>
void Put(std::byte* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

template <typename T>
T Get(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

bool IsPowerOfTwoIn(int64_t value, int64_t lo, int64_t hi) {
  return value >= lo && value <= hi && (value & (value - 1)) == 0;
}

bool IsLossless(CodecKind kind) { return kind == CodecKind::kLz4 || kind == CodecKind::kZstd; }

bool IsKnownKind(CodecKind kind) {
  return static_cast<uint8_t>(kind) <= static_cast<uint8_t>(CodecKind::kZstd);
}

size_t CeilDiv(size_t a, size_t b) { return a / b + (a % b != 0); }

std::string Hex32(uint32_t value) { return absl::StrFormat("0x%08x", value); }

// FixedPayloadBytes is the payload size of every codec but lz4/zstd.
size_t FixedPayloadBytes(CodecKind kind, uint64_t count, uint32_t block_size) {
  switch (kind) {
    case CodecKind::kRaw:
      return 4 * count;
    case CodecKind::kFp16:
    case CodecKind::kBf16:
      return 2 * count;
    case CodecKind::kInt8Blockwise:
      return ci::Int8Bytes(count, block_size);
    default:
      return 0;
  }
}

void WriteHeader(CodecKind kind, uint8_t flags, uint64_t count, uint64_t payload_bytes,
                 uint32_t block_size, uint32_t payload_crc, std::byte* out) {
  std::memset(out, 0, kEncodedHeaderBytes);
  std::memcpy(out, kMagic.data(), kMagic.size());
  Put<uint16_t>(out + kVersionOffset, kEncodedFormatVersion);
  Put<uint8_t>(out + kCodecOffset, static_cast<uint8_t>(kind));
  Put<uint8_t>(out + kFlagsOffset, flags);
  Put<uint64_t>(out + kCountOffset, count);
  Put<uint64_t>(out + kPayloadBytesOffset, payload_bytes);
  Put<uint32_t>(out + kBlockSizeOffset, block_size);
  Put<uint32_t>(out + kPayloadCrcOffset, payload_crc);
  Put<uint32_t>(out + kHeaderCrcOffset, Crc32c(absl::MakeConstSpan(out, kHeaderCrcOffset)));
}

absl::StatusOr<EncodedInfo> ParseHeader(absl::Span<const std::byte> encoded) {
  if (encoded.size() < kEncodedHeaderBytes) {
    return absl::DataLossError(absl::StrCat("truncated frame: ", encoded.size(),
                                            " bytes, shorter than the ", kEncodedHeaderBytes,
                                            "-byte header"));
  }
  const std::byte* h = encoded.data();
  if (std::memcmp(h, kMagic.data(), kMagic.size()) != 0) {
    return absl::DataLossError(absl::StrCat(
        "bad magic \"", absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(h), 4)),
        "\" (expected \"LMCD\"): not an encoded tensor frame"));
  }
  const uint16_t version = Get<uint16_t>(h + kVersionOffset);
  if (version != kEncodedFormatVersion) {
    return absl::DataLossError(absl::StrCat("unsupported format version ", version,
                                            " (this build reads ", kEncodedFormatVersion, ")"));
  }
  const uint32_t stored_header_crc = Get<uint32_t>(h + kHeaderCrcOffset);
  const uint32_t header_crc = Crc32c(encoded.first(kHeaderCrcOffset));
  if (stored_header_crc != header_crc) {
    return absl::DataLossError(absl::StrCat("header checksum mismatch: stored ",
                                            Hex32(stored_header_crc), ", header hashes to ",
                                            Hex32(header_crc)));
  }
  // From here on the header is as written (or forged with a valid checksum): the checks
  // below keep a forged one from driving the decoder out of bounds.
  EncodedInfo info;
  info.kind = static_cast<CodecKind>(Get<uint8_t>(h + kCodecOffset));
  if (!IsKnownKind(info.kind)) {
    return absl::DataLossError(
        absl::StrCat("unknown codec id ", static_cast<int>(Get<uint8_t>(h + kCodecOffset))));
  }
  const absl::string_view name = CodecKindName(info.kind);
  const uint8_t flags = Get<uint8_t>(h + kFlagsOffset);
  const uint8_t allowed_flags = IsLossless(info.kind) ? kFlagByteShuffle : 0;
  if ((flags & ~allowed_flags) != 0) {
    return absl::DataLossError(
        absl::StrCat("unknown flags 0x", absl::Hex(flags & ~allowed_flags), " for ", name));
  }
  info.byte_shuffle = (flags & kFlagByteShuffle) != 0;
  for (size_t i = kReservedOffset; i < kHeaderCrcOffset; ++i) {
    if (h[i] != std::byte{0}) {
      return absl::DataLossError(absl::StrCat("reserved header byte ", i, " is not zero"));
    }
  }
  info.count = Get<uint64_t>(h + kCountOffset);
  if (info.count > kMaxCount) {
    return absl::DataLossError(absl::StrCat("element count ", info.count, " is too large"));
  }
  info.block_size = Get<uint32_t>(h + kBlockSizeOffset);
  const bool block_ok = info.kind == CodecKind::kInt8Blockwise
                            ? IsPowerOfTwoIn(info.block_size, kMinInt8Block, kMaxInt8Block)
                        : IsLossless(info.kind)
                            ? IsPowerOfTwoIn(info.block_size, kMinLosslessChunk, kMaxLosslessChunk)
                            : info.block_size == 0;
  if (!block_ok) {
    return absl::DataLossError(
        absl::StrCat("block size ", info.block_size, " is invalid for ", name));
  }
  info.payload_bytes = Get<uint64_t>(h + kPayloadBytesOffset);
  if (IsLossless(info.kind)) {
    const uint64_t table = 4 * CeilDiv(info.count, info.block_size);
    if (info.payload_bytes < table || info.payload_bytes > table + 4 * info.count) {
      return absl::DataLossError(absl::StrCat("payload size ", info.payload_bytes, " is outside [",
                                              table, ", ", table + 4 * info.count, "] for ",
                                              info.count, " elements of ", name));
    }
  } else {
    const uint64_t expected = FixedPayloadBytes(info.kind, info.count, info.block_size);
    if (info.payload_bytes != expected) {
      return absl::DataLossError(absl::StrCat("payload size ", info.payload_bytes,
                                              " does not match ", info.count, " elements of ", name,
                                              " (expected ", expected, ")"));
    }
  }
  info.encoded_bytes = kEncodedHeaderBytes + info.payload_bytes;
  info.payload_crc32c = Get<uint32_t>(h + kPayloadCrcOffset);
  return info;
}

absl::Status PayloadChecksumError(uint32_t stored, uint32_t computed) {
  return absl::DataLossError(absl::StrCat("payload checksum mismatch: header has ", Hex32(stored),
                                          ", payload hashes to ", Hex32(computed)));
}

std::string FloatString(float value) { return absl::StrFormat("%.9g", value); }

// ------------------------------------------------------------------------------- raw

uint32_t EncodeRaw(absl::Span<const float> input, std::byte* payload) {
  uint32_t crc = 0;
  for (size_t begin = 0; begin < input.size(); begin += kFusedChunkElements) {
    const size_t bytes = 4 * std::min(kFusedChunkElements, input.size() - begin);
    std::memcpy(payload + 4 * begin, input.data() + begin, bytes);
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(payload + 4 * begin, bytes));
  }
  return crc;
}

uint32_t DecodeRaw(const std::byte* payload, absl::Span<float> output) {
  uint32_t crc = 0;
  for (size_t begin = 0; begin < output.size(); begin += kFusedChunkElements) {
    const size_t bytes = 4 * std::min(kFusedChunkElements, output.size() - begin);
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(payload + 4 * begin, bytes));
    std::memcpy(output.data() + begin, payload + 4 * begin, bytes);
  }
  return crc;
}

// ------------------------------------------------------------------------- fp16/bf16

// The 16-bit formats: where a finite f32 starts rounding to infinity, and the largest
// finite value's bits.
struct HalfFormat {
  uint32_t overflow_abs_bits;  // |x| bits at or above this (and finite) round to Inf.
  uint16_t max_finite_bits;
};
constexpr HalfFormat kFp16Format = {0x477FF000u, 0x7BFFu};  // 65520, 65504.
constexpr HalfFormat kBf16Format = {0x7F7F8000u, 0x7F7Fu};  // 0x1.FFp127, 0x1.FEp127.

// Narrow converts with core's batch conversions (AVX-512 where available).
template <typename Half>
absl::Status Narrow(absl::Span<const float> in, absl::Span<Half> out) {
  if constexpr (std::is_same_v<Half, Float16>) {
    return ConvertF32ToF16(in, out);
  } else {
    return ConvertF32ToBF16(in, out);
  }
}

template <typename Half>
absl::Status Widen(absl::Span<const Half> in, absl::Span<float> out) {
  if constexpr (std::is_same_v<Half, Float16>) {
    return ConvertF16ToF32(in, out);
  } else {
    return ConvertBF16ToF32(in, out);
  }
}

template <typename Half>
absl::StatusOr<uint32_t> EncodeHalf(CodecKind kind, OverflowPolicy overflow,
                                    absl::Span<const float> input, std::byte* payload) {
  const HalfFormat format = kind == CodecKind::kFp16 ? kFp16Format : kBf16Format;
  // The payload starts at an even offset, so it is 2-aligned when the frame is; a frame
  // that is not goes through a bounce buffer.
  const bool aligned = reinterpret_cast<uintptr_t>(payload) % alignof(Half) == 0;
  const auto find_overflow = ci::KernelsFor(ci::ActiveIsa()).find_overflow;
  std::vector<Half> bounce(aligned ? 0 : kFusedChunkElements);
  uint32_t crc = 0;
  for (size_t begin = 0; begin < input.size(); begin += kFusedChunkElements) {
    const size_t len = std::min(kFusedChunkElements, input.size() - begin);
    const absl::Span<const float> in = input.subspan(begin, len);
    std::byte* dst = payload + 2 * begin;
    Half* narrow = aligned ? reinterpret_cast<Half*>(dst) : bounce.data();
    LOOM_RETURN_IF_ERROR(Narrow<Half>(in, absl::MakeSpan(narrow, len)));
    for (size_t i = find_overflow(in, format.overflow_abs_bits); i < len;
         i += 1 + find_overflow(in.subspan(i + 1), format.overflow_abs_bits)) {
      if (overflow == OverflowPolicy::kError) {
        return absl::InvalidArgumentError(absl::StrCat(
            "element ", begin + i, " is ", FloatString(in[i]), ", beyond ", CodecKindName(kind),
            "'s largest finite value ", FloatString(ToFloat(Half{format.max_finite_bits})),
            " (OverflowPolicy::kSaturate stores that instead)"));
      }
      const uint16_t sign = static_cast<uint16_t>((ci::FloatBits(in[i]) >> 16) & 0x8000u);
      narrow[i] = Half{static_cast<uint16_t>(sign | format.max_finite_bits)};
    }
    if (!aligned) std::memcpy(dst, bounce.data(), 2 * len);
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(dst, 2 * len));
  }
  return crc;
}

template <typename Half>
absl::StatusOr<uint32_t> DecodeHalf(const std::byte* payload, absl::Span<float> output) {
  const bool aligned = reinterpret_cast<uintptr_t>(payload) % alignof(Half) == 0;
  std::vector<Half> bounce(aligned ? 0 : kFusedChunkElements);
  uint32_t crc = 0;
  for (size_t begin = 0; begin < output.size(); begin += kFusedChunkElements) {
    const size_t len = std::min(kFusedChunkElements, output.size() - begin);
    const std::byte* src = payload + 2 * begin;
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(src, 2 * len));
    const Half* narrow = reinterpret_cast<const Half*>(src);
    if (!aligned) {
      std::memcpy(bounce.data(), src, 2 * len);
      narrow = bounce.data();
    }
    LOOM_RETURN_IF_ERROR(Widen<Half>(absl::MakeConstSpan(narrow, len), output.subspan(begin, len)));
  }
  return crc;
}

// ----------------------------------------------------------------------- int8 blockwise

// Chunks hold whole blocks: at least kFusedChunkElements elements, or one block.
size_t Int8ChunkElements(size_t block_size) { return std::max(block_size, kFusedChunkElements); }

absl::StatusOr<uint32_t> EncodeInt8(absl::Span<const float> input, size_t block_size,
                                    std::byte* payload) {
  const ci::Kernels& kernels = ci::KernelsFor(ci::ActiveIsa());
  const size_t step = Int8ChunkElements(block_size);
  uint32_t crc = 0;
  for (size_t begin = 0; begin < input.size(); begin += step) {
    const size_t len = std::min(step, input.size() - begin);
    std::byte* dst = payload + ci::Int8Bytes(begin, block_size);
    const size_t bad_block = kernels.quantize_int8(input.subspan(begin, len), block_size, dst);
    if (bad_block != ci::kAllFinite) {
      size_t i = begin + bad_block * block_size;
      while ((ci::FloatBits(input[i]) & 0x7F800000u) != 0x7F800000u) ++i;
      return absl::InvalidArgumentError(absl::StrCat(
          "element ", i, " is ", FloatString(input[i]),
          "; int8_blockwise encodes finite values only (one would poison its block's scale)"));
    }
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(dst, ci::Int8Bytes(len, block_size)));
  }
  return crc;
}

uint32_t DecodeInt8(const std::byte* payload, size_t block_size, absl::Span<float> output) {
  const ci::Kernels& kernels = ci::KernelsFor(ci::ActiveIsa());
  const size_t step = Int8ChunkElements(block_size);
  uint32_t crc = 0;
  for (size_t begin = 0; begin < output.size(); begin += step) {
    const size_t len = std::min(step, output.size() - begin);
    const std::byte* src = payload + ci::Int8Bytes(begin, block_size);
    crc = ExtendCrc32c(crc, absl::MakeConstSpan(src, ci::Int8Bytes(len, block_size)));
    kernels.dequantize_int8(src, block_size, output.subspan(begin, len));
  }
  return crc;
}

// ----------------------------------------------------------------------------- lz4/zstd

struct ZstdCCtxFree {
  void operator()(ZSTD_CCtx* ctx) const { ZSTD_freeCCtx(ctx); }
};
struct ZstdDCtxFree {
  void operator()(ZSTD_DCtx* ctx) const { ZSTD_freeDCtx(ctx); }
};

// Per-thread zstd contexts: creating one per call would cost more than a small chunk.
absl::StatusOr<ZSTD_CCtx*> ThreadZstdCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, ZstdCCtxFree> ctx;
  if (ctx == nullptr) ctx.reset(ZSTD_createCCtx());
  if (ctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createCCtx failed");
  return ctx.get();
}

absl::StatusOr<ZSTD_DCtx*> ThreadZstdDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, ZstdDCtxFree> ctx;
  if (ctx == nullptr) ctx.reset(ZSTD_createDCtx());
  if (ctx == nullptr) return absl::ResourceExhaustedError("ZSTD_createDCtx failed");
  return ctx.get();
}

// ShuffleScratch returns this thread's buffer for one shuffled chunk.
std::byte* ShuffleScratch(size_t bytes) {
  thread_local std::vector<std::byte> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

// Compress returns the compressed size, or 0 if `src` does not fit in `capacity` bytes.
absl::StatusOr<size_t> Compress(const CodecOptions& options, const std::byte* src, size_t bytes,
                                std::byte* dst, size_t capacity) {
  if (options.kind == CodecKind::kLz4) {
    // Returns 0 when the output does not fit.
    return static_cast<size_t>(
        LZ4_compress_default(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst),
                             static_cast<int>(bytes), static_cast<int>(capacity)));
  }
  LOOM_ASSIGN_OR_RETURN(ZSTD_CCtx * ctx, ThreadZstdCCtx());
  const size_t result = ZSTD_compressCCtx(ctx, dst, capacity, src, bytes, options.zstd_level);
  if (!ZSTD_isError(result)) return result;
  if (ZSTD_getErrorCode(result) == ZSTD_error_dstSize_tooSmall) return 0;
  return absl::InternalError(absl::StrCat("ZSTD_compressCCtx: ", ZSTD_getErrorName(result)));
}

absl::StatusOr<size_t> EncodeLossless(const CodecOptions& options, absl::Span<const float> input,
                                      std::byte* payload) {
  const size_t chunk = kLosslessChunkElements;
  const size_t chunks = CeilDiv(input.size(), chunk);
  const ci::Kernels& kernels = ci::KernelsFor(ci::ActiveIsa());
  std::byte* const scratch = options.byte_shuffle ? ShuffleScratch(4 * chunk) : nullptr;
  size_t pos = 4 * chunks;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * chunk;
    const size_t len = std::min(chunk, input.size() - begin);
    const size_t bytes = 4 * len;
    const std::byte* src = reinterpret_cast<const std::byte*>(input.data() + begin);
    const std::byte* packed = src;
    if (scratch != nullptr) {
      kernels.shuffle4(src, len, scratch);
      packed = scratch;
    }
    // Keep the chunk compressed only if that saves at least 1/64 of it: decoding a
    // stored chunk is a memcpy.
    const size_t capacity = bytes - std::max<size_t>(bytes / 64, 1);
    LOOM_ASSIGN_OR_RETURN(size_t compressed,
                          Compress(options, packed, bytes, payload + pos, capacity));
    uint32_t entry = static_cast<uint32_t>(compressed);
    if (compressed == 0) {
      std::memcpy(payload + pos, src, bytes);
      compressed = bytes;
      entry = static_cast<uint32_t>(bytes) | kStoredChunk;
    }
    Put<uint32_t>(payload + 4 * c, entry);
    pos += compressed;
  }
  return pos;
}

absl::Status DecodeLossless(const EncodedInfo& info, const std::byte* payload,
                            absl::Span<float> output) {
  const absl::string_view name = CodecKindName(info.kind);
  const size_t chunk = info.block_size;
  const size_t chunks = CeilDiv(output.size(), chunk);
  // Check the table before touching any chunk.
  uint64_t total = 4 * chunks;
  for (size_t c = 0; c < chunks; ++c) {
    const uint32_t entry = Get<uint32_t>(payload + 4 * c);
    const uint64_t bytes = 4 * std::min<uint64_t>(chunk, output.size() - c * chunk);
    const uint32_t size = entry & ~kStoredChunk;
    const bool ok = (entry & kStoredChunk) != 0 ? size == bytes : size > 0 && size < bytes;
    if (!ok) {
      return absl::DataLossError(absl::StrCat("chunk ", c, " of ", chunks, " of the ", name,
                                              " payload has size entry ", Hex32(entry),
                                              ", invalid for a chunk of ", bytes, " bytes"));
    }
    total += size;
  }
  if (total != info.payload_bytes) {
    return absl::DataLossError(absl::StrCat("the ", name, " chunk table adds up to ", total,
                                            " bytes but the payload has ", info.payload_bytes));
  }
  const ci::Kernels& kernels = ci::KernelsFor(ci::ActiveIsa());
  std::byte* const scratch = info.byte_shuffle ? ShuffleScratch(4 * chunk) : nullptr;
  ZSTD_DCtx* dctx = nullptr;
  if (info.kind == CodecKind::kZstd) {
    LOOM_ASSIGN_OR_RETURN(dctx, ThreadZstdDCtx());
  }
  size_t pos = 4 * chunks;
  for (size_t c = 0; c < chunks; ++c) {
    const uint32_t entry = Get<uint32_t>(payload + 4 * c);
    const size_t size = entry & ~kStoredChunk;
    const size_t begin = c * chunk;
    const size_t len = std::min(chunk, output.size() - begin);
    const size_t bytes = 4 * len;
    std::byte* out = reinterpret_cast<std::byte*>(output.data() + begin);
    const std::byte* src = payload + pos;
    pos += size;
    if ((entry & kStoredChunk) != 0) {
      std::memcpy(out, src, bytes);
      continue;
    }
    std::byte* dst = scratch != nullptr ? scratch : out;
    size_t produced = 0;
    std::string error;
    if (info.kind == CodecKind::kLz4) {
      const int result =
          LZ4_decompress_safe(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst),
                              static_cast<int>(size), static_cast<int>(bytes));
      if (result < 0) error = absl::StrCat("LZ4_decompress_safe returned ", result);
      produced = result < 0 ? 0 : static_cast<size_t>(result);
    } else {
      const size_t result = ZSTD_decompressDCtx(dctx, dst, bytes, src, size);
      if (ZSTD_isError(result)) error = ZSTD_getErrorName(result);
      produced = ZSTD_isError(result) ? 0 : result;
    }
    if (!error.empty() || produced != bytes) {
      return absl::DataLossError(absl::StrCat(
          "chunk ", c, " of ", chunks, " of the ", name, " payload does not decompress to its ",
          bytes, " bytes: ", error.empty() ? absl::StrCat("got ", produced) : error));
    }
    if (scratch != nullptr) kernels.unshuffle4(scratch, len, out);
  }
  return absl::OkStatus();
}

}  // namespace

// ------------------------------------------------------------------------------ public

absl::Span<const CodecKind> AllCodecKinds() {
  static constexpr std::array<CodecKind, 6> kKinds = {CodecKind::kRaw,  CodecKind::kFp16,
                                                      CodecKind::kBf16, CodecKind::kInt8Blockwise,
                                                      CodecKind::kLz4,  CodecKind::kZstd};
  return kKinds;
}

absl::string_view CodecKindName(CodecKind kind) {
  switch (kind) {
    case CodecKind::kRaw:
      return "raw";
    case CodecKind::kFp16:
      return "fp16";
    case CodecKind::kBf16:
      return "bf16";
    case CodecKind::kInt8Blockwise:
      return "int8_blockwise";
    case CodecKind::kLz4:
      return "lz4";
    case CodecKind::kZstd:
      return "zstd";
  }
  return "unknown";
}

absl::StatusOr<CodecKind> ParseCodecKind(absl::string_view name) {
  for (CodecKind kind : AllCodecKinds()) {
    if (CodecKindName(kind) == name) return kind;
  }
  std::vector<absl::string_view> names;
  for (CodecKind kind : AllCodecKinds()) names.push_back(CodecKindName(kind));
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec \"", name, "\"; valid codecs: ", absl::StrJoin(names, ", ")));
}

absl::Status ValidateOptions(const CodecOptions& options) {
  if (!IsKnownKind(options.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec kind ", static_cast<int>(options.kind)));
  }
  if (options.kind == CodecKind::kInt8Blockwise &&
      !IsPowerOfTwoIn(options.block_size, kMinInt8Block, kMaxInt8Block)) {
    return absl::InvalidArgumentError(absl::StrCat("block_size ", options.block_size,
                                                   " must be a power of two in [", kMinInt8Block,
                                                   ", ", kMaxInt8Block, "] for int8_blockwise"));
  }
  if (options.kind == CodecKind::kZstd &&
      (options.zstd_level < ZSTD_minCLevel() || options.zstd_level > ZSTD_maxCLevel())) {
    return absl::InvalidArgumentError(absl::StrCat("zstd_level ", options.zstd_level,
                                                   " must be in [", ZSTD_minCLevel(), ", ",
                                                   ZSTD_maxCLevel(), "]"));
  }
  if (options.overflow != OverflowPolicy::kError && options.overflow != OverflowPolicy::kSaturate) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown overflow policy ", static_cast<int>(options.overflow)));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MaxEncodedBytes(const CodecOptions& options, size_t count) {
  LOOM_RETURN_IF_ERROR(ValidateOptions(options));
  if (count > kMaxCount) {
    return absl::InvalidArgumentError(absl::StrCat("element count ", count, " is too large"));
  }
  const size_t payload =
      IsLossless(options.kind)
          ? 4 * CeilDiv(count, kLosslessChunkElements) + 4 * count
          : FixedPayloadBytes(options.kind, count, static_cast<uint32_t>(options.block_size));
  return kEncodedHeaderBytes + payload;
}

absl::StatusOr<size_t> EncodeTensor(const CodecOptions& options, absl::Span<const float> input,
                                    absl::Span<std::byte> output) {
  LOOM_ASSIGN_OR_RETURN(const size_t max_bytes, MaxEncodedBytes(options, input.size()));
  if (output.size() < max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("output has ", output.size(), " bytes but ", CodecKindName(options.kind),
                     " of ", input.size(), " elements needs MaxEncodedBytes = ", max_bytes));
  }
  std::byte* const payload = output.data() + kEncodedHeaderBytes;
  uint8_t flags = 0;
  uint32_t block_size = 0;
  size_t payload_bytes = max_bytes - kEncodedHeaderBytes;
  uint32_t crc = 0;
  switch (options.kind) {
    case CodecKind::kRaw:
      crc = EncodeRaw(input, payload);
      break;
    case CodecKind::kFp16: {
      LOOM_ASSIGN_OR_RETURN(crc,
                            EncodeHalf<Float16>(options.kind, options.overflow, input, payload));
      break;
    }
    case CodecKind::kBf16: {
      LOOM_ASSIGN_OR_RETURN(crc,
                            EncodeHalf<BFloat16>(options.kind, options.overflow, input, payload));
      break;
    }
    case CodecKind::kInt8Blockwise: {
      block_size = static_cast<uint32_t>(options.block_size);
      LOOM_ASSIGN_OR_RETURN(crc, EncodeInt8(input, block_size, payload));
      break;
    }
    case CodecKind::kLz4:
    case CodecKind::kZstd: {
      block_size = static_cast<uint32_t>(kLosslessChunkElements);
      flags = options.byte_shuffle ? kFlagByteShuffle : 0;
      LOOM_ASSIGN_OR_RETURN(payload_bytes, EncodeLossless(options, input, payload));
      crc = Crc32c(absl::MakeConstSpan(payload, payload_bytes));
      break;
    }
  }
  WriteHeader(options.kind, flags, input.size(), payload_bytes, block_size, crc, output.data());
  return kEncodedHeaderBytes + payload_bytes;
}

absl::StatusOr<std::vector<std::byte>> EncodeTensor(const CodecOptions& options,
                                                    absl::Span<const float> input) {
  LOOM_ASSIGN_OR_RETURN(const size_t max_bytes, MaxEncodedBytes(options, input.size()));
  std::vector<std::byte> frame(max_bytes);
  LOOM_ASSIGN_OR_RETURN(const size_t bytes, EncodeTensor(options, input, absl::MakeSpan(frame)));
  if (bytes < frame.size()) {
    frame.resize(bytes);
    frame.shrink_to_fit();  // A compressed frame should not pin the raw size.
  }
  return frame;
}

absl::StatusOr<EncodedInfo> InspectEncodedTensor(absl::Span<const std::byte> encoded) {
  return ParseHeader(encoded);
}

absl::Status DecodeTensor(absl::Span<const std::byte> encoded, absl::Span<float> output) {
  LOOM_ASSIGN_OR_RETURN(const EncodedInfo info, ParseHeader(encoded));
  if (encoded.size() < info.encoded_bytes) {
    return absl::DataLossError(absl::StrCat(
        "truncated frame: the header says ", kEncodedHeaderBytes, " + ", info.payload_bytes, " = ",
        info.encoded_bytes, " bytes but the buffer has ", encoded.size()));
  }
  if (encoded.size() > info.encoded_bytes) {
    return absl::DataLossError(
        absl::StrCat("the frame is ", info.encoded_bytes, " bytes (", kEncodedHeaderBytes, " + ",
                     info.payload_bytes, " payload) but the buffer has ", encoded.size(), ": ",
                     encoded.size() - info.encoded_bytes, " trailing bytes"));
  }
  if (output.size() != info.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("the frame holds ", info.count, " elements but output has ", output.size()));
  }
  const std::byte* const payload = encoded.data() + kEncodedHeaderBytes;
  uint32_t crc = 0;
  switch (info.kind) {
    case CodecKind::kRaw:
      crc = DecodeRaw(payload, output);
      break;
    case CodecKind::kFp16: {
      LOOM_ASSIGN_OR_RETURN(crc, DecodeHalf<Float16>(payload, output));
      break;
    }
    case CodecKind::kBf16: {
      LOOM_ASSIGN_OR_RETURN(crc, DecodeHalf<BFloat16>(payload, output));
      break;
    }
    case CodecKind::kInt8Blockwise:
      crc = DecodeInt8(payload, info.block_size, output);
      break;
    case CodecKind::kLz4:
    case CodecKind::kZstd: {
      // The whole payload is checked first: corrupt bytes never reach the decompressor.
      crc = Crc32c(absl::MakeConstSpan(payload, info.payload_bytes));
      if (crc != info.payload_crc32c) return PayloadChecksumError(info.payload_crc32c, crc);
      return DecodeLossless(info, payload, output);
    }
  }
  if (crc != info.payload_crc32c) return PayloadChecksumError(info.payload_crc32c, crc);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> DecodeTensor(absl::Span<const std::byte> encoded) {
  LOOM_ASSIGN_OR_RETURN(const EncodedInfo info, ParseHeader(encoded));
  std::vector<float> output;
  // A frame of the wrong size fails before the allocation (DecodeTensor words the error).
  if (encoded.size() == info.encoded_bytes) output.resize(info.count);
  LOOM_RETURN_IF_ERROR(DecodeTensor(encoded, absl::MakeSpan(output)));
  return output;
}

}  // namespace loom
