// ShmHarness (testonly): runs a TransportHarness body on shm ranks that are real
// processes. Run forks one child per rank; each connects with a fresh job id, runs
// the body, closes its endpoint and reports its absl::Status (code and message)
// through a pipe; the parent collects them with a deadline, kills stragglers, reaps
// every child and returns the statuses in rank order. The collectives' tests use it
// to run algorithms on shm exactly as on inproc threads.
//
// Example:
//   ShmHarness harness;  // CopyMode::kAuto
//   std::vector<absl::Status> results = harness.Run(4, [](Transport& t) -> absl::Status {
//     ...  // runs in 4 processes; report failures through the returned Status,
//     ...  // not gtest assertions (they would fail only the child)
//   });
//   // results[r] is rank r's status; harness.last_leftovers() is empty.
//
// The calling process must be single-threaded when it calls Run: forking a process
// with other threads is unsafe, and ThreadSanitizer does not support it.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

struct ShmHarnessOptions {
  // What every rank connects with. rank and size are set per Run; an empty job_id
  // means a fresh UniqueJobId() for every Run.
  ShmOptions transport;
  // How long Run waits for all ranks before it kills the ones still running.
  absl::Duration timeout = absl::Seconds(90);
};

class ShmHarness final : public TransportHarness {
 public:
  explicit ShmHarness(ShmHarnessOptions options = {});

  // name is "shm/auto", "shm/cma" or "shm/staged".
  std::string name() const override;
  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override;

  // The job id of the last Run, and the segment names (shm_open names,
  // "/loom.<job_id>.*") that existed once all its ranks had exited, before Run
  // removed them. Empty when the transport cleaned up after itself.
  const std::string& last_job_id() const { return last_job_id_; }
  const std::vector<std::string>& last_leftovers() const { return last_leftovers_; }

 private:
  const ShmHarnessOptions options_;
  std::string last_job_id_;
  std::vector<std::string> last_leftovers_;
};

// RunProcesses forks `count` children, runs `child(index)` in child `index`, and
// returns their statuses in order: what each returned, or how it ended without
// reporting (Unavailable when killed by a signal, Internal when it exited,
// DeadlineExceeded when killed at `timeout`). Same single-thread rule as Run.
std::vector<absl::Status> RunProcesses(int count, absl::Duration timeout,
                                       const std::function<absl::Status(int index)>& child);

// UniqueJobId returns a job id no other process on this host uses:
// "<prefix>-<pid>-<counter>-<random hex>".
std::string UniqueJobId(absl::string_view prefix = "test");

// MakeShmHarnessFactory returns a TransportHarnessFactory of ShmHarness with `mode`,
// for TransportConformanceTest.
TransportHarnessFactory MakeShmHarnessFactory(ShmOptions::CopyMode mode);

// ProbeShmCma tells whether two processes on this host can connect with
// CopyMode::kCma: OK, or the connect error (e.g. FailedPrecondition from a
// forbidden process_vm_readv). Probed once per process, by forking a two-rank job.
absl::Status ProbeShmCma();

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_SHM_HARNESS_H_
