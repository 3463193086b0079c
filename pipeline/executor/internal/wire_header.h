// The fixed-size header that precedes every tensor the executor sends. Private to
// //pipeline/executor.
//
// A receiver does not trust its own idea of what arrives next: it first takes this
// header, which names the sender's action and the tensor's shape, checks both
// against the action it is at and the shape its module declared, and only then
// receives the payload, of the size the header announced. So two ranks that
// disagree on the order of their messages or on a shape fail at the first such
// message with FailedPrecondition naming both sides, rather than matching the wrong
// bytes or failing with a bare size mismatch.
//
// Layout: 16 int64 words in host byte order (the ranks of one job share it):
// magic, action kind, stage, microbatch, number of dimensions, kMaxTensorDims
// dimension slots (unused ones 0), payload bytes, two zero words.
#ifndef LOOM_PIPELINE_EXECUTOR_INTERNAL_WIRE_HEADER_H_
#define LOOM_PIPELINE_EXECUTOR_INTERNAL_WIRE_HEADER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "pipeline/action.h"

namespace loom {
namespace pipeline_executor_internal {

// Tensors with more dimensions are refused at the send (InvalidArgument); stage
// activations in practice have two to four.
inline constexpr int kMaxTensorDims = 8;
inline constexpr int kWireHeaderWords = 16;

using WireHeaderWords = std::array<int64_t, kWireHeaderWords>;

struct WireHeader {
  Action send;  // The sender's SEND_F or SEND_B.
  std::vector<int64_t> shape;
  int64_t payload_bytes = 0;
};

// EncodeWireHeader returns the words announcing `send` (a SEND_F or SEND_B action)
// with a tensor of `shape`. InvalidArgument when the shape has more than
// kMaxTensorDims dimensions, a negative dimension, or too many elements.
absl::StatusOr<WireHeaderWords> EncodeWireHeader(const Action& send,
                                                 absl::Span<const int64_t> shape);

// DecodeWireHeader reads words written by EncodeWireHeader. FailedPrecondition when
// they are not such a header: wrong magic, a kind other than SEND_F / SEND_B, a
// negative stage or microbatch, a bad number of dimensions, or a payload size that
// does not match the shape.
absl::StatusOr<WireHeader> DecodeWireHeader(const WireHeaderWords& words);

}  // namespace pipeline_executor_internal
}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_INTERNAL_WIRE_HEADER_H_
