// DeviceStager: asynchronous copies between pinned host memory (a HostMemoryPool under
// --config=cuda) and CUDA device memory, on copy streams of its own, each copy handing
// back a CudaEvent that a compute stream waits on (CudaStream::WaitFor) on the device.
// A kernel that needs tensor A then waits for A's copy only, not for B's copy enqueued
// after it, and the host blocks nowhere but where it asks to (with a deadline).
//
// Two copy streams, one per direction: a GPU has a copy engine for each, so the
// write-back of layer i-1 runs alongside the prefetch of layer i+1 instead of queueing
// behind it. Host memory must be pinned (by default): cudaMemcpyAsync from pageable
// memory goes through a driver bounce buffer and returns only when the copy is done,
// which would quietly serialize copy and compute.
//
// Thread-safe: Upload and Download only enqueue on the streams (CUDA serializes).
//
// DevicePrefetchStream (device_prefetch_stream.h) builds the layer-by-layer prefetch
// on it, the GPU counterpart of offload/prefetch_stream.h.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceStager> stager,
//                         DeviceStager::Create({.device = 0}));
//   LOOM_ASSIGN_OR_RETURN(CudaEvent landed, stager->Upload(block.bytes(), slot));
//   LOOM_RETURN_IF_ERROR(compute.WaitFor(landed));  // kernels on `compute` now see slot
//   ...  // kernels on compute.get() that update slot
//   LOOM_ASSIGN_OR_RETURN(CudaEvent computed, CudaEvent::Create(0));
//   LOOM_RETURN_IF_ERROR(computed.Record(compute));
//   LOOM_ASSIGN_OR_RETURN(CudaEvent back, stager->Download(slot, block.bytes(), &computed));
//   LOOM_RETURN_IF_ERROR(back.Wait(absl::Now() + absl::Seconds(10)));  // block has it
//   stager->Upload(absl::MakeConstSpan(std::vector<std::byte>(64)), slot.first(64));
//   // InvalidArgument: "DeviceStager::Upload: host (0x...) is pageable host memory, not
//   //                   pinned host memory (...)"
#ifndef LOOM_OFFLOAD_GPU_DEVICE_STAGER_H_
#define LOOM_OFFLOAD_GPU_DEVICE_STAGER_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_stream.h"

namespace loom {

struct DeviceStagerOptions {
  // The CUDA device the copies go to and come from; >= 0 and present.
  int device = 0;
  // Refuse pageable host memory (see above). false lets the transfer benchmark compare
  // pinned against pageable memory through the same code.
  bool require_pinned = true;
};

class DeviceStager {
 public:
  // Create makes the two copy streams. InvalidArgument for a negative device or one
  // this machine does not have; FailedPrecondition where there is no CUDA device.
  static absl::StatusOr<std::unique_ptr<DeviceStager>> Create(const DeviceStagerOptions& options);

  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;
  // The destructor does not wait: the caller synchronizes (Synchronize) before it
  // frees memory a copy may still use.
  ~DeviceStager() = default;

  // Upload enqueues a copy of `host` into `device` (the same size) on the upload
  // stream, after `after` (if not null: an event recorded on another stream, such as
  // the compute that last read `device`), and returns an event that completes with the
  // copy. `host` must stay valid and unchanged until then.
  //
  // Returns, enqueueing nothing: InvalidArgument when the sizes differ, `host` is not
  // host memory (pinned, when options.require_pinned) or `device` is not memory of the
  // stager's device, each naming the span; the CUDA error otherwise.
  absl::StatusOr<CudaEvent> Upload(absl::Span<const std::byte> host, absl::Span<std::byte> device,
                                   const CudaEvent* after = nullptr);

  // Download is Upload's mirror on the download stream: `device` into `host`, after
  // `after` (typically the compute that produced `device`). Same errors.
  absl::StatusOr<CudaEvent> Download(absl::Span<const std::byte> device, absl::Span<std::byte> host,
                                     const CudaEvent* after = nullptr);

  // Synchronize waits until every copy enqueued so far has finished; DeadlineExceeded
  // (naming the stream still busy) if `deadline` passes first, the copies staying
  // enqueued; the CUDA error of a failed copy.
  absl::Status Synchronize(absl::Time deadline);

  int device() const { return options_.device; }
  const DeviceStagerOptions& options() const { return options_; }
  const CudaStream& upload_stream() const { return upload_; }
  const CudaStream& download_stream() const { return download_; }

 private:
  DeviceStager(const DeviceStagerOptions& options, CudaStream upload, CudaStream download);

  absl::StatusOr<CudaEvent> Copy(bool to_device, const void* src, void* dst, size_t bytes,
                                 const CudaEvent* after);

  const DeviceStagerOptions options_;
  CudaStream upload_;
  CudaStream download_;
};

}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_DEVICE_STAGER_H_
