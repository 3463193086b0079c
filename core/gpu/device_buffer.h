// DeviceBuffer: bytes that live on the host (pageable or pinned) or on one CUDA
// device, owned, move-only, freed with the call that matches their allocation.
// Device memory is plain cudaMalloc, never managed memory: a GPU kernel reading a
// host pointer, or the CPU a device pointer, is a bug Loom wants to see, not a
// page-migration slowdown. Synchronous host copies for setup and checks; the
// asynchronous copies on a stream are CudaStream's (cuda_stream.h).
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(DeviceBuffer grads, DeviceBuffer::Allocate(MemorySpace::kDevice, n * 4));
//   LOOM_RETURN_IF_ERROR(grads.CopyFromHost(AsBytes(host_grads)));
//   ...  // kernels, NCCL on grads.data()
//   LOOM_RETURN_IF_ERROR(grads.CopyToHost(AsWritableBytes(host_grads)));
#ifndef LOOM_CORE_GPU_DEVICE_BUFFER_H_
#define LOOM_CORE_GPU_DEVICE_BUFFER_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// Where a DeviceBuffer's bytes live.
enum class MemorySpace {
  kHost,        // pageable host memory (64-byte aligned)
  kHostPinned,  // page-locked host memory (cudaHostAlloc): asynchronous DMA copies
  kDevice,      // memory of one CUDA device (cudaMalloc)
};

absl::string_view MemorySpaceName(MemorySpace space);

class DeviceBuffer {
 public:
  // Allocate returns `bytes` bytes in `space` (on `device` for kDevice; pinned host
  // memory is portable across devices). Zero bytes is a valid, empty buffer.
  // ResourceExhausted when the allocation fails; InvalidArgument for a device
  // outside [0, count); FailedPrecondition for device or pinned memory on a machine
  // without a CUDA device.
  static absl::StatusOr<DeviceBuffer> Allocate(MemorySpace space, size_t bytes, int device = 0);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  MemorySpace space() const { return space_; }
  int device() const { return device_; }
  bool on_device() const { return space_ == MemorySpace::kDevice; }

  // CopyFromHost / CopyToHost copy `bytes` between host memory and this buffer at
  // `offset`, synchronously. OutOfRange naming the sizes when the range does not
  // fit; the CUDA error otherwise.
  absl::Status CopyFromHost(absl::Span<const std::byte> bytes, size_t offset = 0);
  absl::Status CopyToHost(absl::Span<std::byte> bytes, size_t offset = 0) const;

 private:
  DeviceBuffer(std::byte* data, size_t size, MemorySpace space, int device)
      : data_(data), size_(size), space_(space), device_(device) {}
  void Release();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  MemorySpace space_ = MemorySpace::kHost;
  int device_ = 0;
};

}  // namespace loom

#endif  // LOOM_CORE_GPU_DEVICE_BUFFER_H_
