// GpuAdamWStep: the fused AdamW step of offload/adamw/cpu_adamw.h on CUDA device
// memory, enqueued on a stream. Same hyperparameters (AdamWHyper), same validation,
// same update formula and order of operations, and the same bits: f32 params,
// gradients and moments (exp_avg = m, exp_avg_sq = v), and optionally a bf16 or f16
// copy of the new params written in the same pass (HalfCopy, pointing at device
// memory). The moments are f32 here; the CPU step's bf16 and 8-bit state formats stay
// on the CPU, where the memory they save matters.
//
// Used where the optimizer state is streamed to the device (device_prefetch_stream.h)
// instead of stepped on the host, or kept there outright.
//
// Example:
//   GpuAdamWTensors t{params, grads, exp_avg, exp_avg_sq};  // absl::Span over device memory
//   AdamWHyper hyper;                                        // lr 1e-3, wd 0.01, ...
//   hyper.step = 1;
//   LOOM_RETURN_IF_ERROR(GpuAdamWStep(hyper, t, compute));   // enqueued; returns at once
//   LOOM_RETURN_IF_ERROR(compute.Synchronize(absl::Now() + absl::Seconds(10)));
//   // params now hold exactly what AdamWStep(hyper, ...) on the CPU gives.
//   hyper.beta1 = 1.5f;
//   GpuAdamWStep(hyper, t, compute);
//   // InvalidArgument: "AdamWHyper: beta1 is 1.5; it must be in [0, 1)"
//   t.params = absl::MakeSpan(host_vector);
//   GpuAdamWStep(hyper, t, compute);
//   // InvalidArgument: "GpuAdamWStep: params (0x...) is pageable host memory, not memory
//   //                   of CUDA device 0"
#ifndef LOOM_OFFLOAD_GPU_GPU_ADAMW_H_
#define LOOM_OFFLOAD_GPU_GPU_ADAMW_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_stream.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {

// GpuAdamWTensors: device memory of one step, all the same length.
struct GpuAdamWTensors {
  absl::Span<float> params;
  absl::Span<const float> grads;
  absl::Span<float> exp_avg;     // m
  absl::Span<float> exp_avg_sq;  // v
};

// GpuAdamWStep enqueues one AdamW step on `stream` (see AdamWStep in cpu_adamw.h for
// the formula); it returns once the kernel is enqueued. half_copy, if any, must be
// device memory too.
//
// Returns, enqueueing nothing: InvalidArgument for bad hyperparameters
// (ValidateAdamWHyper), spans whose sizes differ, spans that overlap, or memory that is
// not on the stream's device (naming the span, its address and what it is);
// FailedPrecondition for an empty (default-constructed or moved-from) stream; the CUDA
// error (cuda_status.h) if the launch fails.
absl::Status GpuAdamWStep(const AdamWHyper& hyper, const GpuAdamWTensors& tensors,
                          const CudaStream& stream, HalfCopy half_copy = {});

}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_GPU_ADAMW_H_
