// Inproc transport: the ranks of a group are threads of one process. The embedded
// default backend and the test harness of every collective.
//
// Data moves with a single copy, straight from the sender's buffer into the
// receiver's, by whichever side arrives second; nothing is staged. Waits spin
// briefly and then block on a condition variable, so 16 ranks on 2 cores progress.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(4));
//   std::vector<std::thread> threads;
//   for (int r = 0; r < 4; ++r) {
//     threads.emplace_back([&, r] {
//       std::unique_ptr<Transport> t = *group->Endpoint(r);
//       // ... t->Send / t->Recv / t->Wait, as in transport.h ...
//     });
//   }
//   for (auto& thread : threads) thread.join();
//
// Abort(reason) on one endpoint fails its own requests with `reason` and every
// peer's request that involves it with Unavailable naming the rank, at once.
#ifndef LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "collectives/transport/transport.h"

namespace loom {

namespace inproc_internal {
class GroupState;
}  // namespace inproc_internal

struct InprocOptions {
  // Polls of a request's completion flag before a Wait blocks. Spinning helps when
  // ranks have cores of their own; blocking keeps oversubscribed groups moving.
  int spin_iterations = 4000;
  // Busy threads of this process sharing its CPUs while the group runs (a training
  // job's ranks and their communication threads, say); 0 means the group's size.
  // When they outnumber the CPUs the process may use (UsableCpus), a Wait blocks
  // at once: a waiter that spins takes the CPU from the thread it waits for.
  int host_threads = 0;
};

class InprocGroup {
 public:
  // Create makes a group of `size` ranks. InvalidArgument unless 1 <= size <= 4096,
  // spin_iterations >= 0 and host_threads >= 0.
  static absl::StatusOr<std::shared_ptr<InprocGroup>> Create(int size, InprocOptions options = {});

  int size() const;
  // The polls a Wait spins before it blocks: spin_iterations, or 0 where the host
  // threads outnumber the CPUs.
  int spin_iterations() const;

  // Endpoint returns rank `rank`'s transport. Each rank's endpoint may be taken
  // once (FailedPrecondition the second time); OutOfRange for a bad rank. Endpoints
  // keep the group alive, so they may outlive the InprocGroup handle.
  absl::StatusOr<std::unique_ptr<Transport>> Endpoint(int rank);

 private:
  explicit InprocGroup(std::shared_ptr<inproc_internal::GroupState> state);
  // shared_ptr: the state is shared by the group handle and every endpoint, each of
  // which may be released last, on a different thread.
  std::shared_ptr<inproc_internal::GroupState> state_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_TRANSPORT_H_
