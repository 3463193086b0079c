#include "offload/gpu/device_prefetch_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr absl::string_view kWho = "DevicePrefetchStream";

absl::Status Prefixed(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

std::string Named(const std::vector<DeviceTensor>& tensors, size_t index) {
  return absl::StrCat("'", tensors[index].name, "' (tensor ", index, ")");
}

}  // namespace

absl::Status DevicePrefetchStream::Validate(const std::vector<DeviceTensor>& tensors,
                                            const DevicePrefetchOptions& options) {
  if (options.depth < 1 || options.depth > kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": depth is ", options.depth, "; it must be in [1, ", kMaxDepth, "]"));
  }
  if (tensors.empty()) return absl::InvalidArgumentError(absl::StrCat(kWho, ": no tensors"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].upload.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWho, ": tensor ", Named(tensors, i), " has no bytes to upload"));
    }
    if (tensors[i].download.size() > tensors[i].upload.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kWho, ": tensor ", Named(tensors, i), " downloads ", tensors[i].download.size(),
          " bytes but uploads only ", tensors[i].upload.size()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DevicePrefetchStream>> DevicePrefetchStream::Create(
    DeviceStager& stager, std::vector<DeviceTensor> tensors, const DevicePrefetchOptions& options) {
  LOOM_RETURN_IF_ERROR(Validate(tensors, options));
  size_t slot_bytes = 0;
  for (const DeviceTensor& t : tensors) slot_bytes = std::max(slot_bytes, t.upload.size());
  const size_t slots = std::min(tensors.size(), static_cast<size_t>(options.depth) + 1);
  std::unique_ptr<DevicePrefetchStream> stream(
      new DevicePrefetchStream(stager, std::move(tensors), options, slot_bytes));
  for (size_t s = 0; s < slots; ++s) {
    absl::StatusOr<DeviceBuffer> slot =
        DeviceBuffer::Allocate(MemorySpace::kDevice, slot_bytes, stager.device());
    if (!slot.ok()) {
      return Prefixed(
          slot.status(),
          absl::StrCat(kWho, ": allocating slot ", s + 1, " of ", slots, " (depth ", options.depth,
                       " + 1) of ", slot_bytes, " bytes on device ", stager.device(), ": "));
    }
    stream->slots_.push_back(*std::move(slot));
  }
  for (size_t i = 0; i < slots; ++i) LOOM_RETURN_IF_ERROR(stream->EnqueueUpload(i, nullptr));
  return stream;
}

DevicePrefetchStream::DevicePrefetchStream(DeviceStager& stager, std::vector<DeviceTensor> tensors,
                                           const DevicePrefetchOptions& options, size_t slot_bytes)
    : stager_(stager),
      tensors_(std::move(tensors)),
      options_(options),
      slot_bytes_(slot_bytes),
      uploaded_(tensors_.size()),
      computed_(tensors_.size()),
      downloaded_(tensors_.size()) {}

absl::Span<std::byte> DevicePrefetchStream::Slot(size_t index) {
  DeviceBuffer& slot = slots_[index % slots_.size()];
  return absl::MakeSpan(slot.data(), slot.size());
}

absl::Status DevicePrefetchStream::EnqueueUpload(size_t index, const CudaEvent* after) {
  const absl::Span<const std::byte> host = tensors_[index].upload;
  absl::StatusOr<CudaEvent> done = stager_.Upload(host, Slot(index).first(host.size()), after);
  if (!done.ok()) {
    return Prefixed(done.status(),
                    absl::StrCat(kWho, ": upload of ", Named(tensors_, index), ": "));
  }
  uploaded_[index] = *std::move(done);
  return absl::OkStatus();
}

absl::Status DevicePrefetchStream::Release(size_t index, CudaStream& compute) {
  const std::string marking =
      absl::StrCat(kWho, ": marking ", Named(tensors_, index), " computed: ");
  absl::StatusOr<CudaEvent> computed = CudaEvent::Create(stager_.device());
  if (!computed.ok()) return Prefixed(computed.status(), marking);
  const absl::Status recorded = computed->Record(compute);
  if (!recorded.ok()) return Prefixed(recorded, marking);
  computed_[index] = *std::move(computed);
  const absl::Span<std::byte> host = tensors_[index].download;
  if (host.empty()) return absl::OkStatus();
  absl::StatusOr<CudaEvent> done =
      stager_.Download(Slot(index).first(host.size()), host, &computed_[index]);
  if (!done.ok()) {
    return Prefixed(done.status(),
                    absl::StrCat(kWho, ": download of ", Named(tensors_, index), ": "));
  }
  downloaded_[index] = *std::move(done);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<DeviceItem>> DevicePrefetchStream::Next(CudaStream& compute) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWho, ": an earlier call failed: ", broken_.message()));
  }
  if (compute.get() == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWho, ": the compute stream is empty (default-constructed or moved from)"));
  }
  if (compute.device() != stager_.device()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWho, ": the compute stream is on device ", compute.device(),
                     " but the stager copies to device ", stager_.device()));
  }
  if (compute_ != nullptr && compute.get() != compute_) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWho,
                     ": Next was given another compute stream than before; the work on "
                     "the previous tensor is on the first one"));
  }
  compute_ = compute.get();
  absl::StatusOr<std::optional<DeviceItem>> item = Advance(compute);
  if (!item.ok()) broken_ = item.status();
  return item;
}

