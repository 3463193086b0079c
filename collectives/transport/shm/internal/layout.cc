#include "collectives/transport/shm/internal/layout.h"

#include <algorithm>
#include <new>

namespace loom {
namespace shm_internal {
namespace {

constexpr size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

constexpr size_t kControlBytes = RoundUp(sizeof(ChannelControl), kCacheLineBytes);
constexpr size_t kSlotBytes = RoundUp(kSlotsPerChannel * sizeof(SendSlot), kCacheLineBytes);

}  // namespace

SegmentLayout::SegmentLayout(int world_size, size_t eager_bytes, size_t staging_bytes)
    : world_size_(world_size),
      eager_bytes_(eager_bytes),
      cell_stride_(RoundUp(sizeof(CellHeader) + std::max(eager_bytes, sizeof(CellLargeFields)),
                           kCacheLineBytes)),
      chunk_bytes_(staging_bytes / kChunksPerChannel / kCacheLineBytes * kCacheLineBytes),
      chunk_stride_(sizeof(ChunkHeader) + chunk_bytes_),
      header_bytes_(RoundUp(sizeof(RankHeader), kPageBytes)),
      core_bytes_(
          RoundUp(kControlBytes + kSlotBytes + kCellsPerChannel * cell_stride_, kPageBytes)),
      channel_bytes_(core_bytes_ + RoundUp(kChunksPerChannel * chunk_stride_, kPageBytes)) {}

std::vector<ByteRange> SegmentLayout::CoreRanges() const {
  std::vector<ByteRange> ranges = {{0, header_bytes_}};
  for (int source = 0; source < world_size_; ++source) {
    ranges.push_back({header_bytes_ + source * channel_bytes_, core_bytes_});
  }
  return ranges;
}

ByteRange SegmentLayout::StagingRange(int source) const {
  return {header_bytes_ + source * channel_bytes_ + core_bytes_, channel_bytes_ - core_bytes_};
}

ChannelView SegmentLayout::channel(void* segment, int source) const {
  std::byte* base = static_cast<std::byte*>(segment) + header_bytes_ + source * channel_bytes_;
  ChannelView view;
  view.control = reinterpret_cast<ChannelControl*>(base);
  view.slots = reinterpret_cast<SendSlot*>(base + kControlBytes);
  view.cells = base + kControlBytes + kSlotBytes;
  view.cell_stride = cell_stride_;
  view.eager_bytes = eager_bytes_;
  view.chunks = base + core_bytes_;
  view.chunk_stride = chunk_stride_;
  view.chunk_bytes = chunk_bytes_;
  return view;
}

void SegmentLayout::Initialize(void* segment) const {
  // The segment is fresh from ftruncate, hence zeroed; constructing the shared
  // objects in place (the one use of placement new) starts their lifetimes properly.
  new (segment) RankHeader();
  for (int source = 0; source < world_size_; ++source) {
    const ChannelView view = channel(segment, source);
    new (view.control) ChannelControl();
    for (uint32_t i = 0; i < kSlotsPerChannel; ++i) new (&view.slots[i]) SendSlot();
    for (uint32_t i = 0; i < kCellsPerChannel; ++i) new (view.cell(i)) CellHeader();
  }
}

}  // namespace shm_internal
}  // namespace loom
