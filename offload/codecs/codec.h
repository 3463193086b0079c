// Codecs for offloaded tensors: f32 arrays (parameters, gradients, optimizer state)
// written to host memory or disk and read back later, possibly by another process.
//
// An encoded tensor is one self-describing frame: a 64-byte header (magic, format
// version, codec, element count, block size, payload size, CRC-32C of the payload,
// CRC-32C of the header) followed by the payload. DecodeTensor needs nothing but the
// frame; it checks every header field and the payload checksum, so a corrupt or
// truncated frame is reported as DataLoss naming what is wrong, never decoded into
// silent garbage. README.md has the byte layout and the measured ratios and speeds.
//
//   codec            payload per element          round trip
//   raw              4 bytes                      bitwise
//   fp16             2 bytes (IEEE binary16)      round to nearest even
//   bf16             2 bytes (bfloat16)           round to nearest even
//   int8_blockwise   1 byte + 4 per block         |x - x'| <= scale * (1/2 + 2^-14)
//   lz4, zstd        compressed chunks            bitwise (NaN payloads, -0.0 kept)
//
// Policies:
//  - fp16/bf16 narrow exactly as core/half.h (ties to even, subnormals as IEEE rounding
//    gives, NaN quieted with its sign and leading payload bits, ±Inf kept). A finite
//    value that would round to infinity (|x| >= 65520 for fp16, >= 0x1.FFp127 for bf16)
//    is InvalidArgument naming its index and value, unless CodecOptions::overflow is
//    kSaturate, which writes the largest finite value of that sign instead.
//  - int8_blockwise: per block of block_size elements one f32 scale = absmax / 127
//    (at least FLT_MIN), codes round(x / scale) in [-127, 127]; a block of zeros
//    decodes to +0.0 exactly (-0.0 loses its sign); NaN or ±Inf anywhere in the input
//    is InvalidArgument naming the index (it would poison its block's scale).
//  - lz4/zstd compress chunks of 65536 elements independently, optionally after a
//    byte shuffle (byte j of every float into plane j, as Blosc/HDF5 do); a chunk that
//    would not shrink by 1/64 is stored as is, so a frame never exceeds
//    MaxEncodedBytes, which is raw size + 64 + 4 bytes per chunk.
//
// Every function is stateless and thread-safe (zstd contexts are per thread). On any
// error, the contents of the output span are unspecified. Results assume the default
// floating-point environment (round to nearest, FTZ/DAZ off).
//
// Example:
//   CodecOptions options{CodecKind::kInt8Blockwise};     // block_size 256
//   LOOM_ASSIGN_OR_RETURN(std::vector<std::byte> frame, EncodeTensor(options, weights));
//   // frame.size() == 64 + 1 MiB + 16 KiB for 1 Mi weights: ratio 3.94
//   std::vector<float> restored(weights.size());
//   LOOM_RETURN_IF_ERROR(DecodeTensor(frame, absl::MakeSpan(restored)));
//   frame[100] ^= std::byte{1};
//   DecodeTensor(frame, absl::MakeSpan(restored));
//   // DataLoss: "payload checksum mismatch: header has 0x1c2b3a49, payload hashes to ..."
#ifndef LOOM_OFFLOAD_CODECS_CODEC_H_
#define LOOM_OFFLOAD_CODECS_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// The codecs. The numeric values are stored in frames: never reuse or renumber one.
enum class CodecKind : uint8_t {
  kRaw = 0,            // "raw": the f32 bytes, checksummed.
  kFp16 = 1,           // "fp16"
  kBf16 = 2,           // "bf16"
  kInt8Blockwise = 3,  // "int8_blockwise"
  kLz4 = 4,            // "lz4": LZ4_compress_default per chunk.
  kZstd = 5,           // "zstd": ZSTD_compress at CodecOptions::zstd_level per chunk.
};

// AllCodecKinds returns every CodecKind in numeric order.
absl::Span<const CodecKind> AllCodecKinds();

// CodecKindName returns the name above ("unknown" for a value outside the enum).
absl::string_view CodecKindName(CodecKind kind);

// ParseCodecKind parses a name above; InvalidArgument lists the valid names.
absl::StatusOr<CodecKind> ParseCodecKind(absl::string_view name);

