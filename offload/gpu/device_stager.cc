#include "offload/gpu/device_stager.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"
#include "offload/gpu/internal/pointer_checks.h"

namespace loom {

absl::StatusOr<std::unique_ptr<DeviceStager>> DeviceStager::Create(
    const DeviceStagerOptions& options) {
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceStager: device is ", options.device, "; it must be >= 0"));
  }
  // CudaStream::Create names a missing device or one past the count.
  LOOM_ASSIGN_OR_RETURN(CudaStream upload, CudaStream::Create(options.device));
  LOOM_ASSIGN_OR_RETURN(CudaStream download, CudaStream::Create(options.device));
  return std::unique_ptr<DeviceStager>(
      new DeviceStager(options, std::move(upload), std::move(download)));
}

DeviceStager::DeviceStager(const DeviceStagerOptions& options, CudaStream upload,
                           CudaStream download)
    : options_(options), upload_(std::move(upload)), download_(std::move(download)) {}

absl::StatusOr<CudaEvent> DeviceStager::Upload(absl::Span<const std::byte> host,
                                               absl::Span<std::byte> device,
                                               const CudaEvent* after) {
  constexpr absl::string_view kWho = "DeviceStager::Upload";
  if (host.size() != device.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": host has ", host.size(), " bytes but device has ", device.size()));
  }
  if (options_.require_pinned) {
    LOOM_RETURN_IF_ERROR(
        gpu_internal::CheckPinnedHostMemory(kWho, "host", host.data(), host.size()));
  } else {
    LOOM_RETURN_IF_ERROR(gpu_internal::CheckHostMemory(kWho, "host", host.data(), host.size()));
  }
  LOOM_RETURN_IF_ERROR(gpu_internal::CheckDeviceMemory(kWho, "device", device.data(), device.size(),
                                                       options_.device));
  return Copy(/*to_device=*/true, host.data(), device.data(), host.size(), after);
}

absl::StatusOr<CudaEvent> DeviceStager::Download(absl::Span<const std::byte> device,
                                                 absl::Span<std::byte> host,
                                                 const CudaEvent* after) {
  constexpr absl::string_view kWho = "DeviceStager::Download";
  if (host.size() != device.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": device has ", device.size(), " bytes but host has ", host.size()));
  }
  LOOM_RETURN_IF_ERROR(gpu_internal::CheckDeviceMemory(kWho, "device", device.data(), device.size(),
                                                       options_.device));
  if (options_.require_pinned) {
    LOOM_RETURN_IF_ERROR(
        gpu_internal::CheckPinnedHostMemory(kWho, "host", host.data(), host.size()));
  } else {
    LOOM_RETURN_IF_ERROR(gpu_internal::CheckHostMemory(kWho, "host", host.data(), host.size()));
  }
  return Copy(/*to_device=*/false, device.data(), host.data(), host.size(), after);
}

absl::StatusOr<CudaEvent> DeviceStager::Copy(bool to_device, const void* src, void* dst,
                                             size_t bytes, const CudaEvent* after) {
  CudaStream& stream = to_device ? upload_ : download_;
  // The event first: if it cannot be made, nothing has been enqueued.
  LOOM_ASSIGN_OR_RETURN(CudaEvent done, CudaEvent::Create(options_.device));
  if (after != nullptr) LOOM_RETURN_IF_ERROR(stream.WaitFor(*after));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream.get()));
  LOOM_RETURN_IF_ERROR(done.Record(stream));
  return done;
}

absl::Status DeviceStager::Synchronize(absl::Time deadline) {
  absl::Status upload = upload_.Synchronize(deadline);
  if (!upload.ok()) {
    return absl::Status(upload.code(),
                        absl::StrCat("DeviceStager upload stream: ", upload.message()));
  }
  absl::Status download = download_.Synchronize(deadline);
  if (!download.ok()) {
    return absl::Status(download.code(),
                        absl::StrCat("DeviceStager download stream: ", download.message()));
  }
  return absl::OkStatus();
}

}  // namespace loom
