#include "collectives/communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "collectives/algorithm_registry.h"
#include "collectives/direct.h"
#include "collectives/group_transport.h"
#include "collectives/internal/algorithm_cache.h"
#include "collectives/internal/call_context.h"
#include "collectives/internal/node_order.h"
#include "collectives/reduce/reduce_kernels.h"
#include "collectives/ring.h"
#include "core/clock.h"
#include "core/status_macros.h"

namespace loom {

using collectives_internal::AlgorithmCache;
using collectives_internal::CallContext;
using collectives_internal::CallCounters;
using collectives_internal::CollectiveArgs;
using collectives_internal::kMaxSteps;
using collectives_internal::SameMemory;
using collectives_internal::Scratch;

namespace {

// Tag layout: [63..40] communicator id, [39..24] call sequence number (0xFFFF is
// point-to-point), [23..16] zero, [15..0] algorithm step. The call's arguments are
// not in the tag but in every message's stamp (see Run).
constexpr int kIdShift = 40;
// Every Communicator tag has a non-zero id above kIdShift: the range transport.h leaves to
// Communicators (users of raw tags reserve below it).
static_assert((Tag{1} << kIdShift) == kCommunicatorTagsBegin);
constexpr int kSeqShift = 24;
constexpr uint64_t kIdMask = (uint64_t{1} << 24) - 1;
constexpr uint64_t kSeqModulus = 0xFFFF;
constexpr uint64_t kPointToPointSeq = 0xFFFF;
// The fingerprint exchange of the full check uses the last step of a call.
constexpr uint32_t kFingerprintStep = kMaxSteps - 1;
// The hello of a rooted call (see RootedHello) the one before it.
constexpr uint32_t kHelloStep = kMaxSteps - 2;
// Scratch slots of the communicator's own working buffers (algorithms use low ones).
constexpr int kWideInputSlot = 60;
constexpr int kWideOutputSlot = 61;
constexpr int kFingerprintSlot = 62;

constexpr size_t kCounterKinds = static_cast<size_t>(CollectiveKind::kSendRecv) + 1;

// DeadlineBudgetNanos: how long after the coarse clock's reading at its start a call
// with `timeout` may run. The tick added makes up for the coarse clock's lag. In
// int64 nanoseconds because absl::Time arithmetic is out of line (core/clock.h).
int64_t DeadlineBudgetNanos(absl::Duration timeout) {
  return absl::ToInt64Nanoseconds(CoarseResolution() + timeout);
}

// Mix folds values into a hash that is the same in every process. (absl::Hash is
// seeded per process, so ranks in different processes would disagree.)
uint64_t Mix(uint64_t hash, uint64_t value) {
  uint64_t z = hash ^ (value + 0x9E3779B97F4A7C15ull + (hash << 6) + (hash >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

bool IsReduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

bool IsHalf(DType dtype) { return dtype == DType::kF16 || dtype == DType::kBF16; }

bool BreaksStreams(absl::StatusCode code) {
  return code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kAborted || code == absl::StatusCode::kInternal ||
         code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kCancelled;
}

// The full fingerprint of a call: in every message's stamp, and exchanged before the
// call under check = kFull.
struct Fingerprint {
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t root = -1;
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t algorithm = 0;

  bool operator==(const Fingerprint& other) const {
    return seq == other.seq && count == other.count && root == other.root && kind == other.kind &&
           dtype == other.dtype && op == other.op && algorithm == other.algorithm;
  }
  // The stamp's words: the count, and the small fields packed into one word (two
  // stores, not six, on the latency path of every call).
  void Stamp(uint64_t words[2]) const {
    words[0] = count;
    words[1] = uint64_t{static_cast<uint32_t>(root)} | uint64_t{kind} << 32 |
               uint64_t{dtype} << 40 | uint64_t{op} << 48 | uint64_t{algorithm} << 56;
  }
  static Fingerprint FromStamp(uint64_t call_seq, const uint64_t words[2]) {
    Fingerprint f;
    f.seq = call_seq;
    f.count = words[0];
    f.root = static_cast<int32_t>(static_cast<uint32_t>(words[1]));
    f.kind = static_cast<uint8_t>(words[1] >> 32);
    f.dtype = static_cast<uint8_t>(words[1] >> 40);
    f.op = static_cast<uint8_t>(words[1] >> 48);
    f.algorithm = static_cast<uint8_t>(words[1] >> 56);
    return f;
  }
  std::string ToString() const {
    const CollectiveKind k = static_cast<CollectiveKind>(kind);
    std::string out = absl::StrCat("call #", seq, " ", CollectiveKindName(k), "(",
                                   DTypeName(static_cast<DType>(dtype)), ", count=", count);
    if (IsReduction(k)) absl::StrAppend(&out, ", ", ReduceOpName(static_cast<ReduceOp>(op)));
    if (root >= 0) absl::StrAppend(&out, ", root=", root);
    absl::StrAppend(&out, ", ", AlgorithmName(static_cast<Algorithm>(algorithm)), ")");
    return out;
  }
};
static_assert(std::is_trivially_copyable_v<Fingerprint>);

// InPlaceBlock: `block` is block `index` (block.size() elements) of `whole`, the
// in-place form of reduce-scatter and all-gather.
bool InPlaceBlock(ConstBufferView whole, ConstBufferView block, int index) {
  return whole.data() != nullptr &&
         block.data() == whole.data() + static_cast<size_t>(index) * block.size_bytes();
}

// Overlap: the two views share memory.
bool Overlap(ConstBufferView a, ConstBufferView b) {
  if (a.size_bytes() == 0 || b.size_bytes() == 0) return false;
  return a.data() < b.data() + b.size_bytes() && b.data() < a.data() + a.size_bytes();
}

absl::Status SizeError(CollectiveKind kind, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind), ": ", what));
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status DTypeError(CollectiveKind kind,
                                                                   ConstBufferView input,
                                                                   ConstBufferView output) {
  return SizeError(kind, absl::StrCat("input is ", DTypeName(input.dtype()), " but output is ",
                                      DTypeName(output.dtype())));
}

absl::Status CheckSameDType(CollectiveKind kind, ConstBufferView input, ConstBufferView output) {
  if (input.dtype() != output.dtype()) return DTypeError(kind, input, output);
  return absl::OkStatus();
}

}  // namespace

struct Communicator::Call {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kU8;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  size_t count = 0;
  ConstBufferView input;
  BufferView output;
  absl::Span<const size_t> send_counts;
  absl::Span<const size_t> recv_counts;
  CallOptions options;
  Algorithm algorithm = Algorithm::kAuto;  // resolved by Run
  AlgorithmFn fn = nullptr;                // algorithm's implementation, found by Run
};

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(
    std::shared_ptr<Transport> transport, CommunicatorOptions options) {
  if (transport == nullptr) return absl::InvalidArgumentError("communicator over a null transport");
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout ", absl::FormatDuration(options.timeout), " is not positive"));
  }
  if (options.ranks_per_node < 0 ||
      (options.ranks_per_node > 0 && transport->size() % options.ranks_per_node != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("ranks_per_node ", options.ranks_per_node,
                                                   " does not divide the group of ",
                                                   transport->size()));
  }
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("chunk_bytes 0");
  return Make(std::move(transport), std::move(options), 1);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Make(
    std::shared_ptr<Transport> transport, CommunicatorOptions options, uint64_t id) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int> order,
                        collectives_internal::ResolveNodeOrder(transport->size(), &options));
  std::shared_ptr<Transport> algorithm_transport;
  if (!std::is_sorted(order.begin(), order.end())) {
    LOOM_ASSIGN_OR_RETURN(algorithm_transport, GroupTransport::Create(transport, order));
  }
  if (options.node_transport != nullptr) {
    const int k = options.ranks_per_node;
    if (k <= 0 && !options.node_of_rank.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node_transport needs nodes of equal sizes, but node_of_rank [",
          absl::StrJoin(options.node_of_rank, ","), "] has nodes of different sizes"));
    }
    // This rank's place among its node's ranks (rank % k in blocks).
    const int place = algorithm_transport != nullptr ? algorithm_transport->rank() : transport->rank();
    const int expected_rank = k > 0 ? place % k : 0;
    if (k <= 0 || options.node_transport->size() != k ||
        options.node_transport->rank() != expected_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node_transport of rank ", options.node_transport->rank(), " in ",
          options.node_transport->size(), " does not fit rank ", transport->rank(), " at ",
          k, " ranks per node (it must be rank ", expected_rank, " in ", k, ")"));
    }
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(transport), std::move(options),
                                                        id, std::move(order),
                                                        std::move(algorithm_transport)));
}

