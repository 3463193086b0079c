#include "pipeline/executor/internal/wire_header.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"

namespace loom {
namespace pipeline_executor_internal {
namespace {

// "LOOMPIPE" in ASCII: a message from anything else on the same tag stands out.
constexpr int64_t kMagic = 0x4C4F4F4D50495045;

enum Word : int {
  kMagicWord = 0,
  kKindWord = 1,
  kStageWord = 2,
  kMicrobatchWord = 3,
  kNumDimsWord = 4,
  kFirstDimWord = 5,
  kBytesWord = kFirstDimWord + kMaxTensorDims,
};
static_assert(kBytesWord < kWireHeaderWords, "the header words overlap");

absl::Status Corrupt(absl::string_view what) {
  return absl::FailedPreconditionError(
      absl::StrCat("the message is not a pipeline tensor header: ", what));
}

}  // namespace

absl::StatusOr<WireHeaderWords> EncodeWireHeader(const Action& send,
                                                 absl::Span<const int64_t> shape) {
  if (shape.size() > static_cast<size_t>(kMaxTensorDims)) {
    return absl::InvalidArgumentError(absl::StrCat(send.ToString(), ": a tensor of shape ",
                                                   ShapeString(shape), " has more than ",
                                                   kMaxTensorDims, " dimensions"));
  }
  const int64_t elements = CheckedNumElements(shape);
  if (elements < 0 || elements > INT64_MAX / static_cast<int64_t>(sizeof(float))) {
    return absl::InvalidArgumentError(absl::StrCat(send.ToString(), ": tensor shape ",
                                                   ShapeString(shape),
                                                   " has a negative dimension or too many elements"));
  }
  WireHeaderWords words = {};
  words[kMagicWord] = kMagic;
  words[kKindWord] = static_cast<int64_t>(send.kind);
  words[kStageWord] = send.stage;
  words[kMicrobatchWord] = send.microbatch;
  words[kNumDimsWord] = static_cast<int64_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) words[kFirstDimWord + i] = shape[i];
  words[kBytesWord] = elements * static_cast<int64_t>(sizeof(float));
  return words;
}

absl::StatusOr<WireHeader> DecodeWireHeader(const WireHeaderWords& words) {
  if (words[kMagicWord] != kMagic) {
    return Corrupt(absl::StrCat("magic 0x", absl::Hex(words[kMagicWord]), ", expected 0x",
                                absl::Hex(kMagic)));
  }
  WireHeader header;
  const int64_t kind = words[kKindWord];
  if (kind != static_cast<int64_t>(ActionKind::kSendForward) &&
      kind != static_cast<int64_t>(ActionKind::kSendBackward)) {
    return Corrupt(absl::StrCat("action kind ", kind, " is not SEND_F or SEND_B"));
  }
  header.send.kind = static_cast<ActionKind>(kind);
  header.send.stage = words[kStageWord];
  header.send.microbatch = words[kMicrobatchWord];
  if (header.send.stage < 0 || header.send.microbatch < 0) {
    return Corrupt(absl::StrCat("stage ", header.send.stage, ", microbatch ",
                                header.send.microbatch));
  }
  const int64_t ndim = words[kNumDimsWord];
  if (ndim < 0 || ndim > kMaxTensorDims) {
    return Corrupt(absl::StrCat(ndim, " dimensions"));
  }
  header.shape.assign(words.begin() + kFirstDimWord, words.begin() + kFirstDimWord + ndim);
  header.payload_bytes = words[kBytesWord];
  const int64_t elements = CheckedNumElements(header.shape);
  if (elements < 0 || elements > INT64_MAX / static_cast<int64_t>(sizeof(float)) ||
      header.payload_bytes != elements * static_cast<int64_t>(sizeof(float))) {
    return Corrupt(absl::StrCat("shape ", ShapeString(header.shape), " with ",
                                header.payload_bytes, " payload bytes"));
  }
  return header;
}

}  // namespace pipeline_executor_internal
}  // namespace loom
