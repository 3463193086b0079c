// Communicator: Loom's collective communication API. One rank's handle on a group
// of ranks, over any Transport (threads: inproc; processes on one host: shm; across
// hosts: MPI or Gloo; GPU buffers: NCCL). Every call is typed over core's DTypes, reduces with sum, prod,
// min, max or avg, works in place or out of place for any count (0, 1, fewer than
// ranks, odd, more than 2^31 bytes), has a deadline, and runs an algorithm chosen per
// call by an alpha-beta-gamma cost model unless the caller names one.
//
// Example (4 ranks as threads; each thread runs this with its own rank):
//   auto group = *InprocGroup::Create(4);
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
//                         Communicator::Create(*group->Endpoint(rank)));
//   std::vector<float> grads(1 << 20, 1.0f * rank);
//   LOOM_RETURN_IF_ERROR(comm->AllReduce(absl::MakeSpan(grads), ReduceOp::kAvg));
//   // grads[i] == 1.5f on every rank
//   Mesh mesh = *Mesh::Create({{"dp", 2}, {"tp", 2}});
//   LOOM_ASSIGN_OR_RETURN(auto tp, comm->SplitByMesh(mesh, "tp"));   // {0,1} or {2,3}
//   comm->Explain(CollectiveKind::kAllReduce, 4 << 20).ToString();
//     // "all_reduce 4 MiB on 4 ranks: ring (predicted 1.2 ms); halving_doubling ..."
//
// Semantics worth knowing:
// - Every rank of the group makes the same calls in the same order with the same
//   kind, dtype, count, op and root. A mismatch never moves data silently, and
//   fails at once: the call's tag carries its sequence number and every message
//   its stamp (kind, dtype, count, op, root, algorithm; transport.h "Stamps"), so
//   the first message that reaches a peer in another call fails both sides with
//   FailedPrecondition "mismatched collective calls: rank 0 called call #7
//   all_reduce(f32, count=64, sum, direct) but rank 1 called call #7
//   broadcast(...)". With 2 ranks both fail so; with more, the ranks that meet
//   the mismatch do, and the communicator then aborts its transport, so the
//   others fail at once too where they wait on one of them. Like any failure mid-call,
//   it leaves the communicator broken. Exceptions: NCCL's transport carries no
//   stamps, and kNative runs the transport's own collectives. With `check = kFull`
//   every call first exchanges its full fingerprint, so a mismatch is found before
//   any message moves and the communicator stays usable (one round trip per call).
// - f16 and bf16 reductions are computed in f32 (partial sums travel as f32) and
//   rounded to 16 bits once, at the end. kAvg divides the sum once, at the end
//   (integers truncate toward zero, as NCCL does).
// - deterministic = true: every reduction folds contributions in rank order,
//   ((x0 op x1) op x2) ..., so results are bitwise identical whatever the algorithm,
//   chunk size and run, and equal to that sequential fold.
// - A call that fails with DeadlineExceeded, Unavailable or Aborted (a peer died,
//   stalled or aborted) carries this rank's flight recorder in its message; the
//   communicator is then broken and later calls fail with FailedPrecondition, since
//   its message streams may be out of step; it aborts its transport endpoint, so
//   peers waiting on this rank fail at once (Unavailable naming it).
// - Threads: one thread at a time drives a communicator and every communicator split
//   from it (they share one transport endpoint). Counters, the flight recorder and
//   Explain may be read from any thread.
#ifndef LOOM_COLLECTIVES_COMMUNICATOR_H_
#define LOOM_COLLECTIVES_COMMUNICATOR_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/collective_kind.h"
#include "collectives/cost_model.h"
#include "collectives/flight_recorder.h"
#include "collectives/transport/transport.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"
#include "topology/mesh.h"

