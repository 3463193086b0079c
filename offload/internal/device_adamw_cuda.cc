// DeviceAdamW with CUDA (--config=cuda): offload/gpu's GpuAdamWStep over the
// rank's parameters, the state on the device.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/checked_size.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "offload/device_adamw.h"
#include "offload/gpu/gpu_adamw.h"

namespace loom {

namespace {

// [params | grads | m | v], f32, `count` each.
class CudaAdamW : public DeviceAdamW {
 public:
  CudaAdamW(CudaStream stream, DeviceBuffer state, int64_t count)
      : stream_(std::move(stream)), state_(std::move(state)), count_(count) {}

  absl::Status Step(const AdamWHyper& hyper, absl::Span<const absl::Span<float>> params,
                    absl::Span<const float> grads) override {
    int64_t total = 0;
    for (const absl::Span<float>& p : params) total += static_cast<int64_t>(p.size());
    if (total != count_ || static_cast<int64_t>(grads.size()) != count_) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceAdamW: made for ", count_,
                                                     " parameters, given ", total,
                                                     " parameters and ", grads.size(),
                                                     " gradients"));
    }
    const size_t n = static_cast<size_t>(count_);
    float* const base = reinterpret_cast<float*>(state_.data());
    const cudaStream_t s = stream_.get();
    const absl::Status enqueued = [&]() -> absl::Status {
      size_t at = 0;
      for (const absl::Span<float>& p : params) {
        LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + at, p.data(), p.size() * sizeof(float),
                                                  cudaMemcpyHostToDevice, s));
        at += p.size();
      }
      LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base + n, grads.data(), n * sizeof(float),
                                                cudaMemcpyHostToDevice, s));
      LOOM_RETURN_IF_ERROR(GpuAdamWStep(
          hyper,
          {absl::MakeSpan(base, n), absl::MakeConstSpan(base + n, n),
           absl::MakeSpan(base + 2 * n, n), absl::MakeSpan(base + 3 * n, n)},
          stream_));
      at = 0;
      for (const absl::Span<float>& p : params) {
        LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.data(), base + at, p.size() * sizeof(float),
                                                  cudaMemcpyDeviceToHost, s));
        at += p.size();
      }
      return absl::OkStatus();
    }();
    // Wait even after a failed enqueue: the copies touch the caller's memory.
    const absl::Status done = stream_.Synchronize(absl::Now() + absl::Seconds(60));
    LOOM_RETURN_IF_ERROR(enqueued);
    return done;
  }

  int64_t DeviceBytes() const override { return static_cast<int64_t>(state_.size()); }

 private:
  CudaStream stream_;
  DeviceBuffer state_;
  int64_t count_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceAdamW>> MakeDeviceAdamW(int device, int64_t count) {
  if (count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceAdamW: count ", count, " must be >= 1"));
  }
  LOOM_ASSIGN_OR_RETURN(
      const int64_t checked,
      CheckedMul({{"DeviceAdamW parameters", count}, {"bytes per parameter", 16}}));
  const size_t bytes = static_cast<size_t>(checked);
  LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer state,
                        DeviceBuffer::Allocate(MemorySpace::kDevice, bytes, device));
  // The moments start at zero, as AdamWState::Create's do.
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemset(state.data(), 0, bytes));
  return std::unique_ptr<DeviceAdamW>(new CudaAdamW(std::move(stream), std::move(state), count));
}

}  // namespace loom