Communicator::Communicator(std::shared_ptr<Transport> transport, CommunicatorOptions options,
                           uint64_t id, std::vector<int> node_order,
                           std::shared_ptr<Transport> algorithm_transport)
    : options_(std::move(options)),
      id_(id & kIdMask),
      default_budget_nanos_(DeadlineBudgetNanos(options_.timeout)),
      transport_(std::move(transport)),
      node_order_(std::move(node_order)),
      node_position_(node_order_.size()),
      algorithm_transport_(std::move(algorithm_transport)),
      counters_(std::make_unique<CallCounters[]>(kCounterKinds)),
      scratch_(std::make_unique<Scratch>(transport_.get())),
      recorder_(options_.flight_recorder_capacity),
      algorithms_(std::make_unique<AlgorithmCache>()),
      sends_to_(transport_->size(), 0),
      receives_from_(transport_->size(), 0) {
  for (size_t i = 0; i < node_order_.size(); ++i) node_position_[node_order_[i]] = static_cast<int>(i);
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return transport_->rank(); }
int Communicator::size() const { return transport_->size(); }

absl::StatusOr<CommBuffer> Communicator::AllocateBuffer(size_t bytes) const {
  return transport_->AllocateBuffer(bytes);
}

bool Communicator::HasNative() const { return transport_->native() != nullptr; }

