#include "collectives/transport/mpi/mpi_transport.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "collectives/transport/mpi/internal/endpoint.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "collectives/transport/mpi/internal/native.h"
#include "collectives/transport/peer_failure.h"
#include "core/mutex.h"
#include "core/status_macros.h"

namespace loom {

using mpi_internal::MpiLock;
using mpi_internal::MpiStatus;

absl::StatusOr<std::unique_ptr<MpiSession>> MpiSession::Start(int* argc, char*** argv) {
  MutexLock lock(&MpiLock());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized || finalized) {
    return absl::FailedPreconditionError(
        absl::StrCat("MpiSession::Start: MPI was already ", finalized ? "finalized" : "initialized",
                     " in this process (one MpiSession per process)"));
  }
  int provided = MPI_THREAD_SINGLE;
  LOOM_MPI_RETURN_IF_ERROR(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided),
                           "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return absl::FailedPreconditionError(
        absl::StrCat("MpiSession::Start: MPI granted thread level ", provided,
                     "; Loom needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED, ") or better"));
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<MpiSession>(new MpiSession(rank, size, provided));
}

MpiSession::~MpiSession() {
  MutexLock lock(&MpiLock());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::AbortJob(absl::string_view program, const absl::Status& cause,
                          int exit_code) const {
  const int code = exit_code == 0 ? 1 : exit_code;
  char host[256] = "?";
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  host[sizeof(host) - 1] = '\0';
  // Written at once, so ranks aborting together do not interleave. The first line
  // names the rank and the cause; a Communicator's status carries its flight recorder
  // on the lines after.
  const std::string line =
      absl::StrCat(program, ": world rank ", world_rank_, " of ", world_size_, " (pid ", getpid(),
                   " on host ", host, ") aborts the MPI job: ", cause.message(), "\n");
  std::fflush(stdout);
  std::cout.flush();
  std::cerr.flush();
  (void)!write(STDERR_FILENO, line.data(), line.size());
  // A rank that failed because a peer aborted its endpoint first (the peer's error
  // reached it through the transport) leaves the abort to that peer for a moment:
  // whichever rank calls MPI_Abort first has mpirun stop the others, and the job's
  // error should be the one that started it, not an echo of it. A peer that died
  // without aborting does not come: then this rank aborts after the grace.
  const std::optional<PeerFailure> peer = FirstPeerFailure();
  if (peer.has_value() && peer->fault == PeerFault::kAborted) absl::SleepFor(kPeerAbortGrace);
  // With MPI_THREAD_MULTIPLE no lock: another thread may hold MpiLock in a call that
  // waits for the very peers this abort is about to stop.
  if (thread_level_ == MPI_THREAD_MULTIPLE) {
    MPI_Abort(MPI_COMM_WORLD, code);
  } else {
    MutexLock lock(&MpiLock());
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  _exit(code);
}

bool LaunchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

namespace {

absl::Status CheckOptions(const MpiTransportOptions& options) {
  if (options.eager_bytes > (size_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: eager_bytes ", options.eager_bytes, " is outside [0, 1048576]"));
  }
  if (options.chunk_bytes < 4096 || options.chunk_bytes > (size_t{1} << 30) ||
      options.chunk_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("mpi: chunk_bytes ", options.chunk_bytes,
                                                   " must be a multiple of 4096 in [4096, 2^30]"));
  }
  if (options.spin_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi: spin_iterations ", options.spin_iterations, " is negative"));
  }
  LOOM_RETURN_IF_ERROR(
      ValidateHeartbeatTimeout(options.heartbeat_timeout, "mpi: heartbeat_timeout"));
  if (options.withdraw_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mpi: withdraw_grace ", absl::FormatDuration(options.withdraw_grace), " is negative"));
  }
  return absl::OkStatus();
}

// Agree checks that every rank passed the same value of `field`.
absl::Status Agree(MPI_Comm comm, const char* field, uint64_t mine)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock()) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<uint64_t> all(size);
  LOOM_MPI_RETURN_IF_ERROR(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm),
                           "MPI_Allgather");
  for (int r = 1; r < size; ++r) {
    if (all[r] != all[0]) {
      return absl::InvalidArgumentError(absl::StrCat("mpi: ranks disagree on ", field,
                                                     ": rank 0 has ", all[0], ", rank ", r, " has ",
                                                     all[r]));
    }
  }
  return absl::OkStatus();
}

