#include "core/gpu/cuda_stream.h"

#include <sched.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace {

absl::Status UseDevice(int device) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " is outside [0, ", devices, ")"));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CudaStream> CudaStream::Create(int device) {
  LOOM_RETURN_IF_ERROR(UseDevice(device));
  cudaStream_t stream = nullptr;
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(stream, device);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaStream::CopyAsync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  return absl::OkStatus();
}

absl::Status CudaStream::WaitFor(const CudaEvent& event) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, event.get(), 0));
  return absl::OkStatus();
}

absl::Status CudaStream::Synchronize(absl::Time deadline) {
  const absl::Time start = absl::Now();
  while (true) {
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaSuccess) return absl::OkStatus();
    if (state != cudaErrorNotReady) return CudaStatus(state, "cudaStreamQuery(stream)");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("CUDA stream on device ", device_, " still busy after ",
                       absl::FormatDuration(absl::Now() - start)));
    }
    sched_yield();
  }
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, bool timing) {
  LOOM_RETURN_IF_ERROR(UseDevice(device));
  cudaEvent_t event = nullptr;
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
  return CudaEvent(event, device);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

absl::Status CudaEvent::Record(const CudaStream& stream) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream.get()));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaEvent::Done() const {
  const cudaError_t state = cudaEventQuery(event_);
  if (state == cudaSuccess) return true;
  if (state == cudaErrorNotReady) return false;
  return CudaStatus(state, "cudaEventQuery(event)");
}

absl::Status CudaEvent::Wait(absl::Time deadline) const {
  const absl::Time start = absl::Now();
  while (true) {
    LOOM_ASSIGN_OR_RETURN(const bool done, Done());
    if (done) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("CUDA event on device ", device_, " not reached after ",
                       absl::FormatDuration(absl::Now() - start)));
    }
    sched_yield();
  }
}

absl::StatusOr<double> CudaEvent::ElapsedSeconds(const CudaEvent& start, const CudaEvent& end) {
  float ms = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), end.get()));
  return static_cast<double>(ms) / 1e3;
}

}  // namespace loom
