#include "integrations/torch/shared_tensor.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/shm/shared_buffer.h"

namespace loom {
namespace pytorch {

absl::StatusOr<at::Tensor> SharedBytes(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("loom: shared tensor of ", bytes, " bytes"));
  }
  if (bytes == 0) return at::empty({0}, at::kByte);
  absl::StatusOr<SharedBuffer> buffer = SharedBuffer::Allocate(static_cast<size_t>(bytes));
  if (!buffer.ok()) return buffer.status();
  // The deleter owns the buffer. shared_ptr, not unique_ptr: from_blob takes a
  // std::function, which must be copyable.
  auto owner = std::make_shared<SharedBuffer>(std::move(*buffer));
  void* data = owner->data();
  return at::from_blob(
      data, {bytes}, [owner](void*) mutable { owner.reset(); },
      at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

}  // namespace pytorch
}  // namespace loom