// Identities gathers who every rank of `comm` is: world rank, pid and host.
absl::StatusOr<std::vector<PeerIdentity>> Identities(MPI_Comm comm)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock()) {
  struct Wire {
    int64_t world_rank;
    int64_t pid;
    char host[64];
  };
  Wire mine{};
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  mine.world_rank = world_rank;
  mine.pid = getpid();
  const std::string host = HostName();
  std::strncpy(mine.host, host.c_str(), sizeof(mine.host) - 1);
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<Wire> all(size);
  LOOM_MPI_RETURN_IF_ERROR(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm),
      "MPI_Allgather");
  std::vector<PeerIdentity> peers(size);
  for (int r = 0; r < size; ++r) {
    all[r].host[sizeof(all[r].host) - 1] = '\0';
    peers[r] = {static_cast<int>(all[r].world_rank), all[r].pid, all[r].host};
  }
  return peers;
}

uint64_t TimeoutWord(absl::Duration timeout) {
  return timeout == absl::InfiniteDuration()
             ? ~uint64_t{0}
             : static_cast<uint64_t>(absl::ToInt64Nanoseconds(timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiTransport(MPI_Comm comm,
                                                               MpiTransportOptions options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  MPI_Comm own = MPI_COMM_NULL, collectives = MPI_COMM_NULL;
  uint64_t epoch = 0;
  int tag_ub = 0;
  std::vector<PeerIdentity> peers;
  {
    MutexLock lock(&MpiLock());
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) {
      return absl::FailedPreconditionError(
          "ConnectMpiTransport: MPI is not initialized (start an MpiSession first)");
    }
    if (comm == MPI_COMM_NULL) {
      return absl::InvalidArgumentError("ConnectMpiTransport: the communicator is MPI_COMM_NULL");
    }
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_dup(comm, &own), "MPI_Comm_dup");
    // Errors come back as codes (turned into Status), not as an abort of the job.
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_set_errhandler(own, MPI_ERRORS_RETURN),
                             "MPI_Comm_set_errhandler");
    absl::Status agreed = Agree(own, "eager_bytes", options.eager_bytes);
    if (agreed.ok()) agreed = Agree(own, "chunk_bytes", options.chunk_bytes);
    if (agreed.ok()) {
      agreed = Agree(own, "heartbeat_timeout (ns)", TimeoutWord(options.heartbeat_timeout));
    }
    absl::StatusOr<std::vector<PeerIdentity>> identities = std::vector<PeerIdentity>();
    if (agreed.ok()) {
      identities = Identities(own);
      agreed = identities.status();
    }
    if (!agreed.ok()) {
      MPI_Comm_free(&own);
      return agreed;
    }
    peers = *std::move(identities);
    int rank = 0;
    MPI_Comm_rank(own, &rank);
    if (rank == 0) {
      std::random_device device;
      epoch = (uint64_t{device()} << 32) ^ device() ^ static_cast<uint64_t>(getpid()) ^
              static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
    }
    LOOM_MPI_RETURN_IF_ERROR(MPI_Bcast(&epoch, 1, MPI_UINT64_T, 0, own), "MPI_Bcast");
    void* attribute = nullptr;
    int found = 0;
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_get_attr(own, MPI_TAG_UB, &attribute, &found),
                             "MPI_Comm_get_attr(MPI_TAG_UB)");
    tag_ub = found ? *static_cast<int*>(attribute) : 32767;
    // MPI's own collectives (Algorithm::kNative) run on a duplicate of their own.
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_dup(own, &collectives), "MPI_Comm_dup");
  }
  return std::unique_ptr<Transport>(new mpi_internal::Endpoint(
      own, epoch, tag_ub, options, std::make_unique<mpi_internal::MpiNative>(collectives),
      std::move(peers)));
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiTransportSplit(MPI_Comm comm, int color,
                                                                    int key,
                                                                    MpiTransportOptions options) {
  if (color < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConnectMpiTransportSplit: color ", color, " is negative"));
  }
  MPI_Comm part = MPI_COMM_NULL;
  {
    MutexLock lock(&MpiLock());
    LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_split(comm, color, key, &part), "MPI_Comm_split");
  }
  // The endpoint runs on duplicates of `part`, which carries nothing after this.
  absl::StatusOr<std::unique_ptr<Transport>> endpoint = ConnectMpiTransport(part, options);
  MutexLock lock(&MpiLock());
  MPI_Comm_free(&part);
  return endpoint;
}

