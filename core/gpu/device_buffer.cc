#include "core/gpu/device_buffer.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {

absl::string_view MemorySpaceName(MemorySpace space) {
  switch (space) {
    case MemorySpace::kHost: return "host";
    case MemorySpace::kHostPinned: return "host_pinned";
    case MemorySpace::kDevice: return "device";
  }
  return "unknown";
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(MemorySpace space, size_t bytes, int device) {
  if (bytes == 0) return DeviceBuffer(nullptr, 0, space, device);
  if (space == MemorySpace::kHost) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("DeviceBuffer: ", bytes, " host bytes"));
    }
    return DeviceBuffer(static_cast<std::byte*>(p), bytes, space, device);
  }
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) {
    return absl::FailedPreconditionError(absl::StrCat("DeviceBuffer: ", MemorySpaceName(space),
                                                      " memory needs a CUDA device; none here"));
  }
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceBuffer: device ", device, " is outside [0, ", devices, ")"));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  if (space == MemorySpace::kHostPinned) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  } else {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
  }
  return DeviceBuffer(static_cast<std::byte*>(p), bytes, space, device);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      space_(other.space_),
      device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    space_ = other.space_;
    device_ = other.device_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  switch (space_) {
    case MemorySpace::kHost: std::free(data_); break;
    case MemorySpace::kHostPinned: cudaFreeHost(data_); break;
    case MemorySpace::kDevice:
      cudaSetDevice(device_);
      cudaFree(data_);
      break;
  }
  data_ = nullptr;
  size_ = 0;
}

namespace {

absl::Status CheckRange(size_t offset, size_t bytes, size_t size, absl::string_view what) {
  if (offset > size || bytes > size - offset) {
    return absl::OutOfRangeError(absl::StrCat("DeviceBuffer::", what, ": ", bytes,
                                              " bytes at offset ", offset, " do not fit in ",
                                              size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceBuffer::CopyFromHost(absl::Span<const std::byte> bytes, size_t offset) {
  LOOM_RETURN_IF_ERROR(CheckRange(offset, bytes.size(), size_, "CopyFromHost"));
  if (bytes.empty()) return absl::OkStatus();
  if (!on_device()) {
    std::memcpy(data_ + offset, bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(data_ + offset, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy returns once the bytes are staged, before the
  // DMA has landed them, and work on a non-blocking stream does not wait for the
  // legacy stream that carries it: wait here, so "synchronous" holds for every
  // stream.
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cudaStreamLegacy));
  return absl::OkStatus();
}

absl::Status DeviceBuffer::CopyToHost(absl::Span<std::byte> bytes, size_t offset) const {
  LOOM_RETURN_IF_ERROR(CheckRange(offset, bytes.size(), size_, "CopyToHost"));
  if (bytes.empty()) return absl::OkStatus();
  if (!on_device()) {
    std::memcpy(bytes.data(), data_ + offset, bytes.size());
    return absl::OkStatus();
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(bytes.data(), data_ + offset, bytes.size(), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace loom
