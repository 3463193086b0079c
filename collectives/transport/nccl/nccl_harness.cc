#include "collectives/transport/nccl/nccl_harness.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/nccl/nccl_transport.h"
#include "collectives/transport/transport.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// StagingTransport: the nccl endpoint `inner` (device memory of `device`) seen with
// host buffers; see the header.
class StagingTransport final : public Transport {
 public:
  StagingTransport(std::unique_ptr<Transport> inner, int device)
      : device_(device), inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override {
    LOOM_ASSIGN_OR_RETURN(DeviceBuffer staged,
                          DeviceBuffer::Allocate(MemorySpace::kDevice, data.size(), device_));
    LOOM_RETURN_IF_ERROR(staged.CopyFromHost(data));
    LOOM_ASSIGN_OR_RETURN(Request request,
                          inner_->PostSend(peer, tag, {staged.data(), staged.size()}, stamp));
    staged_.emplace(request.id, Staged{std::move(staged), {}});
    return request;
  }

  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override {
    LOOM_ASSIGN_OR_RETURN(DeviceBuffer staged,
                          DeviceBuffer::Allocate(MemorySpace::kDevice, data.size(), device_));
    LOOM_ASSIGN_OR_RETURN(
        Request request,
        inner_->PostRecv(peer, tag, {staged.data(), staged.size()}, combiner, stamp));
    staged_.emplace(request.id, Staged{std::move(staged), data});
    return request;
  }

  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    absl::Status status = inner_->Wait(requests, deadline);
    const bool delivered = status.ok();
    for (const Request& request : requests) {
      auto it = staged_.find(request.id);
      if (it == staged_.end()) continue;
      Staged staged = std::move(it->second);
      staged_.erase(it);
      if (!delivered) {
        // A peer's kernel may still write a failed receive's buffer until that peer
        // aborts too (nccl_transport.h, "Failure"): kept until the transport goes.
        retired_.push_back(std::move(staged.device));
      } else if (!staged.host.empty() && status.ok()) {
        status = staged.device.CopyToHost(staged.host);
      }
    }
    return status;
  }

  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }

  NativeCollectives* native() override { return inner_->native(); }

 private:
  // Staged: a posted request's device buffer and, for a receive, the caller's span.
  struct Staged {
    DeviceBuffer device;
    absl::Span<std::byte> host;
  };

  const int device_;
  std::vector<DeviceBuffer> retired_;  // Destroyed after inner_, declared before it.
  absl::flat_hash_map<uint64_t, Staged> staged_;
  std::unique_ptr<Transport> inner_;
};

class NcclHarness final : public TransportHarness {
 public:
  std::string name() const override { return "nccl (one device per rank, host buffers staged)"; }
  // NcclTransport::PostRecv refuses combiners: they are host functions and its
  // buffers device memory.
  bool combines() const override { return false; }

  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(world);
    if (!group.ok()) return std::vector<absl::Status>(world, group.status());
    std::vector<absl::Status> results(world);
    std::vector<std::unique_ptr<Transport>> bootstraps(world);
    std::vector<std::unique_ptr<Transport>> endpoints(world);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        absl::StatusOr<std::unique_ptr<Transport>> bootstrap = (*group)->Endpoint(rank);
        if (!bootstrap.ok()) {
          results[rank] = bootstrap.status();
          return;
        }
        bootstraps[rank] = *std::move(bootstrap);
        absl::StatusOr<std::unique_ptr<Transport>> nccl =
            ConnectNcclTransport(*bootstraps[rank], /*device=*/rank);
        if (!nccl.ok()) {
          results[rank] = nccl.status();
          return;
        }
        endpoints[rank] = std::make_unique<StagingTransport>(*std::move(nccl), rank);
        results[rank] = body(*endpoints[rank]);
      });
    }
    for (std::thread& thread : threads) thread.join();
    // Every rank is done before any closes: closing finalizes the communicator, which
    // waits for the peers' side.
    threads.clear();
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] { endpoints[rank].reset(); });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }
};

}  // namespace

std::unique_ptr<TransportHarness> MakeNcclHarness() { return std::make_unique<NcclHarness>(); }

std::vector<int> NcclWorldsWithDevices(const std::vector<int>& worlds) {
  const absl::StatusOr<int> devices = CudaDeviceCountOrZero();
  std::vector<int> held;
  for (const int world : worlds) {
    if (devices.ok() && world <= *devices) held.push_back(world);
  }
  return held;
}

}  // namespace loom
