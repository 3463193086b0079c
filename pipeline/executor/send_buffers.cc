#include "pipeline/executor/send_buffers.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/statusor.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<CommBuffer> SendBuffers::Stage(Transport& transport,
                                              absl::Span<const float> values) {
  if (values.empty()) return CommBuffer();
  const size_t bytes = values.size() * sizeof(float);
  if (transport_ != &transport) {
    // Another transport's memory may not be zero-copy with this one: start over.
    transport_ = &transport;
    free_.clear();
    LOOM_ASSIGN_OR_RETURN(CommBuffer probe, transport.AllocateBuffer(bytes));
    allocated_bytes_ += static_cast<int64_t>(probe.size());
    zero_copy_ = probe.zero_copy();
    if (zero_copy_) Return(std::move(probe));
  }
  if (!zero_copy_) return CommBuffer();
  // The smallest free buffer that holds the payload, else a new one.
  auto fits = std::find_if(free_.begin(), free_.end(),
                           [bytes](const CommBuffer& b) { return b.size() >= bytes; });
  CommBuffer buffer;
  if (fits != free_.end()) {
    buffer = std::move(*fits);
    free_.erase(fits);
  } else {
    LOOM_ASSIGN_OR_RETURN(buffer, transport.AllocateBuffer(bytes));
    allocated_bytes_ += static_cast<int64_t>(buffer.size());
  }
  std::memcpy(buffer.data(), values.data(), bytes);
  ++staged_;
  return buffer;
}

void SendBuffers::Return(CommBuffer buffer) {
  if (buffer.empty()) return;
  auto at = std::lower_bound(
      free_.begin(), free_.end(), buffer.size(),
      [](const CommBuffer& b, size_t size) { return b.size() < size; });
  free_.insert(at, std::move(buffer));
  if (free_.size() > kMaxFree) free_.erase(free_.begin());
}

}  // namespace loom