std::string Communicator::TransportName() const { return transport_->name(); }

Explanation Communicator::Explain(CollectiveKind kind, size_t bytes) const {
  // The engine's own collectives compete where the transport has them and no
  // reduction order is promised.
  const bool allow_native = HasNative() && !options_.deterministic;
  return options_.cost_model.Explain(kind, bytes, size(), options_.ranks_per_node, allow_native);
}

void Communicator::SetCostModel(CostModel model) {
  options_.cost_model = std::move(model);
  algorithms_ = std::make_unique<AlgorithmCache>();
}

CollectiveCounters Communicator::Counters(CollectiveKind kind) const {
  const CallCounters& c = counters_[static_cast<size_t>(kind)];
  CollectiveCounters out;
  out.calls = c.calls.load(std::memory_order_relaxed);
  out.failed_calls = c.failed_calls.load(std::memory_order_relaxed);
  out.bytes_sent = c.bytes_sent.load(std::memory_order_relaxed);
  out.bytes_received = c.bytes_received.load(std::memory_order_relaxed);
  return out;
}

Algorithm Communicator::Choose(const Call& call) {
  if (call.options.algorithm != Algorithm::kAuto) return call.options.algorithm;
  const size_t n = static_cast<size_t>(size());
  // Reductions of 16-bit floats travel as f32.
  const size_t width = IsReduction(call.kind) && IsHalf(call.dtype) ? 4 : DTypeSize(call.dtype);
  size_t bytes = call.count * width;
  switch (call.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter: bytes *= n; break;
    case CollectiveKind::kAllToAllV:
      bytes = std::accumulate(call.send_counts.begin(), call.send_counts.end(), size_t{0}) * width;
      break;
    default: break;
  }
  return algorithms_->Choose(call.kind, bytes, [&] { return Explain(call.kind, bytes).chosen; });
}

namespace {

// RootedHello: the one message a rooted call adds, so that every rank of it both sends
// and receives (for 2 ranks, to and from each other): a rank that only sends could
// finish, and one that only receives wait forever, beside a peer in another call.
// Broadcast and scatter: the rank after the root sends it to the root; reduce and
// gather: the root sends it to the rank after it. Empty and stamped like the call.
struct RootedHello {
  bool send = false;
  bool receive = false;
  int peer = -1;
};

RootedHello HelloOf(CollectiveKind kind, int root, int rank, int size) {
  RootedHello hello;
  if (size < 2 || root < 0) return hello;
  const bool to_root = kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kScatter;
  const bool from_root = kind == CollectiveKind::kReduce || kind == CollectiveKind::kGather;
  if (!to_root && !from_root) return hello;
  const int next = (root + 1) % size;
  if (rank == root) {
    hello.peer = next;
    (to_root ? hello.receive : hello.send) = true;
  } else if (rank == next) {
    hello.peer = root;
    (to_root ? hello.send : hello.receive) = true;
  }
  return hello;
}

// NameMismatchedCalls turns a transport's stamp mismatch into the communicator's
// error naming both calls. One side of the mismatch carries this rank's stamp, the
// other the peer's (ranks as the transport numbers them: a split's parent ranks).
absl::Status NameMismatchedCalls(int rank, const Fingerprint& mine,
                                 const StampMismatch& mismatch) {
  uint64_t my_words[2];
  mine.Stamp(my_words);
  const bool they_sent =
      mismatch.sent.words[0] != my_words[0] || mismatch.sent.words[1] != my_words[1];
  const int peer = they_sent ? mismatch.sender : mismatch.receiver;
  const Fingerprint theirs =
      Fingerprint::FromStamp(mine.seq, they_sent ? mismatch.sent.words : mismatch.expected.words);
  return absl::FailedPreconditionError(absl::StrCat(
      "mismatched collective calls: rank ", rank, " called ", mine.ToString(), " but rank ", peer,
      " called ", theirs.ToString()));
}

}  // namespace

