#include "offload/adamw/blockwise8.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "offload/adamw/internal/code_map.h"

namespace loom {
namespace {

namespace ai = adamw_internal;

absl::Status CheckSizes(absl::string_view function, int64_t block_size, size_t values, size_t codes,
                        size_t absmax) {
  if (absl::Status status = ValidateBlockSize(block_size); !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(function, ": ", status.message()));
  }
  if (values != codes) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": values has ", values, " elements but codes has ", codes));
  }
  const int64_t blocks = NumBlocks(static_cast<int64_t>(values), block_size);
  if (static_cast<int64_t>(absmax) != blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat(function, ": absmax has ", absmax, " elements but ", values,
                     " values in blocks of ", block_size, " need ", blocks));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view CodeMapName(CodeMap map) {
  switch (map) {
    case CodeMap::kSigned:
      return "signed";
    case CodeMap::kUnsigned:
      return "unsigned";
  }
  return "unknown";
}

absl::Status ValidateBlockSize(int64_t block_size) {
  if (block_size >= kMinBlockSize && block_size <= kMaxBlockSize && block_size % 64 == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("block_size is ", block_size,
                                                 "; it must be a multiple of 64 in [",
                                                 kMinBlockSize, ", ", kMaxBlockSize, "]"));
}

int64_t NumBlocks(int64_t count, int64_t block_size) {
  return (count + block_size - 1) / block_size;
}

float CodeLevel(CodeMap map, uint8_t code) {
  return map == CodeMap::kSigned ? ai::DecodeSigned(code, 1.0f) : ai::DecodeUnsigned(code, 1.0f);
}

absl::Status QuantizeBlockwise8(CodeMap map, int64_t block_size, absl::Span<const float> values,
                                absl::Span<uint8_t> codes, absl::Span<float> absmax) {
  if (absl::Status status =
          CheckSizes("QuantizeBlockwise8", block_size, values.size(), codes.size(), absmax.size());
      !status.ok()) {
    return status;
  }
  const int64_t count = static_cast<int64_t>(values.size());
  for (int64_t begin = 0, block = 0; begin < count; begin += block_size, ++block) {
    const int64_t end = std::min(count, begin + block_size);
    uint32_t max_bits = 0;
    for (int64_t i = begin; i < end; ++i) max_bits = std::max(max_bits, ai::AbsBits(values[i]));
    const float scale = ai::BitsToFloat(max_bits);
    const float inv = ai::InverseScale(scale);
    for (int64_t i = begin; i < end; ++i) {
      codes[i] = map == CodeMap::kSigned ? ai::EncodeSigned(values[i], inv)
                                         : ai::EncodeUnsigned(values[i], inv);
    }
    absmax[block] = scale;
  }
  return absl::OkStatus();
}

absl::Status DequantizeBlockwise8(CodeMap map, int64_t block_size, absl::Span<const uint8_t> codes,
                                  absl::Span<const float> absmax, absl::Span<float> values) {
  if (absl::Status status = CheckSizes("DequantizeBlockwise8", block_size, values.size(),
                                       codes.size(), absmax.size());
      !status.ok()) {
    return status;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const float scale = absmax[i / static_cast<size_t>(block_size)];
    values[i] = map == CodeMap::kSigned ? ai::DecodeSigned(codes[i], scale)
                                        : ai::DecodeUnsigned(codes[i], scale);
  }
  return absl::OkStatus();
}

}  // namespace loom
