// DevicePrefetchStream: an in-order walk over offloaded tensors on a GPU, `depth` of
// them copied to the device ahead of the one being computed on, and each optionally
// copied back to the host once compute on it is done. The GPU counterpart of
// offload/prefetch_stream.h: there, worker threads fill host buffers and the caller
// waits on the host; here, copy streams fill device slots and only the compute stream
// waits, on the device, for the one copy it needs.
//
// The stream owns depth + 1 device slots, each as large as the largest tensor; tensor
// i always lands in slot i mod (depth + 1). Next(compute) hands out tensor k: it makes
// `compute` wait for k's upload, and, since everything enqueued on `compute` before
// this call was the work on k-1, it marks k-1 computed, enqueues k-1's download (after
// that), and enqueues the upload of k+depth into k-1's slot (after the slot is free:
// computed, and downloaded if it has a download). So the copy of layers k+1..k+depth
// overlaps compute on k, and nothing overwrites a slot still in use. The host never
// blocks in Next; Finish waits, with a deadline, for the last downloads.
//
// Not thread-safe: one thread drives a stream (the stager may be shared).
//
// Example (optimizer state on the host, stepped on the GPU layer by layer):
//   std::vector<DeviceTensor> tensors;
//   for (HostBlock& b : layers) tensors.push_back({"layer", b.bytes(), b.bytes()});
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DevicePrefetchStream> stream,
//                         DevicePrefetchStream::Create(*stager, tensors, {.depth = 1}));
//   while (true) {
//     LOOM_ASSIGN_OR_RETURN(std::optional<DeviceItem> item, stream->Next(compute));
//     if (!item.has_value()) break;          // every tensor was handed out
//     LOOM_RETURN_IF_ERROR(GpuAdamWStep(hyper, TensorsIn(item->data), compute));
//   }
//   LOOM_RETURN_IF_ERROR(stream->Finish(absl::Now() + absl::Seconds(30)));
//   // every layer's updated bytes are back in its HostBlock
#ifndef LOOM_OFFLOAD_GPU_DEVICE_PREFETCH_STREAM_H_
#define LOOM_OFFLOAD_GPU_DEVICE_PREFETCH_STREAM_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "offload/gpu/device_stager.h"

namespace loom {

struct DeviceTensor {
  std::string name;
  // Host bytes copied to the device: pinned (unless the stager allows pageable memory)
  // and unchanged until the upload is done. Not empty.
  absl::Span<const std::byte> upload;
  // Empty, or host bytes that receive the first download.size() bytes of the tensor's
  // device slot once the compute on it is done (at most upload.size() bytes; it may
  // be the upload's own memory).
  absl::Span<std::byte> download;
};

struct DeviceItem {
  size_t index = 0;
  const std::string* name = nullptr;
  // The tensor's bytes in device memory, valid for work enqueued on the compute stream
  // before the next Next().
  absl::Span<std::byte> data;
};

struct DevicePrefetchOptions {
  // Tensors uploaded ahead of the one in use, in [1, 64]. 1 is double buffering,
  // enough whenever one tensor's compute is longer than its copy.
  int depth = 1;
};

class DevicePrefetchStream {
 public:
  static constexpr int kMaxDepth = 64;

  // Validate returns InvalidArgument naming the first problem: depth outside
  // [1, kMaxDepth], no tensors, an empty upload, or a download larger than its upload.
  static absl::Status Validate(const std::vector<DeviceTensor>& tensors,
                               const DevicePrefetchOptions& options);

  // Create validates, allocates depth + 1 device slots (ResourceExhausted naming the
  // depth and slot size when the device is short) and enqueues the first depth + 1
  // uploads. The stager's own errors (memory that is not pinned, ...) name the tensor.
  // `stager` must outlive the stream.
  static absl::StatusOr<std::unique_ptr<DevicePrefetchStream>> Create(
      DeviceStager& stager, std::vector<DeviceTensor> tensors,
      const DevicePrefetchOptions& options);

  // The destructor does not wait for the copies; Finish first, or keep the slots'
  // memory alive otherwise (a copy into a freed slot is a device fault).
  ~DevicePrefetchStream() = default;
  DevicePrefetchStream(const DevicePrefetchStream&) = delete;
  DevicePrefetchStream& operator=(const DevicePrefetchStream&) = delete;

  // Next returns the next tensor (see above), std::nullopt after the last (that call
  // enqueues the last tensor's download). `compute` must be a stream of the stager's
  // device and the same on every call. Errors name the tensor; FailedPrecondition
  // once an earlier call failed, or for an empty stream or one of another device.
  absl::StatusOr<std::optional<DeviceItem>> Next(CudaStream& compute);

  // Finish waits on the host until every upload and download enqueued so far has
  // completed; DeadlineExceeded (naming the tensor still in flight) if `deadline`
  // passes first: the stream can be asked again.
  absl::Status Finish(absl::Time deadline);

  // Uploaded / Downloaded return whether tensor `index`'s upload / download has been
  // enqueued and has completed (false while not enqueued). OutOfRange for an index past
  // the end. For tests and tuning: they show what has overlapped what.
  absl::StatusOr<bool> Uploaded(size_t index) const;
  absl::StatusOr<bool> Downloaded(size_t index) const;

  size_t size() const { return tensors_.size(); }
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  DevicePrefetchStream(DeviceStager& stager, std::vector<DeviceTensor> tensors,
                       const DevicePrefetchOptions& options, size_t slot_bytes);
  absl::Span<std::byte> Slot(size_t index);
  absl::Status EnqueueUpload(size_t index, const CudaEvent* after);
  // Marks tensor `index` computed on `compute` and enqueues its download, if any.
  absl::Status Release(size_t index, CudaStream& compute);
  absl::StatusOr<std::optional<DeviceItem>> Advance(CudaStream& compute);

  DeviceStager& stager_;
  const std::vector<DeviceTensor> tensors_;
  const DevicePrefetchOptions options_;
  const size_t slot_bytes_;
  std::vector<DeviceBuffer> slots_;
  // Per tensor; empty (get() == nullptr) until enqueued.
  std::vector<CudaEvent> uploaded_;
  std::vector<CudaEvent> computed_;
  std::vector<CudaEvent> downloaded_;
  size_t next_ = 0;                 // The tensor the next Next() returns.
  bool handed_out_ = false;         // Whether next_ - 1 is in the caller's hands.
  cudaStream_t compute_ = nullptr;  // The stream of the first Next(); later ones must match.
  absl::Status broken_;
};

}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_DEVICE_PREFETCH_STREAM_H_
