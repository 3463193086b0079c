// LoomProcessGroup: a c10d::ProcessGroup over Loom's Communicator, so PyTorch programs
// (torch.distributed, DistributedDataParallel, FSDP-style loops) run their collectives
// on Loom: shared memory between the processes of one host, two levels across hosts.
// `import loom_torch` registers it as the backend "loom" (python/loom_torch).
//
// Every call is checked on the caller's thread (dense, contiguous CPU tensors of
// matching sizes and dtypes; errors name the call and the tensor), then runs on the
// group's progress thread (collectives/comm_worker.h) in the order the calls were made,
// with its timeout. It returns a LoomWork (work.h) whose wait() and future report the
// outcome; a failed call names this rank, the call and Loom's error ("shm: world rank
// 1 (pid 4242 on host) died", "mismatched collective calls: ..."), and the calls queued
// behind it fail with it: the group is then broken, as Loom's communicators are.
//
// Example (what torch.distributed does with it, in C++):
//   c10::intrusive_ptr<LoomProcessGroup> pg = *LoomProcessGroup::Create(store, spec, {});
//   std::vector<at::Tensor> tensors = {at::ones({1024})};
//   pg->allreduce(tensors, c10d::AllreduceOptions())->wait();  // tensors[0] == size() everywhere
//   pg->barrier(c10d::BarrierOptions())->wait();
#ifndef LOOM_INTEGRATIONS_TORCH_PROCESS_GROUP_H_
#define LOOM_INTEGRATIONS_TORCH_PROCESS_GROUP_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "collectives/comm_worker.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"
#include "integrations/torch/backend_options.h"
#include "integrations/torch/rendezvous.h"
#include "integrations/torch/work.h"

namespace loom {
namespace pytorch {

class LoomProcessGroup final : public c10d::ProcessGroup {
 public:
  // Create connects this rank of the group (ConnectGroup, rendezvous.h) and starts
  // its progress thread. Errors as ConnectGroup's.
  static absl::StatusOr<c10::intrusive_ptr<LoomProcessGroup>> Create(RendezvousStore& store,
                                                                     const GroupSpec& spec,
                                                                     const BackendOptions& options);
  // Only Create makes one (c10::make_intrusive needs a public constructor).
  struct CreateKey {
   private:
    friend class LoomProcessGroup;
    CreateKey() = default;
  };
  LoomProcessGroup(CreateKey, const GroupSpec& spec, const BackendOptions& options,
                   GroupConnection connection, TagReservation p2p_tags);
  // The destructor shuts the group down.
  ~LoomProcessGroup() override;

  const std::string getBackendName() const override { return "loom"; }
  // layout says how the group is connected (Describe(): "shm among 2 ranks on one host").
  const GroupLayout& layout() const { return layout_; }
  // options: the options it was created with (deterministic, check, ...).
  const BackendOptions& options() const { return options_; }
  // Where the cost model `auto` chooses by came from ("cost model from FILE",
  // "cost model measured on 2 hosts ..."); empty: the formulas.
  const std::string& cost_model_source() const { return connection_.cost_model_source; }
  // Explain: the algorithm `auto` picks for a call of `kind` moving `bytes` per rank,
  // with every candidate's predicted time (Communicator::Explain). FailedPrecondition
  // after Shutdown. Call it from the thread that shuts the group down.
  absl::StatusOr<std::string> Explain(CollectiveKind kind, size_t bytes) const;

  // Abort fails this rank's pending and later calls with `reason`, and, through the
  // transports, the peers' calls that wait on this rank (Unavailable "... aborted:
  // <reason>"), at once rather than at their timeout. For a process that ends with
  // an error while its peers may be waiting on it (loom_torch calls it from
  // sys.excepthook). Any thread.
  void Abort(const std::string& reason);

  // Shutdown lets the calls already queued finish (each within its timeout), then
  // closes the group's transports; later calls raise "shut down". For a process
  // that must end what the group holds while Python still references it (MPI must
  // be finalized after every transport over it is gone). Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  // What a queued call runs on the progress thread. It reads and writes the
  // work's tensors (LoomWork::inputs, outputs) and owns none itself: see Retire. It
  // may record the source rank of a receive in the work.
  using Job = std::function<absl::Status(LoomWork& work)>;
  class Completion;
  // The tensors of a call, for its work to hold.
  struct CallTensors {
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> outputs;
  };


  // Enqueue queues `job` as the call "<name> #<sequence> (<details>)" and returns its
  // work, which holds `tensors` and completes with their outputs when the job
  // succeeds. `timeout` is the call's (c10d's kUnsetTimeout: the group's).
  c10::intrusive_ptr<c10d::Work> Enqueue(c10d::OpType type, const char* profiling_title,
                                         absl::string_view name, absl::string_view details,
                                         CallTensors tensors, std::chrono::milliseconds timeout,
                                         Job job);
  // Retire keeps the progress thread's reference to a finished work until a caller's
  // thread drops it (the next Enqueue, or the destructor). Freeing a tensor that
  // Python handed over may take Python's lock, which the thread destroying this group
  // can hold while it waits for the progress thread: so the progress thread never
  // frees one.
  void Retire(c10::intrusive_ptr<LoomWork> work) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Duration CallTimeout(std::chrono::milliseconds timeout) const;
  // CallWithin: the Communicator's options for a call that may take `timeout`.
  static CallOptions CallWithin(absl::Duration timeout);
  // ErrorMessage: Loom's error of a call, naming this rank, the group and the call.
  std::string ErrorMessage(const std::string& call, const absl::Status& status) const;
  // RecordFailure keeps the group's first error, which the calls dropped after it
  // report.
  void RecordFailure(const std::string& call, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DroppedStatus() const ABSL_LOCKS_EXCLUDED(mu_);
  // PointToPoint runs a send (or receive) of `tensor` with `peer` on the transport
  // directly, so PyTorch's tags keep their meaning (Communicator::Send has none).
  absl::Status PointToPoint(bool send, const at::Tensor& tensor, int peer, int tag,
                            absl::Duration timeout);
  // ReceiveFromAny receives `tensor` from whichever peer sends with `tag` first and
  // returns that peer.
  absl::StatusOr<int> ReceiveFromAny(const at::Tensor& tensor, int tag, absl::Duration timeout);

  const GroupSpec spec_;
  const BackendOptions options_;
  const GroupLayout layout_;
  // Used by the progress thread's jobs; closed by Shutdown once the worker is gone.
  GroupConnection connection_;
  TagReservation p2p_tags_;
  mutable Mutex mu_;
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  // When the progress thread will be done with everything queued, at the latest.
  absl::Time queue_done_by_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::string first_error_ ABSL_GUARDED_BY(mu_);
  std::vector<c10::intrusive_ptr<LoomWork>> retired_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Runs the calls; reset by Shutdown, before connection_ closes.
  std::unique_ptr<CommWorker> worker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_PROCESS_GROUP_H_
