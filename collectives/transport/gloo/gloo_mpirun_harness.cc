#include "collectives/transport/gloo/gloo_mpirun_harness.h"

#include <mpi.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/mpi/mpi_harness.h"
#include "core/posix.h"

namespace loom {
namespace {

// NewStoreDir makes a fresh directory under `base` on the group's rank 0 and gives
// its path to every member. No other thread of the process calls MPI meanwhile (a
// gloo harness connects no MPI transport), so the calls need no lock.
absl::StatusOr<std::string> NewStoreDir(MPI_Comm group, const std::string& base) {
  int rank = 0;
  MPI_Comm_rank(group, &rank);
  char path[4096] = {};
  int error = 0;
  if (rank == 0) {
    const std::string pattern = absl::StrCat(base, "/gloo-XXXXXX");
    if (pattern.size() >= sizeof(path)) {
      error = ENAMETOOLONG;
    } else {
      std::memcpy(path, pattern.c_str(), pattern.size() + 1);
      if (mkdtemp(path) == nullptr) error = errno;
    }
  }
  MPI_Bcast(&error, 1, MPI_INT, 0, group);
  if (error != 0) {
    return ErrnoToStatus(error, absl::StrCat("mkdtemp under ", base, " (on group rank 0)"));
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, group);
  return std::string(path);
}

}  // namespace

TransportHarnessFactory MakeGlooMpirunHarnessFactory(std::string store_base,
                                                     std::string interface,
                                                     GlooOptions options) {
  MpiGroupConnect connect = [store_base, interface,
                             options](MPI_Comm group) -> absl::StatusOr<std::unique_ptr<Transport>> {
    GlooOptions mine = options;
    MPI_Comm_rank(group, &mine.rank);
    MPI_Comm_size(group, &mine.size);
    MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank);
    absl::StatusOr<std::string> dir = NewStoreDir(group, store_base);
    if (!dir.ok()) return dir.status();
    mine.store_dir = *std::move(dir);
    mine.interface = interface;
    return ConnectGlooTransport(mine);
  };
  return MakeMpiHarnessFactory("gloo", std::move(connect), /*measures_paths=*/true);
}

}  // namespace loom
