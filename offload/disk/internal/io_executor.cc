#include "offload/disk/internal/io_executor.h"

namespace loom {
namespace disk_internal {

absl::string_view IoKindName(IoKind kind) {
  switch (kind) {
    case IoKind::kRead:
      return "read";
    case IoKind::kWrite:
      return "write";
    case IoKind::kDataSync:
      return "fdatasync";
  }
  return "unknown";
}

absl::StatusOr<absl::Span<std::byte>> BounceBuffer::Get(size_t bytes) {
  if (buffer_.size() < bytes) {
    buffer_ = AlignedBuffer<std::byte>();  // free the old one before allocating
    auto fresh = AlignedBuffer<std::byte>::Create(RoundUpToDirect(bytes), kDirectAlignment);
    if (!fresh.ok()) return fresh.status();
    buffer_ = std::move(fresh).value();
  }
  return absl::MakeSpan(buffer_.data(), bytes);
}

}  // namespace disk_internal
}  // namespace loom
