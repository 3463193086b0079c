// LoomProcessGroup: creation, the queue of calls and their errors. The calls
// themselves are in process_group_{reductions,movement,p2p}.cc.
#include "integrations/torch/process_group.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "integrations/torch/internal/p2p_tags.h"

namespace loom {
namespace pytorch {
namespace {

// How long past its timeout a call may take to end: a transport that cancels a
// large transfer at its deadline waits a grace period for the copy under way
// (shm: 1 s + size / 100 MB/s), and a closing gloo pair waits for its queue.
constexpr absl::Duration kCallEndGrace = absl::Seconds(60);

std::string FirstLine(const char* what) {
  const std::string text(what);
  return text.substr(0, text.find('\n'));
}

}  // namespace

// Completion finishes one call's work exactly once: with the job's status when the
// progress thread runs it, or, when the worker drops the job because an earlier
// call failed (collectives/comm_worker.h), with that failure as the job is
// destroyed. Shared by the copies of the job's std::function (which must be
// copyable), so the last copy's destruction is the drop.
class LoomProcessGroup::Completion {
 public:
  Completion(LoomProcessGroup* group, c10::intrusive_ptr<LoomWork> work)
      : group_(group), work_(std::move(work)) {}
  ~Completion() {
    if (done_) return;
    const absl::Status dropped = group_->DroppedStatus();
    Finish(dropped);
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  LoomWork& work() { return *work_; }
  void Done(const absl::Status& status) {
    done_ = true;
    if (!status.ok()) group_->RecordFailure(work_->call(), status);
    Finish(status);
  }

 private:
  void Finish(const absl::Status& status) {
    // A callback chained on the future runs inside markCompleted; whatever it
    // throws must not escape into the progress thread.
    try {
      work_->Complete(status, status.ok() ? std::string() : group_->ErrorMessage(work_->call(), status));
    } catch (...) {
    }
    group_->Retire(std::move(work_));
  }

  LoomProcessGroup* const group_;
  c10::intrusive_ptr<LoomWork> work_;
  bool done_ = false;  // touched by the progress thread only
};

absl::StatusOr<c10::intrusive_ptr<LoomProcessGroup>> LoomProcessGroup::Create(
    RendezvousStore& store, const GroupSpec& spec, const BackendOptions& options) {
  absl::StatusOr<GroupConnection> connection = ConnectGroup(store, spec, options);
  if (!connection.ok()) return connection.status();
  absl::StatusOr<TagReservation> tags = connection->transport->ReserveTags(
      pytorch_internal::kP2pTagsBegin, pytorch_internal::kP2pTagsLast, "loom_torch send/recv");
  if (!tags.ok()) return tags.status();
  GroupSpec resolved = spec;
  if (resolved.world_rank < 0) resolved.world_rank = resolved.rank;
  return c10::make_intrusive<LoomProcessGroup>(CreateKey(), resolved, options,
                                               std::move(*connection), std::move(*tags));
}

LoomProcessGroup::LoomProcessGroup(CreateKey, const GroupSpec& spec, const BackendOptions& options,
                                   GroupConnection connection, TagReservation p2p_tags)
    : c10d::ProcessGroup(spec.rank, spec.size),
      spec_(spec),
      options_(options),
      layout_(connection.layout),
      connection_(std::move(connection)),
      p2p_tags_(std::move(p2p_tags)),
      worker_(std::make_unique<CommWorker>()) {
  init();
}

LoomProcessGroup::~LoomProcessGroup() { Shutdown(); }

absl::StatusOr<std::string> LoomProcessGroup::Explain(CollectiveKind kind, size_t bytes) const {
  if (connection_.communicator == nullptr) {
    return absl::FailedPreconditionError("loom: the process group was shut down");
  }
  return connection_.communicator->Explain(kind, bytes).ToString();
}

void LoomProcessGroup::Shutdown() {
  std::unique_ptr<CommWorker> worker;
  {
    MutexLock lock(&mu_);
    shut_down_ = true;
    worker = std::move(worker_);
  }
  if (worker == nullptr) return;  // shut down before
  // The calls still queued run (or are dropped) while the connection is alive; the
  // works they retire are then dropped on this thread.
  worker.reset();
  p2p_tags_ = TagReservation();
  connection_.communicator.reset();
  connection_.transport.reset();
  std::vector<c10::intrusive_ptr<LoomWork>> retired;
  {
    MutexLock lock(&mu_);
    retired.swap(retired_);
  }
}

void LoomProcessGroup::Retire(c10::intrusive_ptr<LoomWork> work) {
  MutexLock lock(&mu_);
  retired_.push_back(std::move(work));
}

void LoomProcessGroup::Abort(const std::string& reason) {
  // Under mu_, so that Shutdown cannot close the transports meanwhile: Shutdown
  // resets the worker outside it, but a shut-down group has no worker to check.
  MutexLock lock(&mu_);
  if (worker_ == nullptr) return;
  const absl::Status status = absl::AbortedError(reason);
  connection_.transport->Abort(status);
  if (const std::shared_ptr<Transport>& node = connection_.communicator->options().node_transport) {
    node->Abort(status);
  }
}

absl::Duration LoomProcessGroup::CallTimeout(std::chrono::milliseconds timeout) const {
  return timeout == c10d::kUnsetTimeout ? spec_.timeout : absl::FromChrono(timeout);
}

CallOptions LoomProcessGroup::CallWithin(absl::Duration timeout) {
  CallOptions call;
  call.timeout = timeout;
  return call;
}

std::string LoomProcessGroup::ErrorMessage(const std::string& call,
                                           const absl::Status& status) const {
  return absl::StrCat("loom: world rank ", spec_.world_rank, " (rank ", spec_.rank, " of ",
                      spec_.size, " in group \"", spec_.name, "\"): ", call, " failed: ",
                      status.ToString());
}

void LoomProcessGroup::RecordFailure(const std::string& call, const absl::Status& status) {
  MutexLock lock(&mu_);
  if (first_error_.empty()) first_error_ = absl::StrCat(call, " failed: ", status.ToString());
}

absl::Status LoomProcessGroup::DroppedStatus() const {
  MutexLock lock(&mu_);
  return absl::FailedPreconditionError(absl::StrCat(
      "not run: the process group is broken since ",
      first_error_.empty() ? std::string("an earlier call failed") : first_error_));
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::Enqueue(c10d::OpType type,
                                                         const char* profiling_title,
                                                         absl::string_view name,
                                                         absl::string_view details,
                                                         CallTensors tensors,
                                                         std::chrono::milliseconds timeout,
                                                         Job job) {
  const absl::Duration call_timeout = CallTimeout(timeout);
  std::string call;
  absl::Time finished_by;
  // Dropped here, on the caller's thread, when this scope ends (see Retire).
  std::vector<c10::intrusive_ptr<LoomWork>> retired;
  MutexLock lock(&mu_);
  if (shut_down_) {
    throw std::runtime_error(absl::StrCat("loom ", name, ": the process group \"", spec_.name,
                                          "\" was shut down"));
  }
  retired.swap(retired_);
  call = absl::StrCat(name, " #", calls_++, details.empty() ? "" : " (", details,
                      details.empty() ? "" : ")");
  queue_done_by_ = std::max(queue_done_by_, absl::Now()) + call_timeout + kCallEndGrace;
  finished_by = queue_done_by_;
  auto work = c10::make_intrusive<LoomWork>(rank_, type, profiling_title,
                                            std::move(tensors.inputs), std::move(tensors.outputs),
                                            std::move(call), finished_by);
  // The queued job holds the only reference to its Completion: were this thread to
  // hold one too, a job the worker drops at once (after an earlier failure) could
  // leave this thread to destroy it, and ~Completion takes mu_, held here.
  std::function<absl::Status()> queued = [completion = std::make_shared<Completion>(this, work),
                                          job = std::move(job)]() -> absl::Status {
    absl::Status status;
    try {
      // The progress thread writes into tensors that may require grad (a module's
      // parameters in a broadcast); those writes are not part of any graph.
      at::NoGradGuard no_grad;
      status = job(completion->work());
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("exception: ", FirstLine(e.what())));
    } catch (...) {
      status = absl::InternalError("unknown exception");
    }
    completion->Done(status);
    return status;
  };
  // Submitted under mu_, so Shutdown never takes the worker between the check above
  // and here. The worker's thread takes mu_ only inside a job, never while holding
  // its own lock, so this order cannot deadlock.
  worker_->Submit(std::move(queued));
  return work;
}

}  // namespace pytorch
}  // namespace loom
