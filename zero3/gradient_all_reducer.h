// GradientAllReducer: the data-parallel gradient all-reduce of ZeRO stage 0 run on a
// communication thread of its own, so that it overlaps the backward pass (PyTorch
// DDP's bucketed all-reduce): a store enqueues each unit's gradient as soon as the
// step's last backward has added into it, and waits for them only before the step.
//
// One reducer per communicator: every store of a rank (one per stage model) that
// averages over the same dp group shares it, and it runs their all-reduces one at a
// time in the order they were enqueued. Since the dp ranks of a pipeline stage run
// the same schedule, they enqueue in the same order, and the collectives match.
// While a reducer lives, its thread alone drives the communicator between Enqueue
// and Wait; the rank's own thread may use it only when Wait has returned (every
// all-reduce done).
//
// Example (each dp rank):
//   LOOM_ASSIGN_OR_RETURN(std::shared_ptr<GradientAllReducer> reducer,
//                         GradientAllReducer::Create(dp_comm, {}));
//   ... during the backward, as each unit's gradient is final:
//   const int64_t ticket = reducer->Enqueue(unit_gradient);   // averaged in place
//   ... before the optimizer step:
//   LOOM_RETURN_IF_ERROR(reducer->Wait(ticket));   // the first failure, if any
//
// Errors: the first failed all-reduce is returned by every later Wait (and later
// enqueued spans are not reduced); a Wait past its deadline is DeadlineExceeded
// naming the ticket. The thread and its ordering are collectives/comm_worker.h's.
#ifndef LOOM_ZERO3_GRADIENT_ALL_REDUCER_H_
#define LOOM_ZERO3_GRADIENT_ALL_REDUCER_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/comm_worker.h"
#include "collectives/communicator.h"
#include "core/reduce_op.h"

namespace loom {

struct GradientAllReducerOptions {
  ReduceOp op = ReduceOp::kAvg;
  // The most one Wait waits for the all-reduces before it (a dead or frozen peer
  // fails the communicator's own calls sooner, by its timeout).
  absl::Duration wait_timeout = absl::Minutes(5);
};

class GradientAllReducer {
 public:
  // Create starts the thread. `dp` is not owned; it must outlive the reducer.
  // InvalidArgument for a null communicator or a non-positive timeout.
  static absl::StatusOr<std::shared_ptr<GradientAllReducer>> Create(
      Communicator* dp, const GradientAllReducerOptions& options);

  GradientAllReducer(const GradientAllReducer&) = delete;
  GradientAllReducer& operator=(const GradientAllReducer&) = delete;
  // Runs what was enqueued (each all-reduce bounded by the communicator's timeout),
  // then joins the thread.
  ~GradientAllReducer() = default;

  // Enqueue: all-reduce `data` in place (it must stay valid, and untouched by the
  // caller, until Wait of the returned ticket returns). Tickets count from 1.
  int64_t Enqueue(absl::Span<float> data);

  // Wait: until every all-reduce up to `ticket` is done; the first error of any so
  // far, up to it. Wait(0) returns OK at once.
  absl::Status Wait(int64_t ticket);

  // The tickets handed out so far (the last one's number).
  int64_t enqueued() const { return enqueued_.load(); }

  // Seconds the thread spent in all-reduces since Create (communication that ran
  // beside the caller's compute, or was waited for).
  double busy_seconds() const { return busy_nanoseconds_.load() * 1e-9; }

 private:
  GradientAllReducer(Communicator* dp, const GradientAllReducerOptions& options)
      : dp_(dp), options_(options) {}

  Communicator* const dp_;
  const GradientAllReducerOptions options_;
  std::atomic<int64_t> enqueued_{0};
  std::atomic<int64_t> busy_nanoseconds_{0};
  CommWorker worker_;  // last: its destructor runs the queue while the rest lives
};

}  // namespace loom

#endif  // LOOM_ZERO3_GRADIENT_ALL_REDUCER_H_
