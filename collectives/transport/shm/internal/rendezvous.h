// Rendezvous: how the `world_size` processes of a job find each other. Each rank
// creates its own segment (replacing a dead job's leftover), maps every peer's as it
// appears, probes whether it may read each peer's memory with CMA, and then two
// barriers run through the segment headers: once every rank has mapped a segment
// its owner unlinks the name, and a rank returns only when every name is gone. So
// after a successful connect nothing is left in /dev/shm, whatever happens next.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_RENDEZVOUS_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_RENDEZVOUS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/liveness.h"
#include "collectives/transport/shm/internal/segment.h"

namespace loom {
namespace shm_internal {

enum class CmaPolicy {
  kNever,        // Staged copies only; CMA is not even probed.
  kIfAvailable,  // Per pair: CMA where the probe succeeded, staged elsewhere.
  kRequired,     // Connect fails unless every rank can read every peer.
};

// GroupConfig is what every rank of a job must agree on, plus this rank's identity.
// Validated by the caller.
struct GroupConfig {
  std::string job_id;
  int rank = 0;
  int world_size = 1;
  CmaPolicy cma = CmaPolicy::kIfAvailable;
  uint32_t copy_mode = 0;  // ShmOptions::CopyMode, compared across ranks.
  // kStagedOrMapped: large sends from ordinary memory go through the staging ring
  // even where CMA works (so every peer's ring is committed).
  bool stage_ordinary = false;
  size_t eager_bytes = 0;
  size_t staging_bytes = 0;
  absl::Time deadline = absl::InfiniteFuture();
  // For peers' errors and liveness checks: who this rank is, and how it beats.
  int world_rank = 0;
  std::string host;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration heartbeat_timeout = absl::InfiniteDuration();
};

// ConnectedGroup is every segment of a job, mapped, with the facts the endpoint needs.
struct ConnectedGroup {
  GroupConfig config;
  SegmentLayout layout{1, 0, 0};
  std::vector<Mapping> segments;  // By rank, this rank's included.
  std::vector<pid_t> pids;
  // peer_pulls[p]: rank p may read this rank's large sends with CMA (and map its
  // SharedBuffers).
  std::vector<bool> peer_pulls;
  // The word peers read to probe CMA; it must outlive their probes.
  std::unique_ptr<uint64_t> probe_word;
  // Declared last: destroyed (the liveness mutex released) before the mappings go.
  std::unique_ptr<LivenessHolder> liveness;

  RankHeader& header(int rank) const { return *layout.header(segments[rank].base()); }
};

// Rendezvous connects this rank to its group. DeadlineExceeded naming the ranks that
// never arrived; Unavailable naming a rank that died or failed while connecting;
// InvalidArgument when ranks disagree on the group (world size, eager_bytes,
// staging_bytes, copy mode); FailedPrecondition when CMA is required and a probe
// fails; AlreadyExists when a live process holds this rank's segment name; Internal
// for a failed system call. On error this rank's segment name is removed.
absl::StatusOr<ConnectedGroup> Rendezvous(const GroupConfig& config);

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_RENDEZVOUS_H_
