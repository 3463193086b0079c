// SharedBytes: a CPU tensor in Loom's shared communication memory (a SharedBuffer,
// collectives/transport/shm/shared_buffer.h), as NCCL users allocate with
// ncclMemAlloc. Over shm, a peer maps such memory once and copies from it with memcpy
// instead of reading it through the kernel (process_vm_readv), so collectives on
// tensors that live there run faster at sizes beyond the caches. Any tensor still
// works with every call; this is an optimization for the buffers a program reuses
// (a ZeRO shard and its gather buffer, a flat gradient bucket).
//
// Example (Python: loom_torch.empty(4 << 20) wraps this):
//   at::Tensor bytes = *SharedBytes(16 << 20);            // uint8, 16 MiB, zeroed
//   at::Tensor grads = bytes.view(at::kFloat);            // 4 Mi floats
//   // all_reduce(grads): the peer maps it and memcpy's from it
#ifndef LOOM_INTEGRATIONS_TORCH_SHARED_TENSOR_H_
#define LOOM_INTEGRATIONS_TORCH_SHARED_TENSOR_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace loom {
namespace pytorch {

// SharedBytes returns a zeroed uint8 tensor of `bytes` elements in a SharedBuffer,
// freed with the tensor's storage (an empty ordinary tensor for 0).
// InvalidArgument for a negative size; ResourceExhausted naming the size when the
// memory cannot be had.
absl::StatusOr<at::Tensor> SharedBytes(int64_t bytes);

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_SHARED_TENSOR_H_
