// CudaStream and CudaEvent: owned CUDA streams and events whose every call returns a
// Status naming the CUDA call (cuda_status.h), and whose waits have deadlines: a
// stream that never drains (a hung kernel, a peer that never sends) is
// DeadlineExceeded, not a process stuck in cudaStreamSynchronize.
//
// Example (copy in on one stream, compute on another, ordered by an event):
//   LOOM_ASSIGN_OR_RETURN(CudaStream copies, CudaStream::Create(/*device=*/0));
//   LOOM_ASSIGN_OR_RETURN(CudaStream compute, CudaStream::Create(0));
//   LOOM_RETURN_IF_ERROR(copies.CopyAsync(dev.data(), pinned.data(), bytes));
//   LOOM_ASSIGN_OR_RETURN(CudaEvent landed, CudaEvent::Create(0));
//   LOOM_RETURN_IF_ERROR(landed.Record(copies));
//   LOOM_RETURN_IF_ERROR(compute.WaitFor(landed));    // compute waits on the device
//   ...  // kernels on compute.get()
//   LOOM_RETURN_IF_ERROR(compute.Synchronize(absl::Now() + absl::Seconds(10)));
#ifndef LOOM_CORE_GPU_CUDA_STREAM_H_
#define LOOM_CORE_GPU_CUDA_STREAM_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {

class CudaEvent;

class CudaStream {
 public:
  // Create makes a non-blocking stream (no implicit ordering with the legacy default
  // stream) on `device`. InvalidArgument for a device outside [0, count);
  // FailedPrecondition without a CUDA device.
  static absl::StatusOr<CudaStream> Create(int device);

  CudaStream() = default;
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream();

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }

  // CopyAsync enqueues a copy of `bytes` (any direction: CUDA infers it from the
  // pointers). Asynchronous with respect to the host only for pinned host memory.
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes);
  // WaitFor makes later work on this stream wait until `event` has completed (on the
  // device; the host does not block).
  absl::Status WaitFor(const CudaEvent& event);
  // Synchronize waits until every enqueued piece of work has finished or `deadline`
  // passes (DeadlineExceeded; the work stays enqueued). Polls, yielding the CPU.
  absl::Status Synchronize(absl::Time deadline);

 private:
  CudaStream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class CudaEvent {
 public:
  // Create makes an event on `device`; `timing` enables ElapsedSeconds.
  static absl::StatusOr<CudaEvent> Create(int device, bool timing = false);

  CudaEvent() = default;
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent();

  cudaEvent_t get() const { return event_; }

  // Record captures the work enqueued on `stream` so far.
  absl::Status Record(const CudaStream& stream);
  // Done reports whether the recorded work has completed (cudaEventQuery).
  absl::StatusOr<bool> Done() const;
  // Wait blocks the host until the recorded work has completed or `deadline` passes
  // (DeadlineExceeded naming how long it waited).
  absl::Status Wait(absl::Time deadline) const;
  // ElapsedSeconds returns the device time between two completed timing events.
  static absl::StatusOr<double> ElapsedSeconds(const CudaEvent& start, const CudaEvent& end);

 private:
  CudaEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  cudaEvent_t event_ = nullptr;
  int device_ = 0;
};

}  // namespace loom

#endif  // LOOM_CORE_GPU_CUDA_STREAM_H_
