// Shm transport: the ranks of a group are processes on one host, talking through
// POSIX shared memory. Each process connects its own endpoint with the job's id, its
// rank and the group size (as //tools:launch passes them in the environment), and
// then uses the Transport interface of transport.h, whose contract it implements in
// full.
//
// Data paths: messages up to `eager_bytes` travel inline through per-pair cells in
// shared memory (one copy in, one copy out); such a send is buffered, complete as
// soon as it is in the cell (transport.h, Completion). Larger ones are pulled by the receiver
// straight out of the sender's buffer with process_vm_readv (CMA, a single copy)
// where the kernel allows it, and otherwise streamed in chunks through a per-pair
// staging ring, pipelined. Waits spin briefly, then sleep on a process-shared futex,
// so more ranks than cores still progress.
//
// Failure: a rank that aborts or dies (kill -9 included) fails every peer request
// that involves it with Unavailable naming it (world rank, pid, host), within
// milliseconds; one that stops running (SIGSTOP) within heartbeat_timeout. A rank that
// closes its endpoint normally is no failure, as with inproc: requests still waiting
// for it run into their deadline. The segments (/dev/shm/loom.<job_id>.*) are unlinked as soon as
// every rank has mapped them, so nothing is left behind after connect, crash or not; a crash during
// connect leaves a segment that the next job with the same id replaces, and RemoveShmSegments
// clears.
//
// Example (in each of the N processes of a job started by //tools:launch):
//   LOOM_ASSIGN_OR_RETURN(ShmOptions options, ShmOptionsFromEnvironment());
//   // options.job_id == "train-42", options.rank == 1, options.size == 4,
//   // options.world_rank == 1
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, ConnectShmTransport(options));
//   // transport->name() == "shm"; transport->rank() == 1; transport->size() == 4
//   std::vector<float> out = {1, 2, 3, 4}, in(4);
//   LOOM_ASSIGN_OR_RETURN(Request send, transport->Send(0, /*tag=*/7, AsBytes(out)));
//   LOOM_ASSIGN_OR_RETURN(Request recv, transport->Recv(0, /*tag=*/7, AsWritableBytes(in)));
//   LOOM_RETURN_IF_ERROR(transport->Wait({send, recv}, absl::Now() + absl::Seconds(10)));
//   // `in` now holds rank 0's four floats.
//
// After the job, the launcher calls RemoveShmSegments("train-42") (a no-op when every
// rank got through connect).
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/transport.h"

namespace loom {

// Limits of ShmOptions (size; staging_bytes), for tools that check their flags
// before they start a job's processes.
inline constexpr int kMaxShmRanks = 256;
inline constexpr size_t kMinShmStagingBytes = size_t{64} * 1024;
inline constexpr size_t kMaxShmStagingBytes = size_t{256} * 1024 * 1024;

struct ShmOptions {
  // Names the job; every rank of it passes the same. Must match [A-Za-z0-9_.-]{1,96}.
  // Segments are /dev/shm/loom.<job_id>.*, so two jobs on one host need two ids.
  std::string job_id;
  // This process's rank in [0, size), and the number of ranks, in [1, 256].
  int rank = 0;
  int size = 1;
  // This process's rank in the whole job, when `rank` is local to a group (the tp
  // group of a training job, say); -1 means `rank`. Errors name peers by it.
  int world_rank = -1;
  // A peer that holds its endpoint open but has not run for this long (stopped,
  // frozen; see heartbeat.h) fails every request that involves it with Unavailable
  // naming it ("stopped responding"), whatever the requests' deadlines. At least
  // 200 ms; absl::InfiniteDuration() turns the check off (the beats go on).
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  // How long ConnectShmTransport waits for every rank to arrive.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Idle polls before a Wait sleeps on its futex. Spinning buys latency when ranks
  // have cores of their own (a futex wake-up costs tens of microseconds); when the
  // group has more ranks than the process may use CPUs, each idle poll yields the
  // CPU (sched_yield), so the ranks being waited for get to run.
  int spin_iterations = 4000;
  // Processes of the job sharing this host's CPUs, when the group is not all of them
  // (the node group of an MPI job, say); 0 means `size`. Spinning yields the CPU when
  // this exceeds the CPUs the process may use.
  int host_ranks = 0;
  // How messages above eager_bytes travel. kAuto: CMA between every pair where a
  // probe at connect shows the kernel allows it, staged elsewhere. kCma: CMA or
  // connect fails (FailedPrecondition). kStaged: never CMA (nor its ptrace opening).
  // kStagedOrMapped: staged, except sends out of a SharedBuffer, which the receiver
  // maps where the probe allows (taking a memfd needs the permission CMA needs), as
  // kAuto does: for machines whose kernel copy (CMA) is slower than the staged ring
  // (a 2-core AMD EPYC VM: 16 MiB all-reduce 2.1-3.2 ms staged, 3.8-4.5 ms with CMA).
  // A self-send of any size is one memcpy whatever the mode. Every rank passes the same.
  enum class CopyMode { kAuto, kCma, kStaged, kStagedOrMapped };
  CopyMode copy_mode = CopyMode::kAuto;
  // Messages of at most this many bytes travel inline, through per-pair cells, for
  // latency, and their sends complete once written there (buffered); in
  // [0, 262144]. Larger ones are pulled with CMA where it works, which is faster
  // from about 8 KiB up (shm_transport_benchmark). Every rank passes the same.
  size_t eager_bytes = 8 * 1024;
  // Bytes of the staging ring of each ordered pair of ranks (split into 8 chunks),
  // in [65536, 268435456]. Shared memory is only touched where the staged path runs.
  // Every rank passes the same.
  size_t staging_bytes = 1 << 20;
};

// ShmOptionsFromEnvironment reads LOOM_JOB_ID, LOOM_RANK and LOOM_WORLD_SIZE, as
// //tools:launch sets them; the other fields keep their defaults. InvalidArgument
// naming the variable and its value when one is missing or malformed, or the rank
// is outside [0, LOOM_WORLD_SIZE).
absl::StatusOr<ShmOptions> ShmOptionsFromEnvironment();

// ConnectShmTransport connects this process's endpoint to the rest of its job and
// returns it once every rank has arrived (name() is "shm"). InvalidArgument for bad
// options or ranks that disagree on them (size, eager_bytes, staging_bytes,
// copy_mode); DeadlineExceeded naming the ranks that never arrived within
// connect_timeout; Unavailable naming a rank that died or failed while connecting;
// FailedPrecondition for kCma where process_vm_readv is not allowed; AlreadyExists
// when a live process holds this rank's segment (two jobs with one id); Internal for
// a failed system call.
absl::StatusOr<std::unique_ptr<Transport>> ConnectShmTransport(const ShmOptions& options);

// ShmSegmentPrefix returns "/loom.<job_id>.", the shm_open prefix of every segment
// of the job: /dev/shm/loom.<job_id>.* on Linux.
std::string ShmSegmentPrefix(absl::string_view job_id);

// RemoveShmSegments unlinks every segment left by job `job_id` (a job that crashed
// while connecting leaves some). Live processes keep their mappings. OK when there
// is nothing to remove; InvalidArgument for a malformed job id; Internal naming the
// segment when unlinking fails.
absl::Status RemoveShmSegments(absl::string_view job_id);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_TRANSPORT_H_