absl::Status Communicator::Run(Call& call) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("communicator of rank ", rank(), " failed earlier and cannot be used: ",
                     broken_.message()));
  }
  call.algorithm = Choose(call);
  if (call.algorithm == Algorithm::kNative && options_.deterministic) {
    return absl::InvalidArgumentError(
        "algorithm native with deterministic = true: the transport's own collectives promise no "
        "reduction order");
  }
  LOOM_ASSIGN_OR_RETURN(call.fn, algorithms_->Find(call.kind, call.algorithm));

  const uint64_t seq = next_seq_++;
  Fingerprint fingerprint;
  fingerprint.seq = seq;
  fingerprint.count = call.count;
  fingerprint.root = call.root;
  fingerprint.kind = static_cast<uint8_t>(call.kind);
  fingerprint.dtype = static_cast<uint8_t>(call.dtype);
  fingerprint.op = static_cast<uint8_t>(IsReduction(call.kind) ? call.op : ReduceOp::kSum);
  fingerprint.algorithm = static_cast<uint8_t>(call.algorithm);

  const int64_t budget = call.options.timeout > absl::ZeroDuration()
                             ? DeadlineBudgetNanos(call.options.timeout)
                             : default_budget_nanos_;
  CallCounters& counters = counters_[static_cast<size_t>(call.kind)];
  CallContext ctx;
  ctx.transport = transport_.get();
  ctx.counters = &counters;
  ctx.tag_base = (id_ << kIdShift) | ((seq % kSeqModulus) << kSeqShift);
  // The scope names the call among this communicator's (one more than the tag's call
  // bits, so never 0); the words name its arguments. A peer in another call with the
  // same sequence number carries other words, and the transport fails both at once.
  ctx.stamp.scope = (ctx.tag_base >> kSeqShift) + 1;
  fingerprint.Stamp(ctx.stamp.words);
  // One coarse clock read (7 ns, against 24 for the precise one) serves the deadline
  // and the flight record.
  const int64_t start = CoarseNowNanos();
  ctx.deadline = DeadlineAfterNanos(start, budget);
  ctx.chunk_bytes = options_.chunk_bytes;
  ctx.scratch = scratch_.get();
  ctx.ranks_per_node = options_.ranks_per_node;
  ctx.node_transport = options_.node_transport.get();
  if (const CostModel& model = options_.cost_model; model.constants_given()) {
    // The same model on every rank (the selector's choices depend on it alike), so
    // the same path: the trees size their window from it.
    const CostModel::Constants& c = model.constants();
    ctx.agreed_path.round_trip = absl::Seconds(2 * c.inter_node_alpha);
    ctx.agreed_path.bytes_per_second = 1 / c.inter_node_beta;
  }

  FlightRecord record;
  record.seq = seq;
  record.kind = call.kind;
  record.dtype = call.dtype;
  record.count = call.count;
  record.peer = call.root;
  record.algorithm = call.algorithm;
  const uint64_t handle = recorder_.Begin(record, start);
  CallCounters::Add(counters.calls, 1);

  absl::Status status;
  bool stamp_mismatch = false;
  if (options_.check == CommunicatorOptions::Check::kFull) {
    status = CheckFingerprints(call, ctx);
  }
  if (status.ok()) status = ExecuteWithHello(call, ctx);
  if (!status.ok()) {
    if (const std::optional<StampMismatch> mismatch = StampMismatchOf(status)) {
      status = NameMismatchedCalls(rank(), fingerprint, *mismatch);
      stamp_mismatch = true;
    }
  }
  recorder_.End(handle, status);
  if (status.ok()) return status;

  CallCounters::Add(counters.failed_calls, 1);
  // The full check's mismatch is seen by every rank before any data moves, so the
  // streams stay in step; anything else mid-call (a stamp mismatch included: the
  // call's other messages are left behind) may leave them out of step.
  const bool fingerprint_mismatch =
      status.code() == absl::StatusCode::kFailedPrecondition &&
      absl::StrContains(status.message(), "mismatched collective calls (full check)");
  if (fingerprint_mismatch || !BreaksStreams(status.code())) return status;
  broken_ = status;
  // Tell the peers at once: ranks waiting on this one fail now, naming it, instead
  // of at their deadlines. Not after a stamp mismatch between two ranks: there the
  // peer finds it too (in every call each rank sends to and receives from the
  // other), and an abort that reached it first would turn its FailedPrecondition
  // into Unavailable. With more ranks, those away from the mismatch need the abort.
  if (!stamp_mismatch || size() > 2) AbortTransports(status);
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), "\nrank ", rank(), " of ", size(),
                                   " flight recorder, ", recorder_.Format(16)));
}

void Communicator::AbortTransports(const absl::Status& status) {
  transport_->Abort(status);
  if (options_.node_transport != nullptr) options_.node_transport->Abort(status);
}

