// BackendOptions: how a process group of Loom's torch.distributed backend ("loom")
// connects and runs, as one value, whatever set it (loom_torch.Options passed as
// pg_options, or LOOM_TORCH_* environment variables read by the Python package when
// each group is created; see README.md).
//
// Example:
//   BackendOptions options;                                 // shm on one host, auto across
//   options.deterministic = true;                           // bitwise-reproducible sums
//   LOOM_ASSIGN_OR_RETURN(options.transport, ParseTransportChoice("gloo"));
//   ValidateBackendOptions(options);                        // OK
//   options.heartbeat_timeout = absl::Milliseconds(10);
//   ValidateBackendOptions(options);
//   // InvalidArgument: loom: heartbeat_timeout 10ms is below 200ms (use inf to turn ...)
#ifndef LOOM_INTEGRATIONS_TORCH_BACKEND_OPTIONS_H_
#define LOOM_INTEGRATIONS_TORCH_BACKEND_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/shm/shm_transport.h"

namespace loom {
namespace pytorch {

// Which transport carries a group's messages.
enum class TransportChoice {
  // Loom's shm transport when every rank of the group is on one host; across hosts,
  // two levels: shm inside each host and, between hosts, MPI when the processes were
  // started by mpirun, Gloo over TCP (Loom's gloo transport) otherwise.
  kAuto,
  // shm only: a group spanning hosts fails to connect, naming the hosts.
  kShm,
  // Gloo over TCP among all ranks, with no shm level, even on one host: for
  // processes that do not share /dev/shm (containers) and as a baseline.
  kGloo,
  // As kAuto, with MPI between hosts required: a group spanning hosts fails to
  // connect unless the processes were started by mpirun.
  kMpi,
};

// ParseTransportChoice accepts "auto", "shm", "gloo" and "mpi"; InvalidArgument
// naming the text otherwise.
absl::StatusOr<TransportChoice> ParseTransportChoice(absl::string_view text);
absl::string_view TransportChoiceName(TransportChoice choice);

// ParseShmCopy accepts "staged_or_mapped", "auto" (CMA where allowed), "cma" and
// "staged" (ShmOptions::CopyMode); InvalidArgument naming the text otherwise.
absl::StatusOr<ShmOptions::CopyMode> ParseShmCopy(absl::string_view text);

struct BackendOptions {
  // Every reduction folds the ranks' contributions in rank order (Loom's
  // deterministic mode): two runs give bitwise the same results, whatever the
  // algorithm. Default off (the cost model picks the fastest algorithm).
  bool deterministic = false;
  // kFull: every call first exchanges its full fingerprint, so a mismatched call is
  // named before any data moves (one more round trip per call). Default kSequence:
  // the mismatch is named as soon as the first message crosses.
  CommunicatorOptions::Check check = CommunicatorOptions::Check::kSequence;
  TransportChoice transport = TransportChoice::kAuto;
  // The host this rank counts as: ranks with the same host id share /dev/shm and
  // talk through it. Empty (the default): this machine's hostname and boot id.
  std::string host_id;
  // Across hosts, the address (or hostname) Gloo's peers reach this rank at; empty:
  // this machine's hostname. `gloo_interface` (a network interface, e.g. "eth0")
  // takes precedence when set.
  std::string gloo_hostname;
  std::string gloo_interface;
  // A peer alive but not running (stopped, frozen host) fails the calls that need
  // it within this bound, whatever their timeout. At least 200 ms.
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  // The pipelining chunk of the ring and tree algorithms
  // (CommunicatorOptions::chunk_bytes); 0: the Communicator's default (256 KiB).
  size_t chunk_bytes = 0;
  // How shm moves messages above its eager size (ShmOptions::copy_mode). Default
  // kStagedOrMapped: through the staging ring, except tensors in Loom's shared memory
  // (loom_torch.empty), which peers map. On the 2-core AMD EPYC VM this project's
  // figures come from, the ring all-reduce of ordinary tensors ran 1.4-2x faster
  // staged than with CMA at 8 MiB and beyond (README.md, "Speed"); where CMA is the
  // faster (collectives/README.md's Intel machine), kAuto.
  ShmOptions::CopyMode shm_copy = ShmOptions::CopyMode::kStagedOrMapped;
  // The cost model the group's algorithms are chosen by (`auto`): a file
  // (collective_bench --calibrate --save_cost_model, or one auto-calibration cached),
  // read by every rank. Empty: a group across hosts measures one on its hosts the
  // first time and caches it (collectives/auto_calibration.h, in $LOOM_CACHE_DIR or
  // the default directory); a group on one host keeps the formulas.
  std::string cost_model;
  // Without a file, across hosts: how many groups' calibrations the cache merges (their
  // median, AutoCalibrationOptions::calibrations_merged) before later groups on the
  // same hosts only read it. At least 1; 1 keeps the first calibration.
  int cost_model_calibrations = 3;
};

// ValidateBackendOptions: InvalidArgument naming the field and its value
// (heartbeat_timeout below 200 ms, a host_id with a tab or newline,
// cost_model_calibrations below 1).
absl::Status ValidateBackendOptions(const BackendOptions& options);

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_BACKEND_OPTIONS_H_