namespace {

// HostLeadersAndSizes: for every rank r of `comm`, the lowest rank on its host and how
// many ranks that host holds, at [2r] and [2r + 1]. Collective; the caller holds
// MpiLock.
absl::StatusOr<std::vector<int>> HostLeadersAndSizes(MPI_Comm comm, int rank, int size) {
  MPI_Comm local = MPI_COMM_NULL;
  LOOM_MPI_RETURN_IF_ERROR(
      MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
      "MPI_Comm_split_type");
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  // Each rank learns its host's first rank (the rank of local rank 0 in `comm`: the
  // split is keyed by rank).
  int leader = rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, local);
  MPI_Comm_free(&local);
  std::vector<int> mine = {leader, local_size}, all(2 * static_cast<size_t>(size));
  LOOM_MPI_RETURN_IF_ERROR(MPI_Allgather(mine.data(), 2, MPI_INT, all.data(), 2, MPI_INT, comm),
                           "MPI_Allgather");
  return all;
}

}  // namespace

absl::StatusOr<std::vector<int>> MpiNodeOfRank(MPI_Comm comm) {
  MutexLock lock(&MpiLock());
  int rank = 0, size = 0;
  LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  LOOM_ASSIGN_OR_RETURN(const std::vector<int> all, HostLeadersAndSizes(comm, rank, size));
  // Hosts numbered by their lowest rank's turn: leaders appear in rank order.
  std::vector<int> node_of_rank(static_cast<size_t>(size)), number_of_leader(size, -1);
  int hosts = 0;
  for (int r = 0; r < size; ++r) {
    int& number = number_of_leader[all[2 * r]];
    if (number < 0) number = hosts++;
    node_of_rank[r] = number;
  }
  return node_of_rank;
}

absl::StatusOr<int> MpiRanksPerNode(MPI_Comm comm, int override_ranks_per_node) {
  MutexLock lock(&MpiLock());
  int rank = 0, size = 0;
  LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  LOOM_MPI_RETURN_IF_ERROR(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (override_ranks_per_node < 0 ||
      (override_ranks_per_node > 0 && size % override_ranks_per_node != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("MpiRanksPerNode: ranks per node ",
                                                   override_ranks_per_node, " does not divide the ",
                                                   size, " ranks"));
  }
  if (override_ranks_per_node > 0) return override_ranks_per_node;
  LOOM_ASSIGN_OR_RETURN(const std::vector<int> all, HostLeadersAndSizes(comm, rank, size));
  const int k = all[1];
  for (int r = 0; r < size; ++r) {
    if (all[2 * r + 1] != k || all[2 * r] != r / k * k) {
      return absl::FailedPreconditionError(absl::StrCat(
          "MpiRanksPerNode: ranks are not placed in equal blocks per host: rank ", r,
          " shares a host of ", all[2 * r + 1], " ranks with rank ", all[2 * r],
          " (rank 0's host has ", k, "); launch with --map-by slot, or pass ranks_per_node"));
    }
  }
  return k;
}

}  // namespace loom
