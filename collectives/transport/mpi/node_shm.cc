#include "collectives/transport/mpi/node_shm.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "core/mutex.h"

namespace loom {

using mpi_internal::MpiLock;

absl::StatusOr<std::unique_ptr<Transport>> ConnectNodeShmTransport(MPI_Comm comm,
                                                                   int ranks_per_node,
                                                                   ShmOptions shm) {
  int size = 0;
  {
    MutexLock lock(&MpiLock());
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  }
  if (ranks_per_node <= 0 || size % ranks_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat("node shm transport: ranks per node ",
                                                   ranks_per_node, " does not divide the ",
                                                   size, " ranks"));
  }
  std::vector<int> node_of_rank(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) node_of_rank[r] = r / ranks_per_node;
  return ConnectNodeShmTransport(comm, node_of_rank, std::move(shm));
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectNodeShmTransport(
    MPI_Comm comm, absl::Span<const int> node_of_rank, ShmOptions shm) {
  int rank = 0, size = 0;
  // The job's shm id: rank 0's pid and clock make it unique on its host, and the
  // other hosts' jobs differ by node number.
  std::array<char, 48> base{};
  {
    MutexLock lock(&MpiLock());
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    if (node_of_rank.size() != static_cast<size_t>(size)) {
      return absl::InvalidArgumentError(absl::StrCat("node shm transport: ", node_of_rank.size(),
                                                     " nodes for ", size, " ranks"));
    }
    if (rank == 0) {
      std::snprintf(base.data(), base.size(), "mpi-%ld-%lld", static_cast<long>(getpid()),
                    static_cast<long long>(absl::ToUnixNanos(absl::Now()) % 1000000000000LL));
    }
    LOOM_MPI_RETURN_IF_ERROR(MPI_Bcast(base.data(), static_cast<int>(base.size()), MPI_CHAR, 0, comm),
                             "MPI_Bcast");
    // Every process of the job on this host competes for its CPUs, not only this
    // node group's (an emulated layout puts several groups on one host).
    MPI_Comm host = MPI_COMM_NULL;
    LOOM_MPI_RETURN_IF_ERROR(
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host),
        "MPI_Comm_split_type");
    const int code = MPI_Comm_size(host, &shm.host_ranks);
    MPI_Comm_free(&host);
    LOOM_MPI_RETURN_IF_ERROR(code, "MPI_Comm_size");
  }
  const int node = node_of_rank[rank];
  int place = 0, members = 0;
  for (int r = 0; r < size; ++r) {
    if (node_of_rank[r] != node) continue;
    if (r < rank) ++place;
    ++members;
  }
  shm.job_id = absl::StrCat(base.data(), "-n", node);
  shm.rank = place;
  shm.size = members;
  if (shm.world_rank < 0) {
    int world_rank = 0;
    MutexLock lock(&MpiLock());
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    shm.world_rank = world_rank;  // for the errors that name this rank to its peers
  }
  return ConnectShmTransport(shm);
}

}  // namespace loom
