#include "collectives/gather_bytes.h"

#include <cstdint>

#include "core/buffer_view.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<std::vector<std::string>> GatherBytes(Communicator& world, const std::string& mine) {
  const int n = world.size();
  const int64_t my_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(world.Gather(ConstBufferView::Of(absl::MakeConstSpan(&my_size, 1)),
                                    BufferView::Of(absl::MakeSpan(sizes)), 0));
  auto bytes = [](std::string& s) {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(s.data()), s.size());
  };
  std::vector<std::string> out;
  if (world.rank() != 0) {
    std::string copy = mine;
    LOOM_RETURN_IF_ERROR(world.Send(ConstBufferView::Of(absl::MakeConstSpan(bytes(copy))), 0));
    return out;
  }
  out.resize(static_cast<size_t>(n));
  out[0] = mine;
  for (int r = 1; r < n; ++r) {
    out[r].resize(static_cast<size_t>(sizes[r]));
    LOOM_RETURN_IF_ERROR(world.Recv(BufferView::Of(bytes(out[r])), r));
  }
  return out;
}

}  // namespace loom
