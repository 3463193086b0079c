// CommBuffer: host memory allocated by a Transport for the data it moves, so that
// the transport can move it without copies where it knows how (the pattern of
// NCCL's ncclMemAlloc and of MPI_Alloc_mem). A rank's hot communication buffers (a
// ZeRO bucket, a data-parallel gradient bucket) live in one, and every collective
// over that transport takes the faster path when its send buffers are one.
//
//   shm:     a SharedBuffer (transport/shm/shared_buffer.h), a memfd mapping that
//            a receiving peer maps once and copies with memcpy (or combines from
//            directly) instead of reading through process_vm_readv (CMA). zero_copy()
//            is true.
//   inproc:  ordinary memory: ranks are threads, every buffer is already shared.
//   mpi, gloo: ordinary memory; their engines move it as any other buffer (Open
//            MPI's shared-memory BTL copies through CMA either way, and MPI_Alloc_mem
//            registers nothing without an RDMA network).
//   nccl:    Unimplemented; device memory comes from core/gpu's DeviceBuffer.
// Any other memory still works with every transport: a CommBuffer is an
// optimization, never a requirement, and a collective given ordinary memory falls
// back to the ordinary path, message by message.
//
// Alignment and contents: 4096-byte aligned (a page), zeroed, `size()` bytes exactly
// (the mapping is rounded up to whole pages). size 0 gives an empty buffer
// (data() == nullptr).
//
// Lifetime: the buffer is the caller's, independent of the transport that made it:
// it may outlive it (and be freed after it) and may be used with other transports
// (as ordinary memory there). As with any send buffer (transport.h, Buffers), it
// must not be freed or written while a send from it is in flight.
//
// A peer that dies: a receiver keeps its own mapping of a sender's shared buffer, so
// the memory stays valid in the receiver however the sender ends; the receiver's
// pending requests from that peer fail with Unavailable naming it (transport.h,
// Failure), never with a fault. A receiver that dies holding a mapping changes
// nothing for the sender: its buffer is its own, and the kernel drops the dead
// process's mapping.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(CommBuffer bucket, comm.AllocateBuffer(n * sizeof(float)));
//   absl::Span<float> grads = bucket.As<float>();      // n floats, zeroed
//   ...accumulate gradients into grads...
//   LOOM_RETURN_IF_ERROR(comm.AllReduce(grads, ReduceOp::kAvg));   // mapped by peers
#ifndef LOOM_COLLECTIVES_TRANSPORT_COMM_BUFFER_H_
#define LOOM_COLLECTIVES_TRANSPORT_COMM_BUFFER_H_

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

inline constexpr size_t kCommBufferAlignment = 4096;

class CommBuffer {
 public:
  // Owner keeps a buffer's memory alive; destroying it frees the memory.
  class Owner {
   public:
    virtual ~Owner() = default;
  };

  // Ordinary returns `bytes` of zeroed, page-aligned private memory (anonymous
  // mmap). ResourceExhausted naming the size when it cannot be had.
  static absl::StatusOr<CommBuffer> Ordinary(size_t bytes);

  // A buffer over `bytes`, kept alive by `owner`. zero_copy: the transport that made
  // it moves it without copying through the kernel.
  CommBuffer(absl::Span<std::byte> bytes, bool zero_copy, std::unique_ptr<Owner> owner)
      : bytes_(bytes), zero_copy_(zero_copy), owner_(std::move(owner)) {}

  CommBuffer() = default;
  CommBuffer(CommBuffer&& other) noexcept
      : bytes_(std::exchange(other.bytes_, {})),
        zero_copy_(std::exchange(other.zero_copy_, false)),
        owner_(std::move(other.owner_)) {}
  CommBuffer& operator=(CommBuffer&& other) noexcept {
    if (this != &other) {
      owner_ = std::move(other.owner_);  // frees this buffer's memory first
      bytes_ = std::exchange(other.bytes_, {});
      zero_copy_ = std::exchange(other.zero_copy_, false);
    }
    return *this;
  }
  CommBuffer(const CommBuffer&) = delete;
  CommBuffer& operator=(const CommBuffer&) = delete;

  std::byte* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  absl::Span<std::byte> bytes() const { return bytes_; }
  // zero_copy is true when the transport that allocated it moves it without a copy
  // through the kernel (shm); false for ordinary memory.
  bool zero_copy() const { return zero_copy_; }
  // As views the buffer as size() / sizeof(T) elements of T.
  template <typename T>
  absl::Span<T> As() const {
    return absl::MakeSpan(reinterpret_cast<T*>(bytes_.data()), bytes_.size() / sizeof(T));
  }

 private:
  absl::Span<std::byte> bytes_;
  bool zero_copy_ = false;
  std::unique_ptr<Owner> owner_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_COMM_BUFFER_H_