namespace loom {

namespace collectives_internal {
class AlgorithmCache;
struct CallCounters;
class Scratch;
struct CollectiveArgs;
struct CallContext;
}  // namespace collectives_internal

struct CommunicatorOptions {
  // Deadline of a call that does not set its own. Measured from the coarse clock
  // (core/clock.h), so it holds to a few milliseconds, not to the microsecond.
  absl::Duration timeout = absl::Minutes(5);
  // Rank-order reductions: bitwise-reproducible results (see the header comment).
  bool deterministic = false;
  // kSequence: the always-on check (sequence number in every tag, the call's
  // arguments in every message's stamp). kFull: also exchange and compare full
  // fingerprints before every call, so a mismatch leaves the communicator usable.
  enum class Check : uint8_t { kSequence, kFull };
  Check check = Check::kSequence;
  // Node layout for the hierarchical algorithm and the cost model: ranks
  // i*k .. i*k+k-1 share node i (with node_of_rank: k ranks on every node, in the
  // algorithms' node order). 0: one node.
  int ranks_per_node = 0;
  // Node layout in any order (a launcher that deals ranks round-robin over hosts:
  // h1,h2,h1,h2): node_of_rank[r] names rank r's node (any int; equal ints, one node).
  // The communicator's algorithms then number the ranks node by node (nodes in the
  // order of their lowest rank, ranks in order within one: NodeOrder()), so that
  // the ring crosses each node's link once each way and the node-aware algorithms
  // run by nodes whatever order the ranks were launched in. Every call keeps the
  // caller's numbering (roots, blocks, peers); reduce-scatter, all-gather, gather,
  // scatter and the all-to-alls pay one local copy of their blocks for it. With
  // every node holding the same number k of ranks, ranks_per_node must be 0 or k
  // and Create sets it to k; with unequal nodes ranks_per_node must be 0 and stays
  // 0 (the ranks are still numbered node by node). Empty: ranks_per_node's layout.
  // Deterministic reductions fold in the caller's rank order as promised.
  std::vector<int> node_of_rank;
  // Optional: this rank's endpoint among the ranks of its node (size ranks_per_node,
  // rank = rank % ranks_per_node, or with node_of_rank this rank's place among its
  // node's ranks in rank order), over a transport that is faster inside a node
  // than the communicator's own (Loom's shm inside a host, when the communicator
  // runs over MPI). The hierarchical algorithm then runs its intra-node phases over
  // it and only its inter-node phase over the communicator's transport; every other
  // algorithm ignores it. Shared by split communicators whose members fill whole
  // nodes. Null: the intra-node phases use the communicator's transport.
  std::shared_ptr<Transport> node_transport;
  // Cost model of the adaptive selector; Calibrate (calibration.h) measures one.
  CostModel cost_model = CostModel::Default();
  // Pipelining chunk of the ring and trees.
  size_t chunk_bytes = size_t{256} << 10;
  // Calls kept by the flight recorder.
  size_t flight_recorder_capacity = 256;
};

struct CallOptions {
  // Per-call timeout; zero means CommunicatorOptions::timeout.
  absl::Duration timeout = absl::ZeroDuration();
  // kAuto lets the cost model choose; anything else must implement the collective.
  Algorithm algorithm = Algorithm::kAuto;
};

// Per-collective counters of one communicator: calls, and the payload bytes this
// rank posted to send and to receive (all algorithm steps included).
struct CollectiveCounters {
  uint64_t calls = 0;
  uint64_t failed_calls = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class Communicator {
 public:
  // Create makes rank transport->rank()'s communicator over `transport`.
  // InvalidArgument for a null transport or bad options (naming the field).
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(std::shared_ptr<Transport> transport,
                                                              CommunicatorOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const CommunicatorOptions& options() const { return options_; }

  // AllocateBuffer returns `bytes` of zeroed, page-aligned host memory that this
  // communicator's transport moves at its best (shm: its peers map it, so large
  // messages out of it skip the kernel copy; see transport/comm_buffer.h). Every
  // collective takes such buffers and ordinary ones alike. A communicator split
  // from this one allocates from the same transport. Any thread.
  absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) const;

  // The collectives. Each returns InvalidArgument naming the sizes, dtypes or root
  // when the buffers do not fit the call (checked locally, before any message), the
  // errors described in the header comment, or the transport's error.
  //
  // AllReduce: output = op over ranks of input (count elements each).
  absl::Status AllReduce(ConstBufferView input, BufferView output, ReduceOp op,
                         const CallOptions& call = {});
  // ReduceScatter: input has size() * count elements; output (count) gets block
  // rank() of the reduction.
  absl::Status ReduceScatter(ConstBufferView input, BufferView output, ReduceOp op,
                             const CallOptions& call = {});
  // AllGather: output (size() * count) gets every rank's input (count) in rank order.
  absl::Status AllGather(ConstBufferView input, BufferView output, const CallOptions& call = {});
  // Broadcast: every rank's output gets root's input; non-root inputs are ignored
  // (pass the output itself, or an empty view).
  absl::Status Broadcast(ConstBufferView input, BufferView output, int root,
                         const CallOptions& call = {});
  // Reduce: root's output gets op over ranks of input; other ranks' outputs are not
  // touched (they may be empty).
  absl::Status Reduce(ConstBufferView input, BufferView output, ReduceOp op, int root,
                      const CallOptions& call = {});
  // AllToAll: block j (count elements) of input goes to rank j, block i of output
  // comes from rank i.
  absl::Status AllToAll(ConstBufferView input, BufferView output, const CallOptions& call = {});
  // AllToAllV: as AllToAll with per-rank element counts, packed in rank order.
  absl::Status AllToAllV(ConstBufferView input, absl::Span<const size_t> send_counts,
                         BufferView output, absl::Span<const size_t> recv_counts,
                         const CallOptions& call = {});
  // Gather: root's output (size() * count) gets every rank's input in rank order.
  absl::Status Gather(ConstBufferView input, BufferView output, int root,
                      const CallOptions& call = {});
  // Scatter: rank i's output gets block i of root's input (size() * count).
  absl::Status Scatter(ConstBufferView input, BufferView output, int root,
                       const CallOptions& call = {});
  // Barrier returns once every rank has entered it.
  absl::Status Barrier(const CallOptions& call = {});
  // Send / Recv: point-to-point, matched in order per pair of ranks; sizes must match.
  absl::Status Send(ConstBufferView data, int peer, const CallOptions& call = {});
  absl::Status Recv(BufferView data, int peer, const CallOptions& call = {});

  // Typed in-place conveniences.
  template <typename T>
  absl::Status AllReduce(absl::Span<T> data, ReduceOp op, const CallOptions& call = {}) {
    return AllReduce(ConstBufferView::Of(data), BufferView::Of(data), op, call);
  }
  template <typename T>
  absl::Status Broadcast(absl::Span<T> data, int root, const CallOptions& call = {}) {
    return Broadcast(ConstBufferView::Of(data), BufferView::Of(data), root, call);
  }

  // Split returns the communicator of the group `ranks` (ranks of this communicator,
  // in the order that numbers the new one; must contain rank()). Every member of a
  // group calls Split with the same list, and every rank of this communicator calls
  // Split the same number of times in the same order (groups are usually a mesh's:
  // each rank passes its own group). No messages are exchanged. InvalidArgument for
  // a bad list.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(absl::Span<const int> ranks) const;
  absl::StatusOr<std::unique_ptr<Communicator>> Split(absl::Span<const int64_t> ranks) const;
  // SplitByMesh splits along `dims` of `mesh` ("tp", "dp-cp", ...), whose world
  // size must equal size(): the group of rank() that varies only those dims.
  absl::StatusOr<std::unique_ptr<Communicator>> SplitByMesh(const Mesh& mesh,
                                                            absl::string_view dims) const;

  // Explain returns the selector's choice for a call of `kind` moving `bytes` per
  // rank (see CostModel::Predict for what bytes means per kind), with the predicted
  // time of every candidate.
  Explanation Explain(CollectiveKind kind, size_t bytes) const;
  // SetCostModel replaces the selector's model (AutoCalibrate installs a measured
  // one) and forgets the choices made so far; later splits inherit it. Call it while
  // no other thread calls or explains on this communicator, and on every rank with
  // the same model, as options.cost_model is given.
  void SetCostModel(CostModel model);
  // NodeOrder: the ranks node by node, as the algorithms number them (NodeOrder()[i]
  // is the rank the algorithms call i): 0, 1, ..., size()-1 unless
  // options().node_of_rank puts ranks of one node apart.
  const std::vector<int>& NodeOrder() const { return node_order_; }
  // HasNative returns whether the transport has collectives of its own, so that
  // Algorithm::kNative can run (MPI, NCCL; not inproc, shm or a split's group).
  bool HasNative() const;
  // TransportName returns the transport's name ("mpi", "gloo", "shm", ...).
  std::string TransportName() const;

  // Counters returns this communicator's counters of one collective (kSendRecv for
  // Send and Recv).
  CollectiveCounters Counters(CollectiveKind kind) const;
  // FlightRecorderSnapshot returns the recorded calls, oldest first.
  std::vector<FlightRecord> FlightRecorderSnapshot() const { return recorder_.Snapshot(); }

 private:
  struct Call;

  // Make resolves options.node_of_rank (internal/node_order.h), checks the node
  // transport against it and builds the communicator; Create and Split end in it.
  static absl::StatusOr<std::unique_ptr<Communicator>> Make(std::shared_ptr<Transport> transport,
                                                            CommunicatorOptions options,
                                                            uint64_t id);
  Communicator(std::shared_ptr<Transport> transport, CommunicatorOptions options, uint64_t id,
               std::vector<int> node_order, std::shared_ptr<Transport> algorithm_transport);
  absl::Status Run(Call& call);
  absl::Status Execute(const Call& call, const collectives_internal::CallContext& ctx);
  // ExecuteWithHello: Execute, with the rooted calls' extra message (communicator.cc).
  absl::Status ExecuteWithHello(const Call& call, const collectives_internal::CallContext& ctx);
  absl::Status CheckFingerprints(const Call& call, const collectives_internal::CallContext& ctx);
  absl::Status ExecuteReduction(const Call& call, const collectives_internal::CallContext& ctx);
  absl::Status ExecuteDeterministic(const Call& call, Algorithm algorithm,
                                    const collectives_internal::CallContext& ctx,
                                    const collectives_internal::CollectiveArgs& args);
  Algorithm Choose(const Call& call);
  // AbortTransports aborts the transport and the node transport (if any) with `status`.
  void AbortTransports(const absl::Status& status);
  absl::Status PointToPoint(bool send, std::byte* data, size_t count, DType dtype, int peer,
                            const CallOptions& call);

  // RunInNodeOrder: call.fn on `args` (in the caller's numbering) over the
  // algorithms' numbering (internal/node_order.h).
  absl::Status RunInNodeOrder(const Call& call, const collectives_internal::CallContext& ctx,
                              const collectives_internal::CollectiveArgs& args);
  bool renumbered() const { return algorithm_transport_ != nullptr; }

  CommunicatorOptions options_;  // cost_model changes by SetCostModel only
  const uint64_t id_;  // 24 bits: the top of every tag
  // The default deadline budget of a call, CoarseResolution() + options_.timeout, in
  // nanoseconds (see Run).
  const int64_t default_budget_nanos_;
  std::shared_ptr<Transport> transport_;
  // The ranks node by node, and each rank's place in that order (its inverse).
  std::vector<int> node_order_, node_position_;
  // transport_ renumbered into node_order_ (a GroupTransport view); null where
  // node_order_ is the identity.
  std::shared_ptr<Transport> algorithm_transport_;
  std::unique_ptr<collectives_internal::CallCounters[]> counters_;  // by CollectiveKind
  std::unique_ptr<collectives_internal::Scratch> scratch_;
  FlightRecorder recorder_;
  uint64_t next_seq_ = 0;
  mutable uint64_t splits_ = 0;
  // The selector's choices and their implementations, remembered (internal/algorithm_cache.h).
  std::unique_ptr<collectives_internal::AlgorithmCache> algorithms_;
  absl::Status broken_;
  std::vector<uint64_t> sends_to_, receives_from_;  // point-to-point sequence per peer
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_COMMUNICATOR_H_
