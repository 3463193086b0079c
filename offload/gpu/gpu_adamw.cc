#include "offload/gpu/gpu_adamw.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"
#include "offload/gpu/gpu_adamw_kernels.h"
#include "offload/gpu/internal/pointer_checks.h"

namespace loom {
namespace {

namespace gi = gpu_adamw_internal;

constexpr absl::string_view kWho = "GpuAdamWStep";

struct Range {
  absl::string_view name;
  const void* data;
  size_t size;  // elements
  size_t bytes;
};

absl::string_view HalfName(HalfCopy::Kind kind) {
  return kind == HalfCopy::Kind::kBF16 ? "bf16 half copy" : "f16 half copy";
}

std::vector<Range> Ranges(const GpuAdamWTensors& t, const HalfCopy& half) {
  std::vector<Range> ranges = {
      {"params", t.params.data(), t.params.size(), t.params.size() * sizeof(float)},
      {"grads", t.grads.data(), t.grads.size(), t.grads.size() * sizeof(float)},
      {"exp_avg", t.exp_avg.data(), t.exp_avg.size(), t.exp_avg.size() * sizeof(float)},
      {"exp_avg_sq", t.exp_avg_sq.data(), t.exp_avg_sq.size(), t.exp_avg_sq.size() * sizeof(float)},
  };
  if (half.kind() != HalfCopy::Kind::kNone) {
    ranges.push_back({HalfName(half.kind()), half.bits(), half.size(), half.size() * 2});
  }
  return ranges;
}

absl::Status CheckShapes(const std::vector<Range>& ranges) {
  for (const Range& r : ranges) {
    if (r.size != ranges[0].size) {
      return absl::InvalidArgumentError(absl::StrCat(kWho, ": params has ", ranges[0].size,
                                                     " elements but ", r.name, " has ", r.size));
    }
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (size_t j = i + 1; j < ranges.size(); ++j) {
      if (gpu_internal::Overlap(ranges[i].data, ranges[i].bytes, ranges[j].data, ranges[j].bytes)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kWho, ": ", ranges[i].name, " and ", ranges[j].name, " overlap"));
      }
    }
  }
  return absl::OkStatus();
}

gi::HalfKind KernelHalfKind(HalfCopy::Kind kind) {
  switch (kind) {
    case HalfCopy::Kind::kNone: return gi::HalfKind::kNone;
    case HalfCopy::Kind::kBF16: return gi::HalfKind::kBF16;
    case HalfCopy::Kind::kF16: return gi::HalfKind::kF16;
  }
  return gi::HalfKind::kNone;
}

}  // namespace

absl::Status GpuAdamWStep(const AdamWHyper& hyper, const GpuAdamWTensors& tensors,
                          const CudaStream& stream, HalfCopy half_copy) {
  LOOM_RETURN_IF_ERROR(ValidateAdamWHyper(hyper));
  const std::vector<Range> ranges = Ranges(tensors, half_copy);
  LOOM_RETURN_IF_ERROR(CheckShapes(ranges));
  if (stream.get() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWho, ": the stream is empty (default-constructed or moved from)"));
  }
  for (const Range& r : ranges) {
    LOOM_RETURN_IF_ERROR(
        gpu_internal::CheckDeviceMemory(kWho, r.name, r.data, r.bytes, stream.device()));
  }
  if (tensors.params.empty()) return absl::OkStatus();
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(stream.device()));
  const gi::StepArgs args = {
      tensors.params.data(),
      tensors.grads.data(),
      tensors.exp_avg.data(),
      tensors.exp_avg_sq.data(),
      half_copy.bits(),
      static_cast<int64_t>(tensors.params.size()),
      KernelHalfKind(half_copy.kind()),
  };
  LOOM_CUDA_RETURN_IF_ERROR(
      gi::LaunchAdamWStep(adamw_internal::DeriveStepConstants(hyper), args, stream.get()));
  return absl::OkStatus();
}

}  // namespace loom
