// SharedBuffer: host memory that the shm transport's peers read directly. A large
// send out of a SharedBuffer is copied by the receiver with memcpy from its own
// mapping of the buffer, instead of with process_vm_readv (CMA), which pins and
// copies page by page: on the CI-class machine a 64 MiB read moves about 6 GB/s
// mapped against 3.4 GB/s with CMA (see README.md). Like MPI_Alloc_mem or NCCL's
// ncclMemAlloc, it is an optimization: any other buffer still works as before.
//
// The memory is an anonymous memfd mapped in this process. A receiver maps it on
// first use by taking the descriptor from the sender with pidfd_getfd (Linux 5.6+,
// allowed where CMA is, as it needs the same ptrace permission) and keeps the
// mapping for the buffer's later messages. Nothing is named in /dev/shm, so a crash
// leaves nothing behind. Where the kernel refuses, the receiver falls back to CMA
// for that message, silently: the bytes arrive either way.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(SharedBuffer grads, SharedBuffer::Allocate(64 << 20));
//   absl::Span<float> g = grads.As<float>();     // 16 Mi floats, zeroed
//   ... fill g ...
//   comm.AllReduce(ConstBufferView::Of(absl::Span<const float>(g)), BufferView::Of(g),
//                  ReduceOp::kSum);              // peers map `grads` once, then memcpy
//
// Thread-safe: buffers may be allocated and freed on any thread while transports
// send from others. Freeing a buffer while a send from it is in flight is a misuse,
// as with any send buffer (transport.h, Buffers).
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_SHARED_BUFFER_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_SHARED_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

class SharedBuffer {
 public:
  // Allocate maps `bytes` (> 0) of zeroed memory, 4 KiB aligned. InvalidArgument
  // for 0; ResourceExhausted naming the size when the memory cannot be had; Internal
  // naming the call for other system errors.
  static absl::StatusOr<SharedBuffer> Allocate(size_t bytes);

  SharedBuffer() = default;
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<std::byte> bytes() const { return absl::MakeSpan(data_, size_); }
  // As views the buffer as elements of T (size() / sizeof(T) of them).
  template <typename T>
  absl::Span<T> As() const {
    return absl::MakeSpan(reinterpret_cast<T*>(data_), size_ / sizeof(T));
  }

 private:
  SharedBuffer(std::byte* data, size_t size, int fd) : data_(data), size_(size), fd_(fd) {}
  void Release();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_SHARED_BUFFER_H_