absl::Status Communicator::CheckFingerprints(const Call& call, const CallContext& call_ctx) {
  // Unstamped: these messages compare fingerprints themselves, and must arrive.
  CallContext ctx = call_ctx;
  ctx.stamp = Stamp{};
  Fingerprint mine;
  mine.seq = (ctx.tag_base >> kSeqShift) & 0xFFFF;
  mine.count = call.count;
  mine.root = call.root;
  mine.kind = static_cast<uint8_t>(call.kind);
  mine.dtype = static_cast<uint8_t>(call.dtype);
  mine.op = static_cast<uint8_t>(IsReduction(call.kind) ? call.op : ReduceOp::kSum);
  mine.algorithm = static_cast<uint8_t>(call.algorithm);
  const int n = size();
  LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> theirs,
                        ctx.scratch->Get(kFingerprintSlot, n * sizeof(Fingerprint)));
  std::vector<Request> requests;
  requests.reserve(2 * n);
  absl::Status posted;
  for (int peer = 0; peer < n && posted.ok(); ++peer) {
    absl::StatusOr<Request> r = collectives_internal::PostRecv(
        ctx, kFingerprintStep, peer,
        BufferView(theirs.data() + peer * sizeof(Fingerprint), sizeof(Fingerprint), DType::kU8));
    if (!r.ok()) { posted = r.status(); break; }
    requests.push_back(*r);
    absl::StatusOr<Request> s = collectives_internal::PostSend(
        ctx, kFingerprintStep, peer,
        ConstBufferView(reinterpret_cast<const std::byte*>(&mine), sizeof(mine), DType::kU8));
    if (!s.ok()) { posted = s.status(); break; }
    requests.push_back(*s);
  }
  const absl::Status waited = ctx.transport->Wait(requests, ctx.deadline);
  LOOM_RETURN_IF_ERROR(posted);
  LOOM_RETURN_IF_ERROR(waited);
  for (int peer = 0; peer < n; ++peer) {
    Fingerprint other;
    std::memcpy(&other, theirs.data() + peer * sizeof(Fingerprint), sizeof(other));
    if (!(other == mine)) {
      return absl::FailedPreconditionError(
          absl::StrCat("mismatched collective calls (full check): rank ", rank(), " called ",
                       mine.ToString(), " but rank ", peer, " called ", other.ToString()));
    }
  }
  return absl::OkStatus();
}

absl::Status Communicator::ExecuteWithHello(const Call& call, const CallContext& ctx) {
  const RootedHello hello = HelloOf(call.kind, call.root, rank(), size());
  if (!hello.send && !hello.receive) return Execute(call, ctx);
  absl::StatusOr<Request> posted =
      hello.send ? collectives_internal::PostSend(ctx, kHelloStep, hello.peer, ConstBufferView())
                 : collectives_internal::PostRecv(ctx, kHelloStep, hello.peer, BufferView());
  LOOM_RETURN_IF_ERROR(posted.status());
  const absl::Status executed = Execute(call, ctx);
  // After a failure the hello is not waited for: a past deadline withdraws it.
  const absl::Status waited =
      ctx.transport->Wait({*posted}, executed.ok() ? ctx.deadline : absl::InfinitePast());
  return executed.ok() ? waited : executed;
}

absl::Status Communicator::Execute(const Call& call, const CallContext& ctx) {
  if (IsReduction(call.kind)) return ExecuteReduction(call, ctx);
  CollectiveArgs args;
  args.kind = call.kind;
  args.root = call.root;
  args.count = call.count;
  args.input = call.input;
  args.output = call.output;
  args.send_counts = call.send_counts;
  args.recv_counts = call.recv_counts;
  // The transport's own collectives keep the caller's numbering (MPI places ranks itself).
  if (renumbered() && call.algorithm != Algorithm::kNative) return RunInNodeOrder(call, ctx, args);
  return call.fn(ctx, args);
}

absl::Status Communicator::RunInNodeOrder(const Call& call, const CallContext& ctx,
                                          const CollectiveArgs& args) {
  CallContext in_order = ctx;
  in_order.transport = algorithm_transport_.get();
  return collectives_internal::RunInNodeOrder(call.fn, in_order, node_order_, node_position_,
                                              args);
}

