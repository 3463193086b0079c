// DeviceAdamW: an AdamW step on a CUDA device for a rank whose weights stay on the
// host (`train --offload=gpu`, zero 0, f32: zero3/data_parallel.h's
// make_replicated_step): the moments live on the device, and each step uploads the rank's parameters and averaged gradient
// (8 B per parameter), runs offload/gpu's GpuAdamWStep over all of them in one kernel
// and downloads the new parameters (4 B). GpuAdamWStep gives the CPU step's bits
// element by element, so the run is bitwise the run with --offload=cpu or none.
// Built both ways: without --config=cuda, MakeDeviceAdamW is Unimplemented.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceAdamW> adam, MakeDeviceAdamW(0, total));
//   LOOM_RETURN_IF_ERROR(adam->Step(hyper, param_spans, flat_grad));  // params updated
#ifndef LOOM_OFFLOAD_DEVICE_ADAMW_H_
#define LOOM_OFFLOAD_DEVICE_ADAMW_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {

class DeviceAdamW {
 public:
  virtual ~DeviceAdamW() = default;
  // Step applies one AdamW step to `params` (host spans, in order, `count` elements in
  // all) with `grads` (host, flat, the same order and count). InvalidArgument when the
  // counts differ; the CUDA error, or DeadlineExceeded after a minute, otherwise.
  virtual absl::Status Step(const AdamWHyper& hyper, absl::Span<const absl::Span<float>> params,
                            absl::Span<const float> grads) = 0;
  // Bytes held on the device: params, gradients and both moments, 16 per element.
  virtual int64_t DeviceBytes() const = 0;
};

// MakeDeviceAdamW allocates the device state for `count` parameters (moments zero, as
// AdamWState::Create's) on CUDA device `device`.
absl::StatusOr<std::unique_ptr<DeviceAdamW>> MakeDeviceAdamW(int device, int64_t count);

}  // namespace loom

#endif  // LOOM_OFFLOAD_DEVICE_ADAMW_H_
