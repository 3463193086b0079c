#include "collectives/transport/nccl/nccl_transport.h"

#include <nccl.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/nccl/internal/endpoint.h"
#include "collectives/transport/nccl/internal/native.h"
#include "collectives/transport/nccl/internal/nccl_call.h"
#include "collectives/transport/nccl/internal/nccl_comm.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace {

using nccl_internal::NcclComm;
using nccl_internal::NcclCommOptions;
using nccl_internal::NcclEndpoint;
using nccl_internal::NcclNative;
using nccl_internal::NcclStatus;

absl::Status CheckOptions(const NcclTransportOptions& options) {
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("nccl: connect_timeout ",
                                                   absl::FormatDuration(options.connect_timeout),
                                                   " is not positive"));
  }
  if (options.native_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: native_timeout ", absl::FormatDuration(options.native_timeout),
                     " is not positive (InfiniteDuration() waits as long as it takes)"));
  }
  if (options.close_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nccl: close_timeout ", absl::FormatDuration(options.close_timeout), " is negative"));
  }
  if (options.spin_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl: spin_iterations ", options.spin_iterations, " is negative"));
  }
  return absl::OkStatus();
}

// CheckDevice: FailedPrecondition without a CUDA device, InvalidArgument for a
// device outside [0, count).
absl::Status CheckDevice(int device) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) {
    return absl::FailedPreconditionError(
        "ConnectNcclTransport: no CUDA device on this machine (NCCL moves device memory)");
  }
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectNcclTransport: CUDA device ", device,
                                                   " is outside [0, ", devices, ")"));
  }
  return absl::OkStatus();
}

// What rank 0 sends every other rank: whether it has an id, and the id.
using IdMessage = std::array<std::byte, 1 + sizeof(ncclUniqueId)>;

// ShareId gives every rank rank 0's unique id over the bootstrap. Rank 0 sends even
// when it has none (`id` not OK), so the others fail at once rather than at the
// deadline; it returns `id`'s error then.
absl::StatusOr<ncclUniqueId> ShareId(Transport& bootstrap, absl::StatusOr<ncclUniqueId> id, Tag tag,
                                     absl::Time deadline) {
  IdMessage message{};
  const std::string where =
      absl::StrCat("ConnectNcclTransport: rank ", bootstrap.rank(), " of ", bootstrap.size(), " (",
                   bootstrap.name(), " bootstrap, tag ", tag, "): ");
  if (bootstrap.rank() == 0) {
    if (id.ok()) {
      message[0] = std::byte{1};
      std::memcpy(message.data() + 1, &*id, sizeof(ncclUniqueId));
    }
    std::vector<Request> sends;
    for (int peer = 1; peer < bootstrap.size(); ++peer) {
      absl::StatusOr<Request> send = bootstrap.Send(peer, tag, message);
      if (!send.ok())
        return absl::Status(send.status().code(), where + std::string(send.status().message()));
      sends.push_back(*send);
    }
    const absl::Status sent = bootstrap.Wait(sends, deadline);
    if (!sent.ok()) {
      return absl::Status(sent.code(),
                          absl::StrCat(where, "sending the NCCL unique id: ", sent.message()));
    }
    return id;
  }
  absl::StatusOr<Request> receive = bootstrap.Recv(0, tag, absl::MakeSpan(message));
  absl::Status received = receive.status();
  if (received.ok()) received = bootstrap.Wait({*receive}, deadline);
  if (!received.ok()) {
    return absl::Status(received.code(),
                        absl::StrCat(where, "receiving the NCCL unique id: ", received.message()));
  }
  if (message[0] != std::byte{1}) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "rank 0 could not create the NCCL unique id (see its error)"));
  }
  ncclUniqueId shared;
  std::memcpy(&shared, message.data() + 1, sizeof(ncclUniqueId));
  return shared;
}

absl::StatusOr<ncclUniqueId> CreateId(int device) {
  LOOM_RETURN_IF_ERROR(CheckDevice(device));
  ncclUniqueId id;
  LOOM_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id), nullptr);
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectNcclTransport(Transport& bootstrap, int device,
                                                                NcclTransportOptions options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  absl::StatusOr<ncclUniqueId> id =
      bootstrap.rank() == 0 ? CreateId(device) : absl::StatusOr<ncclUniqueId>(ncclUniqueId{});
  // Every rank takes part in the id's trip, even one whose device is unusable, so
  // rank 0 is not left waiting on it.
  id = ShareId(bootstrap, std::move(id), options.bootstrap_tag, deadline);
  if (bootstrap.rank() != 0) LOOM_RETURN_IF_ERROR(CheckDevice(device));
  if (!id.ok()) return id.status();
  NcclCommOptions comm_options;
  comm_options.spin_iterations = options.spin_iterations;
  comm_options.close_timeout = options.close_timeout;
  LOOM_ASSIGN_OR_RETURN(
      std::unique_ptr<NcclComm> comm,
      NcclComm::Init(*id, bootstrap.rank(), bootstrap.size(), device, deadline, comm_options));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<NcclNative> native,
                        NcclNative::Create(comm.get(), options.native_timeout));
  return std::unique_ptr<Transport>(new NcclEndpoint(std::move(comm), std::move(native)));
}

}  // namespace loom
