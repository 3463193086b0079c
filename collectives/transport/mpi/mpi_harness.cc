#include "collectives/transport/mpi/mpi_harness.h"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "core/mutex.h"

namespace loom {
namespace {

// ShareStatuses gives every process the statuses of ranks [0, world): each sends
// its code and message (ranks at or past `world` send nothing that is kept).
std::vector<absl::Status> ShareStatuses(const absl::Status& mine, int world) {
  MutexLock lock(&mpi_internal::MpiLock());
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string message(mine.message());
  const int header[2] = {static_cast<int>(mine.code()), static_cast<int>(message.size())};
  std::vector<int> headers(2 * size);
  MPI_Allgather(header, 2, MPI_INT, headers.data(), 2, MPI_INT, MPI_COMM_WORLD);
  std::vector<int> lengths(size), offsets(size);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    lengths[r] = headers[2 * r + 1];
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(message.data(), static_cast<int>(message.size()), MPI_CHAR, all.data(),
                 lengths.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<absl::Status> statuses;
  for (int r = 0; r < world; ++r) {
    statuses.emplace_back(static_cast<absl::StatusCode>(headers[2 * r]),
                          all.substr(offsets[r], lengths[r]));
  }
  return statuses;
}

// WaitForGroup returns once every member of `group` has called it, polling with a
// short backoff; DeadlineExceeded after `limit` (a member that never gets there, say
// one stuck in its body). The barrier is then left to MPI: the job is failing.
absl::Status WaitForGroup(MPI_Comm group, absl::Duration limit) {
  MPI_Request barrier = MPI_REQUEST_NULL;
  {
    MutexLock lock(&mpi_internal::MpiLock());
    MPI_Ibarrier(group, &barrier);
  }
  const absl::Time deadline = absl::Now() + limit;
  for (int done = 0; !done;) {
    {
      MutexLock lock(&mpi_internal::MpiLock());
      MPI_Test(&barrier, &done, MPI_STATUS_IGNORE);
    }
    if (done) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "MpiHarness: the group's other members did not finish their bodies within ",
          absl::FormatDuration(limit)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return absl::OkStatus();
}

}  // namespace

int MpiWorldSize() {
  MutexLock lock(&mpi_internal::MpiLock());
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

MpiHarness::MpiHarness(MpiTransportOptions options)
    : MpiHarness(
          "mpi", [options](MPI_Comm group) { return ConnectMpiTransport(group, options); },
          /*measures_paths=*/true) {}

MpiHarness::MpiHarness(std::string name, MpiGroupConnect connect, bool measures_paths)
    : name_(std::move(name)), connect_(std::move(connect)), measures_paths_(measures_paths) {}

std::vector<absl::Status> MpiHarness::Run(int world,
                                          const std::function<absl::Status(Transport&)>& body) {
  const int size = MpiWorldSize();
  if (world > size) {
    return std::vector<absl::Status>(
        world, absl::FailedPreconditionError(absl::StrCat(
                   "MpiHarness: a world of ", world, " needs that many processes; the job has ",
                   size, " (mpirun -np)")));
  }
  int rank = 0;
  MPI_Comm group = MPI_COMM_NULL;
  {
    MutexLock lock(&mpi_internal::MpiLock());
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank < world ? 0 : MPI_UNDEFINED, rank, &group);
  }
  absl::Status mine;
  if (group != MPI_COMM_NULL) {
    absl::StatusOr<std::unique_ptr<Transport>> transport = connect_(group);
    mine = transport.ok() ? body(**transport) : transport.status();
    // Every member's body ends before any endpoint closes, as thread ranks do: a peer
    // that closed early would fail the requests still pending with it (gloo says
    // goodbye). Not a blocking barrier under the lock: this endpoint may still have
    // to move bytes a slower member waits for.
    const absl::Status waited = WaitForGroup(group, absl::Minutes(5));
    if (mine.ok()) mine = waited;
    transport = absl::CancelledError("closed");  // Destroys the endpoint before the group.
    MutexLock lock(&mpi_internal::MpiLock());
    MPI_Comm_free(&group);
  }
  return ShareStatuses(mine, world);
}

TransportHarnessFactory MakeMpiHarnessFactory(MpiTransportOptions options) {
  return [options] { return std::make_unique<MpiHarness>(options); };
}

TransportHarnessFactory MakeMpiHarnessFactory(std::string name, MpiGroupConnect connect,
                                              bool measures_paths) {
  return [name, connect, measures_paths] {
    return std::make_unique<MpiHarness>(name, connect, measures_paths);
  };
}

}  // namespace loom