absl::StatusOr<std::optional<DeviceItem>> DevicePrefetchStream::Advance(CudaStream& compute) {
  if (handed_out_) {
    const size_t previous = next_ - 1;
    LOOM_RETURN_IF_ERROR(Release(previous, compute));
    handed_out_ = false;
    // previous's slot is the one tensor previous + depth + 1 lands in; free once the
    // download (after the compute) or, with none, the compute is done.
    const size_t refill = previous + slots_.size();
    if (refill < tensors_.size()) {
      const CudaEvent& free =
          downloaded_[previous].get() != nullptr ? downloaded_[previous] : computed_[previous];
      LOOM_RETURN_IF_ERROR(EnqueueUpload(refill, &free));
    }
  }
  if (next_ == tensors_.size()) return std::nullopt;
  const size_t k = next_;
  const absl::Status waited = compute.WaitFor(uploaded_[k]);
  if (!waited.ok()) {
    return Prefixed(waited,
                    absl::StrCat(kWho, ": making compute wait for ", Named(tensors_, k), ": "));
  }
  ++next_;
  handed_out_ = true;
  return DeviceItem{k, &tensors_[k].name, Slot(k).first(tensors_[k].upload.size())};
}

absl::Status DevicePrefetchStream::Finish(absl::Time deadline) {
  const auto wait = [&](const CudaEvent& event, absl::string_view what, size_t i) {
    if (event.get() == nullptr) return absl::OkStatus();
    const absl::Status done = event.Wait(deadline);
    if (done.ok()) return done;
    return Prefixed(done, absl::StrCat(kWho, ": ", what, " of ", Named(tensors_, i), ": "));
  };
  for (size_t i = 0; i < tensors_.size(); ++i) {
    LOOM_RETURN_IF_ERROR(wait(uploaded_[i], "upload", i));
    LOOM_RETURN_IF_ERROR(wait(downloaded_[i], "download", i));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DevicePrefetchStream::Uploaded(size_t index) const {
  if (index >= tensors_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(kWho, ": tensor ", index, " of ", tensors_.size(), " does not exist"));
  }
  if (uploaded_[index].get() == nullptr) return false;
  return uploaded_[index].Done();
}

absl::StatusOr<bool> DevicePrefetchStream::Downloaded(size_t index) const {
  if (index >= tensors_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat(kWho, ": tensor ", index, " of ", tensors_.size(), " does not exist"));
  }
  if (downloaded_[index].get() == nullptr) return false;
  return downloaded_[index].Done();
}

}  // namespace loom