// What fp16/bf16 do with a finite value beyond their largest finite value.
enum class OverflowPolicy {
  kError,     // InvalidArgument naming the first such element.
  kSaturate,  // Store ±65504 (fp16) or ±0x1.FEp127 (bf16).
};

struct CodecOptions {
  CodecKind kind = CodecKind::kRaw;
  // int8_blockwise only: elements per scale, a power of two in [32, 65536].
  int64_t block_size = 256;
  // zstd only: ZSTD_compress's level, ZSTD_minCLevel() (negative: faster) to
  // ZSTD_maxCLevel() (22); 0 means zstd's default (3).
  int zstd_level = 1;
  // lz4/zstd only: byte-shuffle each chunk before compressing it.
  bool byte_shuffle = true;
  // fp16/bf16 only.
  OverflowPolicy overflow = OverflowPolicy::kError;
};

// ValidateOptions returns InvalidArgument naming the field if `options` is unusable
// (unknown kind; block_size or zstd_level out of range for the codec that uses it).
absl::Status ValidateOptions(const CodecOptions& options);

// The header's size; the payload follows it.
inline constexpr size_t kEncodedHeaderBytes = 64;
// The version of the frame format this build writes and reads.
inline constexpr uint16_t kEncodedFormatVersion = 1;
// Elements per independently compressed lz4/zstd chunk.
inline constexpr int64_t kLosslessChunkElements = 65536;

// MaxEncodedBytes returns the largest frame EncodeTensor may write for `count`
// elements (the exact size, except for lz4/zstd). InvalidArgument for bad options or
// a size that overflows.
absl::StatusOr<size_t> MaxEncodedBytes(const CodecOptions& options, size_t count);

// EncodeTensor writes `input` as one frame at the start of `output`, which must hold
// MaxEncodedBytes(options, input.size()) bytes, and returns the frame's size. Returns
// InvalidArgument for bad options, a too-small output (naming both sizes), an fp16/bf16
// overflow under OverflowPolicy::kError or a non-finite int8_blockwise input (naming
// the element's index and value); Internal if lz4/zstd fail.
absl::StatusOr<size_t> EncodeTensor(const CodecOptions& options, absl::Span<const float> input,
                                    absl::Span<std::byte> output);

// EncodeTensor into a new vector of exactly the frame's size.
absl::StatusOr<std::vector<std::byte>> EncodeTensor(const CodecOptions& options,
                                                    absl::Span<const float> input);

// What a frame's header says (InspectEncodedTensor).
struct EncodedInfo {
  CodecKind kind = CodecKind::kRaw;
  uint64_t count = 0;         // f32 elements.
  uint32_t block_size = 0;    // int8_blockwise: block; lz4/zstd: chunk; else 0.
  bool byte_shuffle = false;  // lz4/zstd chunks were byte-shuffled.
  uint64_t payload_bytes = 0;
  uint64_t encoded_bytes = 0;  // The whole frame: kEncodedHeaderBytes + payload_bytes.
  uint32_t payload_crc32c = 0;
};

// InspectEncodedTensor checks and parses the header, which is all it needs: `encoded`
// may be just the first kEncodedHeaderBytes of a frame (to learn encoded_bytes before
// reading the rest). It does not read or checksum the payload. Errors as DecodeTensor's
// header errors below.
absl::StatusOr<EncodedInfo> InspectEncodedTensor(absl::Span<const std::byte> encoded);

// DecodeTensor decodes the frame `encoded` (exactly one frame, no trailing bytes) into
// `output`. Returns
//  - DataLoss naming the field for a frame shorter than its header or than the header
//    says, trailing bytes, a bad magic, an unsupported format version, a header
//    checksum mismatch, an unknown codec or flag, a block size or payload size that
//    does not fit the codec, a payload checksum mismatch, or an lz4/zstd chunk that
//    does not decompress to its size;
//  - InvalidArgument if output.size() differs from the frame's element count (both
//    numbers named).
absl::Status DecodeTensor(absl::Span<const std::byte> encoded, absl::Span<float> output);

// DecodeTensor into a new vector of the frame's element count.
absl::StatusOr<std::vector<float>> DecodeTensor(absl::Span<const std::byte> encoded);

}  // namespace loom

#endif  // LOOM_OFFLOAD_CODECS_CODEC_H_