absl::Status Communicator::ExecuteReduction(const Call& call, const CallContext& ctx) {
  CollectiveArgs args;
  args.kind = call.kind;
  args.root = call.root;
  args.count = call.count;
  args.op = call.op == ReduceOp::kAvg ? ReduceOp::kSum : call.op;
  args.input = call.input;
  args.output = call.output;
  const bool half = IsHalf(call.dtype);
  if (half) {
    // Widen to f32 so partial results round once, at the end.
    LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> wide_in,
                          ctx.scratch->Get(kWideInputSlot, call.input.size() * sizeof(float)));
    const absl::Span<float> in_f32(reinterpret_cast<float*>(wide_in.data()), call.input.size());
    LOOM_RETURN_IF_ERROR(LoadAccumulator(call.input, in_f32));
    args.input = ConstBufferView::Of(in_f32);
    if (SameMemory(call.input, call.output) && call.input.size() == call.output.size()) {
      args.output = BufferView::Of(in_f32);
    } else if (call.kind == CollectiveKind::kReduceScatter &&
               InPlaceBlock(call.input, call.output, rank())) {
      // In place reduce-scatter: output is this rank's block of input.
      args.output = BufferView::Of(in_f32.subspan(call.count * rank(), call.count));
    } else {
      LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> wide_out,
                            ctx.scratch->Get(kWideOutputSlot, call.output.size() * sizeof(float)));
      args.output = BufferView::Of(
          absl::Span<float>(reinterpret_cast<float*>(wide_out.data()), call.output.size()));
    }
  }
  if (options_.deterministic) {
    // Folds in the caller's rank order, as promised: not renumbered, and so without
    // the node layout, which is in the algorithms' order (the rank-order blocks use
    // neither today).
    CallContext in_caller_order = ctx;
    if (renumbered()) {
      in_caller_order.ranks_per_node = 0;
      in_caller_order.node_transport = nullptr;
    }
    LOOM_RETURN_IF_ERROR(ExecuteDeterministic(call, call.algorithm, in_caller_order, args));
  } else if (renumbered() && call.algorithm != Algorithm::kNative) {
    LOOM_RETURN_IF_ERROR(RunInNodeOrder(call, ctx, args));
  } else {
    LOOM_RETURN_IF_ERROR(call.fn(ctx, args));
  }
  const bool has_output = call.kind != CollectiveKind::kReduce || rank() == call.root;
  if (!has_output) return absl::OkStatus();
  const int64_t divisor = call.op == ReduceOp::kAvg ? size() : 1;
  if (half) {
    const absl::Span<const float> result(reinterpret_cast<const float*>(args.output.data()),
                                         call.output.size());
    return StoreAccumulator(result, divisor, call.output);
  }
  if (divisor != 1) return FinishAverage(call.output, divisor);
  return absl::OkStatus();
}

absl::Status Communicator::ExecuteDeterministic(const Call& call, Algorithm algorithm,
                                                const CallContext& ctx,
                                                const CollectiveArgs& args) {
  using namespace collectives_internal;  // NOLINT: the rank-order building blocks
  switch (call.kind) {
    case CollectiveKind::kAllReduce: {
      // Reduce each block in rank order at its owner, then move the finished
      // blocks with the chosen algorithm family: copies cannot change bits.
      LOOM_RETURN_IF_ERROR(DirectReduceScatterBlocks(ctx, args.op, args.input, args.output));
      CallContext gather_ctx = ctx;
      gather_ctx.tag_base = ctx.tag_base + kMaxSteps / 2;
      return algorithm == Algorithm::kDirect ? DirectAllGatherBlocks(gather_ctx, args.output)
                                             : RingAllGatherBlocks(gather_ctx, args.output);
    }
    case CollectiveKind::kReduceScatter: return DirectReduceScatter(ctx, args);
    case CollectiveKind::kReduce: return DirectReduce(ctx, args);
    default: break;
  }
  return absl::InternalError(absl::StrCat("no deterministic ", CollectiveKindName(call.kind)));
}

// --- The public calls: validate locally, then Run.

