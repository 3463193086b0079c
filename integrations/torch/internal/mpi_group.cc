#include "integrations/torch/internal/mpi_group.h"

#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"

namespace loom {
namespace pytorch_internal {
namespace {

// The tag of MPI_Comm_create_group. Every process creates its groups one at a time,
// in the order torch.distributed creates them, so one tag serves them all.
constexpr int kCreateGroupTag = 0x4c54;

Mutex& SessionMutex() {
  static Mutex* const mu = new Mutex();
  return *mu;
}

// The process's session: made by the first StartMpi, ended by FinalizeMpi.
std::unique_ptr<MpiSession>& Session() ABSL_EXCLUSIVE_LOCKS_REQUIRED(SessionMutex()) {
  static auto* const session = new std::unique_ptr<MpiSession>();
  return *session;
}

bool& Finalized() ABSL_EXCLUSIVE_LOCKS_REQUIRED(SessionMutex()) {
  static bool finalized = false;
  return finalized;
}

absl::Status MpiError(int code, const char* call) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(absl::StrCat(call, " failed: ", std::string(text, length)));
}

}  // namespace

absl::StatusOr<int> StartMpi() {
  MutexLock lock(&SessionMutex());
  if (Session() == nullptr) {
    if (Finalized()) {
      return absl::FailedPreconditionError("loom: MPI was finalized in this process already");
    }
    if (!LaunchedByMpirun()) {
      return absl::FailedPreconditionError(
          "loom: MPI between hosts needs the processes started by mpirun");
    }
    absl::StatusOr<std::unique_ptr<MpiSession>> session = MpiSession::Start(nullptr, nullptr);
    if (!session.ok()) return session.status();
    if ((*session)->thread_level() < MPI_THREAD_MULTIPLE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "loom: MPI granted thread level ", (*session)->thread_level(),
          "; torch groups need MPI_THREAD_MULTIPLE (use transport gloo)"));
    }
    Session() = std::move(*session);
  }
  return Session()->world_rank();
}

int MpiWorldRankFromEnvironment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK"}) {
    const char* value = std::getenv(name);
    int rank = -1;
    if (value != nullptr && absl::SimpleAtoi(value, &rank) && rank >= 0) return rank;
  }
  return -1;
}

bool MpiStarted() {
  MutexLock lock(&SessionMutex());
  return Session() != nullptr;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiGroup(absl::Span<const int> world_ranks,
                                                           const MpiTransportOptions& options) {
  // MPI_THREAD_MULTIPLE (StartMpi insists) lets this run beside the other groups'
  // transports, which serialize their own calls.
  MPI_Group world_group = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  int code = MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  if (code != MPI_SUCCESS) return MpiError(code, "MPI_Comm_group");
  const std::vector<int> ranks(world_ranks.begin(), world_ranks.end());
  code = MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &members);
  MPI_Group_free(&world_group);
  if (code != MPI_SUCCESS) return MpiError(code, "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  code = MPI_Comm_create_group(MPI_COMM_WORLD, members, kCreateGroupTag, &comm);
  MPI_Group_free(&members);
  if (code != MPI_SUCCESS) return MpiError(code, "MPI_Comm_create_group");
  // The transport works on a duplicate of its own. `comm` is kept until
  // MPI_Finalize, as the transport keeps its duplicates (mpi_transport.h): a freed
  // communicator's id is reused, and a late message could derail the next one.
  return ConnectMpiTransport(comm, options);
}

void AbortMpiJob(const std::string& reason) {
  const MpiSession* session = nullptr;
  {
    MutexLock lock(&SessionMutex());
    session = Session().get();
  }
  if (session != nullptr) session->AbortJob("loom_torch", absl::AbortedError(reason), 1);
}

void FinalizeMpi() {
  MutexLock lock(&SessionMutex());
  if (Session() == nullptr) return;
  Session().reset();
  Finalized() = true;
}

}  // namespace pytorch_internal
}  // namespace loom