absl::Status Communicator::AllReduce(ConstBufferView input, BufferView output, ReduceOp op,
                                     const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kAllReduce;
  LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
  if (input.size() != output.size()) {
    return SizeError(kind, absl::StrCat("input has ", input.size(), " elements, output ",
                                        output.size()));
  }
  Call call{kind, input.dtype(), op, -1, input.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::ReduceScatter(ConstBufferView input, BufferView output, ReduceOp op,
                                         const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kReduceScatter;
  LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
  if (input.size() != output.size() * size()) {
    return SizeError(kind, absl::StrCat("input has ", input.size(), " elements; want ", size(),
                                        " ranks x output ", output.size()));
  }
  if (Overlap(input, output) && !InPlaceBlock(input, output, rank())) {
    return SizeError(kind, absl::StrCat("output overlaps input but is not block ", rank(),
                                        " of it (in place, output = input + rank * count)"));
  }
  Call call{kind, input.dtype(), op, -1, output.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::AllGather(ConstBufferView input, BufferView output,
                                     const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kAllGather;
  LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
  if (output.size() != input.size() * size()) {
    return SizeError(kind, absl::StrCat("output has ", output.size(), " elements; want ", size(),
                                        " ranks x input ", input.size()));
  }
  if (Overlap(input, output) && !InPlaceBlock(output, input, rank())) {
    return SizeError(kind, absl::StrCat("input overlaps output but is not block ", rank(),
                                        " of it (in place, input = output + rank * count)"));
  }
  Call call{kind, input.dtype(), ReduceOp::kSum, -1, input.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::Broadcast(ConstBufferView input, BufferView output, int root,
                                     const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kBroadcast;
  if (root < 0 || root >= size()) {
    return SizeError(kind, absl::StrCat("root ", root, " is not a rank of ", size()));
  }
  if (rank() == root) {
    LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
    if (input.size() != output.size()) {
      return SizeError(kind, absl::StrCat("root's input has ", input.size(), " elements, output ",
                                          output.size()));
    }
  } else {
    input = ConstBufferView(nullptr, 0, output.dtype());
  }
  Call call{kind, output.dtype(), ReduceOp::kSum, root, output.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::Reduce(ConstBufferView input, BufferView output, ReduceOp op, int root,
                                  const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kReduce;
  if (root < 0 || root >= size()) {
    return SizeError(kind, absl::StrCat("root ", root, " is not a rank of ", size()));
  }
  if (rank() == root) {
    LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
    if (input.size() != output.size()) {
      return SizeError(kind, absl::StrCat("input has ", input.size(), " elements, root's output ",
                                          output.size()));
    }
  } else {
    output = BufferView(nullptr, 0, input.dtype());
  }
  Call call{kind, input.dtype(), op, root, input.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::AllToAll(ConstBufferView input, BufferView output,
                                    const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kAllToAll;
  LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
  if (input.size() != output.size() || input.size() % size() != 0) {
    return SizeError(kind, absl::StrCat("input has ", input.size(), " elements and output ",
                                        output.size(), "; both must be ", size(),
                                        " ranks x count"));
  }
  if (SameMemory(input, output) && input.size() > 0) {
    return SizeError(kind, "input and output must not be the same memory");
  }
  Call call{kind, input.dtype(), ReduceOp::kSum, -1, input.size() / size(), input, output, {}, {},
            options};
  return Run(call);
}

absl::Status Communicator::AllToAllV(ConstBufferView input, absl::Span<const size_t> send_counts,
                                     BufferView output, absl::Span<const size_t> recv_counts,
                                     const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kAllToAllV;
  LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
  const size_t n = static_cast<size_t>(size());
  if (send_counts.size() != n || recv_counts.size() != n) {
    return SizeError(kind, absl::StrCat(send_counts.size(), " send counts and ", recv_counts.size(),
                                        " receive counts for ", n, " ranks"));
  }
  const size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), size_t{0});
  const size_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0});
  if (sent != input.size() || received != output.size()) {
    return SizeError(kind, absl::StrCat("send counts add up to ", sent, " for an input of ",
                                        input.size(), "; receive counts to ", received,
                                        " for an output of ", output.size()));
  }
  if (SameMemory(input, output) && input.size() > 0) {
    return SizeError(kind, "input and output must not be the same memory");
  }
  Call call{kind, input.dtype(), ReduceOp::kSum, -1, n, input, output, send_counts, recv_counts,
            options};
  return Run(call);
}

absl::Status Communicator::Gather(ConstBufferView input, BufferView output, int root,
                                  const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kGather;
  if (root < 0 || root >= size()) {
    return SizeError(kind, absl::StrCat("root ", root, " is not a rank of ", size()));
  }
  if (rank() == root) {
    LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
    if (output.size() != input.size() * size()) {
      return SizeError(kind, absl::StrCat("root's output has ", output.size(), " elements; want ",
                                          size(), " ranks x input ", input.size()));
    }
  } else {
    output = BufferView(nullptr, 0, input.dtype());
  }
  Call call{kind, input.dtype(), ReduceOp::kSum, root, input.size(), input, output, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::Scatter(ConstBufferView input, BufferView output, int root,
                                   const CallOptions& options) {
  const CollectiveKind kind = CollectiveKind::kScatter;
  if (root < 0 || root >= size()) {
    return SizeError(kind, absl::StrCat("root ", root, " is not a rank of ", size()));
  }
  if (rank() == root) {
    LOOM_RETURN_IF_ERROR(CheckSameDType(kind, input, output));
    if (input.size() != output.size() * size()) {
      return SizeError(kind, absl::StrCat("root's input has ", input.size(), " elements; want ",
                                          size(), " ranks x output ", output.size()));
    }
  } else {
    input = ConstBufferView(nullptr, 0, output.dtype());
  }
  Call call{kind, output.dtype(), ReduceOp::kSum, root, output.size(), input, output, {}, {},
            options};
  return Run(call);
}

absl::Status Communicator::Barrier(const CallOptions& options) {
  Call call{CollectiveKind::kBarrier, DType::kU8, ReduceOp::kSum, -1, 0, {}, {}, {}, {}, options};
  return Run(call);
}

absl::Status Communicator::Send(ConstBufferView data, int peer, const CallOptions& options) {
  return PointToPoint(/*send=*/true, const_cast<std::byte*>(data.data()), data.size(), data.dtype(),
                      peer, options);
}

absl::Status Communicator::Recv(BufferView data, int peer, const CallOptions& options) {
  return PointToPoint(/*send=*/false, data.data(), data.size(), data.dtype(), peer, options);
}

absl::Status Communicator::PointToPoint(bool send, std::byte* data, size_t count, DType dtype,
                                        int peer, const CallOptions& options) {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(send ? "send to" : "receive from", " rank ",
                                                   peer, ", outside a group of ", size()));
  }
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("communicator of rank ", rank(), " failed earlier and cannot be used: ",
                     broken_.message()));
  }
  uint64_t& seq = send ? sends_to_[peer] : receives_from_[peer];
  const Tag tag = (id_ << kIdShift) | (kPointToPointSeq << kSeqShift) | (seq++ & 0xFFFFFF);
  const int64_t budget = options.timeout > absl::ZeroDuration()
                             ? DeadlineBudgetNanos(options.timeout)
                             : default_budget_nanos_;
  FlightRecord record;
  record.seq = seq - 1;
  record.kind = CollectiveKind::kSendRecv;
  record.dtype = dtype;
  record.count = count;
  record.peer = peer;
  const int64_t start = CoarseNowNanos();
  const uint64_t handle = recorder_.Begin(record, start);
  CallCounters& counters = counters_[static_cast<size_t>(CollectiveKind::kSendRecv)];
  CallCounters::Add(counters.calls, 1);
  const size_t bytes = count * DTypeSize(dtype);
  CallCounters::Add(send ? counters.bytes_sent : counters.bytes_received, bytes);
  absl::StatusOr<Request> request =
      send ? transport_->Send(peer, tag, absl::Span<const std::byte>(data, bytes))
           : transport_->Recv(peer, tag, absl::Span<std::byte>(data, bytes));
  absl::Status status = request.status();
  if (request.ok()) status = transport_->Wait({*request}, DeadlineAfterNanos(start, budget));
  recorder_.End(handle, status);
  if (status.ok()) return status;
  CallCounters::Add(counters.failed_calls, 1);
  if (!BreaksStreams(status.code())) return status;
  broken_ = status;
  AbortTransports(status);
  return absl::Status(status.code(), absl::StrCat(status.message(), "\nrank ", rank(), " of ",
                                                  size(), " flight recorder, ",
                                                  recorder_.Format(16)));
}

// --- Split.

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(
    absl::Span<const int64_t> ranks) const {
  std::vector<int> narrow;
  for (int64_t r : ranks) {
    if (r < 0 || r >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("split group names rank ", r,
                                                     ", outside a communicator of ", size()));
    }
    narrow.push_back(static_cast<int>(r));
  }
  return Split(absl::MakeConstSpan(narrow));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(absl::Span<const int> ranks) const {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GroupTransport> view, GroupTransport::Create(transport_, ranks));
  // The child's id must be equal on its members and differ from other live
  // communicators sharing a pair of ranks: mix the parent's id, how many splits
  // the parent made before (every rank splits in the same order) and the members.
  uint64_t id = Mix(id_, splits_++);
  for (int r : ranks) id = Mix(id, static_cast<uint64_t>(r));
  id &= kIdMask;
  if (id == 0 || id == id_) id = (id_ + 1) & kIdMask;
  CommunicatorOptions child = options_;
  // A child keeps the node layout of its members where they span two or more nodes
  // (renumbered node by node where they are not in that order already); with every
  // node holding as many members, that is its ranks_per_node (ResolveNodeOrder).
  child.ranks_per_node = 0;
  child.node_of_rank.clear();
  const int k = options_.ranks_per_node;
  if (!options_.node_of_rank.empty() || k > 0) {
    auto node_of = [&](int r) { return options_.node_of_rank.empty() ? r / k : options_.node_of_rank[r]; };
    bool two_nodes = false;
    for (int r : ranks) {
      child.node_of_rank.push_back(node_of(r));
      two_nodes = two_nodes || child.node_of_rank.back() != child.node_of_rank.front();
    }
    if (!two_nodes) child.node_of_rank.clear();
  }
  // The node transport connects whole nodes: a child keeps it only where its nodes
  // are whole nodes of the parent's, each rank at the same place in its node.
  child.node_transport = nullptr;
  std::vector<int> child_order;
  if (options_.node_transport != nullptr && !child.node_of_rank.empty()) {
    CommunicatorOptions resolved = child;
    LOOM_ASSIGN_OR_RETURN(child_order, collectives_internal::ResolveNodeOrder(
                                           static_cast<int>(ranks.size()), &resolved));
    bool whole_nodes = resolved.ranks_per_node == k;
    for (size_t i = 0; whole_nodes && i < child_order.size(); ++i) {
      whole_nodes = static_cast<int>(i) % k == node_position_[ranks[child_order[i]]] % k;
    }
    if (whole_nodes) child.node_transport = options_.node_transport;
  }
  return Make(std::move(view), std::move(child), id);
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::SplitByMesh(const Mesh& mesh,
                                                                        absl::string_view dims) const {
  if (mesh.world_size() != size()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh ", mesh.ToString(), " has ",
                                                   mesh.world_size(), " ranks, the communicator ",
                                                   size()));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> group, mesh.Group(rank(), dims));
  return Split(absl::MakeConstSpan(group));
}

}  // namespace loom
