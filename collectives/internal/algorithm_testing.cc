#include "collectives/internal/algorithm_testing.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/reduce/reduce_kernels.h"
#include "collectives/transport/inproc/inproc_harness.h"
#include "core/half.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
double ToDouble(T value) {
  if constexpr (kIsHalf<T>) {
    return static_cast<double>(ToFloat(value));
  } else {
    return static_cast<double>(value);
  }
}

template <typename T>
T FromDouble(double value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return ToFloat16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ToBFloat16(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
double UnitRoundoff() {
  if constexpr (std::is_same_v<T, Float16>) {
    return std::ldexp(1.0, -11);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::ldexp(1.0, -8);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::ldexp(1.0, -24);
  } else {
    return std::ldexp(1.0, -53);
  }
}

template <typename T>
double SmallestNormal() {
  if constexpr (std::is_same_v<T, Float16>) {
    return std::ldexp(1.0, -14);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::ldexp(1.0, -126);
  } else {
    return static_cast<double>(std::numeric_limits<T>::min());
  }
}

template <typename T>
T Load(const std::vector<std::byte>& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
T LoadView(ConstBufferView view, size_t i) {
  T value;
  std::memcpy(&value, view.data() + i * sizeof(T), sizeof(T));
  return value;
}

// Integers reduce exactly, wrapping like the kernels (in the unsigned type).
template <typename T>
T IntegerCombine(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a < b ? b : a;
  }
  return a;
}

template <typename T>
std::string Show(T value) {
  if constexpr (kIsHalf<T>) {
    return absl::StrCat(ToFloat(value), " (bits 0x", absl::Hex(value.bits), ")");
  } else if constexpr (std::is_floating_point_v<T>) {
    return absl::StrCat(value);
  } else {
    return absl::StrCat(static_cast<int64_t>(value));
  }
}

using PathsFn = std::function<PathEstimate(int rank, int peer)>;

// PathTransport: `inner` with paths(rank, peer) as its estimate of each path.
class PathTransport final : public Transport {
 public:
  PathTransport(Transport& inner, const PathsFn& paths) : inner_(inner), paths_(paths) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override {
    return inner_.PostSend(peer, tag, data, stamp);
  }
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override {
    return inner_.PostRecv(peer, tag, data, combiner, stamp);
  }
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    return inner_.Wait(requests, deadline);
  }
  void Abort(const absl::Status& reason) override { inner_.Abort(reason); }
  absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) override {
    return inner_.AllocateBuffer(bytes);
  }
  absl::StatusOr<TagReservation> ReserveTags(Tag first, Tag last,
                                             absl::string_view user) override {
    return inner_.ReserveTags(first, last, user);
  }
  PathEstimate EstimatePath(int peer) const override {
    return peer == rank() || peer < 0 || peer >= size() ? PathEstimate{} : paths_(rank(), peer);
  }

 private:
  Transport& inner_;
  const PathsFn& paths_;
};

class PathHarness final : public TransportHarness {
 public:
  PathHarness(std::unique_ptr<TransportHarness> inner, PathsFn paths)
      : inner_(std::move(inner)), paths_(std::move(paths)) {}
  std::string name() const override { return inner_->name() + "+path"; }
  bool combines() const override { return inner_->combines(); }
  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    return inner_->Run(world, [&](Transport& transport) {
      PathTransport wrapped(transport, paths_);
      return body(wrapped);
    });
  }

 private:
  std::unique_ptr<TransportHarness> inner_;
  const PathsFn paths_;
};

}  // namespace

std::unique_ptr<TransportHarness> WithPath(std::unique_ptr<TransportHarness> inner,
                                           PathEstimate path) {
  return WithPaths(std::move(inner), [path](int, int) { return path; });
}

std::unique_ptr<TransportHarness> WithPaths(std::unique_ptr<TransportHarness> inner,
                                            PathsFn paths) {
  return std::make_unique<PathHarness>(std::move(inner), std::move(paths));
}

std::vector<absl::Status> RunAlgorithmRanks(TransportHarness& harness, int world,
                                            const RankBody& body, size_t chunk_bytes,
                                            absl::Duration timeout, PathEstimate agreed_path) {
  return harness.Run(world, [&](Transport& transport) {
    Scratch scratch;
    CallContext ctx;
    ctx.transport = &transport;
    ctx.tag_base = 0;
    ctx.deadline = absl::Now() + timeout;
    ctx.chunk_bytes = chunk_bytes;
    ctx.scratch = &scratch;
    ctx.agreed_path = agreed_path;
    return body(ctx);
  });
}

absl::Status AllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat("rank ", r, " of ", statuses.size(), ": ",
                                       statuses[r].message()));
    }
  }
  return absl::OkStatus();
}

ConstBufferView RankInputs::View(int rank) const { return ViewOf(data[rank], dtype); }

RankInputs MakeInputs(DType dtype, ReduceOp op, int world, size_t count, uint64_t seed) {
  RankInputs inputs;
  inputs.dtype = dtype;
  inputs.count = count;
  inputs.data.resize(world);
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (int r = 0; r < world; ++r) {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
      std::vector<std::byte>& bytes = inputs.data[r];
      bytes.resize(count * sizeof(T));
      for (size_t i = 0; i < count; ++i) {
        T value;
        if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
          const double unit = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
          value = FromDouble<T>(op == ReduceOp::kProd ? 0.75 + 0.5 * unit : 2.0 * unit - 1.0);
        } else {
          value = static_cast<T>(rng());
        }
        std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
      }
    }
  });
  return inputs;
}

ConstBufferView ViewOf(const std::vector<std::byte>& bytes, DType dtype) {
  return ConstBufferView(bytes.data(), bytes.size() / DTypeSize(dtype), dtype);
}

BufferView MutableViewOf(std::vector<std::byte>& bytes, DType dtype) {
  return BufferView(bytes.data(), bytes.size() / DTypeSize(dtype), dtype);
}

absl::Status ExpectReduction(const RankInputs& inputs, ReduceOp op, size_t first,
                             ConstBufferView got) {
  if (got.dtype() != inputs.dtype || first + got.size() > inputs.count) {
    return absl::InternalError(absl::StrCat("result of ", got.size(), " ", DTypeName(got.dtype()),
                                            " at ", first, " does not fit inputs of ",
                                            inputs.count, " ", DTypeName(inputs.dtype)));
  }
  const int world = static_cast<int>(inputs.data.size());
  return VisitDType(inputs.dtype, [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    for (size_t i = 0; i < got.size(); ++i) {
      const T value = LoadView<T>(got, i);
      if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
        // long double: the reference must round less often than the f64 result it checks.
        long double exact = static_cast<long double>(ToDouble(Load<T>(inputs.data[0], first + i)));
        long double magnitude = std::fabs(exact);
        for (int r = 1; r < world; ++r) {
          const long double x =
              static_cast<long double>(ToDouble(Load<T>(inputs.data[r], first + i)));
          switch (op) {
            case ReduceOp::kSum:
            case ReduceOp::kAvg: exact += x; break;
            case ReduceOp::kProd: exact *= x; break;
            case ReduceOp::kMin: exact = std::fmin(exact, x); break;
            case ReduceOp::kMax: exact = std::fmax(exact, x); break;
          }
          magnitude += std::fabs(x);
        }
        const long double u = static_cast<long double>(UnitRoundoff<T>());
        const auto smallest = static_cast<long double>(SmallestNormal<T>());
        long double bound = 0;
        if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
          bound = world * u * magnitude + smallest;
        } else if (op == ReduceOp::kProd) {
          bound = world * u * std::fabs(exact) + smallest;
        }
        // min and max pick an input, which the dtype holds exactly.
        const long double error = std::fabs(static_cast<long double>(ToDouble(value)) - exact);
        if (!(error <= bound)) {
          return absl::InternalError(absl::StrCat(
              ReduceOpName(op), " of ", world, " ranks, element ", first + i, ": got ",
              Show(value), ", want ", static_cast<double>(exact), " within ",
              static_cast<double>(bound)));
        }
      } else {
        T want = Load<T>(inputs.data[0], first + i);
        for (int r = 1; r < world; ++r) want = IntegerCombine(op, want, Load<T>(inputs.data[r], first + i));
        if (value != want) {
          return absl::InternalError(absl::StrCat(ReduceOpName(op), " of ", world,
                                                  " ranks, element ", first + i, ": got ",
                                                  Show(value), ", want ", Show(want)));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ExpectSameBytes(ConstBufferView want, ConstBufferView got, const std::string& what) {
  if (want.dtype() != got.dtype() || want.size() != got.size()) {
    return absl::InternalError(absl::StrCat(what, ": got ", got.size(), " ", DTypeName(got.dtype()),
                                            ", want ", want.size(), " ", DTypeName(want.dtype())));
  }
  // One whole-buffer comparison first: the element loop below only names the first
  // difference, and it is slow under the sanitizers.
  if (want.size_bytes() == 0 || std::memcmp(want.data(), got.data(), want.size_bytes()) == 0) {
    return absl::OkStatus();
  }
  const size_t width = DTypeSize(want.dtype());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(want.data() + i * width, got.data() + i * width, width) != 0) {
      return VisitDType(want.dtype(), [&](auto zero) {
        using T = decltype(zero);
        return absl::InternalError(absl::StrCat(what, ": element ", i, " is ",
                                                Show(LoadView<T>(got, i)), ", want ",
                                                Show(LoadView<T>(want, i))));
      });
    }
  }
  return absl::OkStatus();
}

std::vector<std::byte> RankOrderReduce(const RankInputs& inputs, ReduceOp op, size_t first,
                                       size_t count) {
  const size_t width = DTypeSize(inputs.dtype);
  std::vector<std::byte> acc(inputs.data[0].begin() + first * width,
                             inputs.data[0].begin() + (first + count) * width);
  const ReduceOp kernel_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  for (size_t r = 1; r < inputs.data.size(); ++r) {
    const ConstBufferView src(inputs.data[r].data() + first * width, count, inputs.dtype);
    absl::Status status = ReduceInto(kernel_op, src, MutableViewOf(acc, inputs.dtype));
    if (!status.ok()) return {};
  }
  return acc;
}

std::vector<std::byte> Garbage(size_t bytes) {
  return std::vector<std::byte>(bytes, std::byte{0xCD});
}

// ---- The algorithm suite -------------------------------------------------------

namespace {

constexpr size_t kLargestCount = 65537;

bool Reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

bool Rooted(CollectiveKind kind) {
  return kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter;
}

// Whether one side of the call is world * count elements.
bool SpansTheWorld(CollectiveKind kind, bool blocks) {
  return !blocks && (kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather ||
                     kind == CollectiveKind::kGather || kind == CollectiveKind::kScatter ||
                     kind == CollectiveKind::kAllToAll);
}

CollectiveFn EntryOf(const AlgorithmUnderTest& algorithm, CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return algorithm.all_reduce;
    case CollectiveKind::kReduceScatter: return algorithm.reduce_scatter;
    case CollectiveKind::kAllGather: return algorithm.all_gather;
    case CollectiveKind::kBroadcast: return algorithm.broadcast;
    case CollectiveKind::kReduce: return algorithm.reduce;
    case CollectiveKind::kGather: return algorithm.gather;
    case CollectiveKind::kScatter: return algorithm.scatter;
    case CollectiveKind::kAllToAll: return algorithm.all_to_all;
    case CollectiveKind::kBarrier: return algorithm.barrier;
    default: return nullptr;
  }
}

// Call: what a case runs, a collective or one of the blocks.
struct Call {
  CollectiveKind kind;
  bool blocks;
};

// Calls lists what `algorithm` has: its collectives in CollectiveKind order, then
// its blocks.
std::vector<Call> Calls(const AlgorithmUnderTest& algorithm) {
  std::vector<Call> calls;
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
        CollectiveKind::kBroadcast, CollectiveKind::kReduce, CollectiveKind::kAllToAll,
        CollectiveKind::kGather, CollectiveKind::kScatter, CollectiveKind::kBarrier}) {
    if (EntryOf(algorithm, kind) != nullptr) calls.push_back({kind, false});
  }
  if (algorithm.reduce_scatter_blocks != nullptr) {
    calls.push_back({CollectiveKind::kReduceScatter, true});
  }
  if (algorithm.all_gather_blocks != nullptr) calls.push_back({CollectiveKind::kAllGather, true});
  return calls;
}

std::vector<int> Unique(std::vector<int> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

std::vector<int> RootsOf(CollectiveKind kind, int world, size_t count, MatrixRoots roots) {
  if (!Rooted(kind)) return {0};
  switch (roots) {
    case MatrixRoots::kFirstAndLast: return Unique({0, world - 1});
    case MatrixRoots::kFirstSecondAndLast:
      // At the largest count one root (n-1: rotated ranks) keeps the sanitizers fast.
      if (count == kLargestCount) return {world - 1};
      return Unique({0, std::min(1, world - 1), world - 1});
  }
  return {0};
}

std::string Name(const AlgorithmCase& c) {
  std::string name =
      absl::StrCat(CollectiveKindName(c.kind), c.blocks ? "_blocks" : "", "_w", c.world);
  if (c.kind == CollectiveKind::kBarrier) return name;
  absl::StrAppend(&name, "_n", c.count, "_", DTypeName(c.dtype));
  if (Reduces(c.kind)) absl::StrAppend(&name, "_", ReduceOpName(c.op));
  absl::StrAppend(&name, c.in_place ? "_inplace" : "_outofplace");
  if (Rooted(c.kind)) absl::StrAppend(&name, "_root", c.root);
  absl::StrAppend(&name, "_chunk", c.chunk_bytes);
  if (c.path.BytesInFlight() > 0) absl::StrAppend(&name, "_path", c.path.BytesInFlight());
  return name;
}

absl::Status RunRanks(const AlgorithmCase& c, const RankBody& body) {
  std::unique_ptr<TransportHarness> harness = MakeInprocHarness();
  if (c.path.BytesInFlight() > 0) harness = WithPath(std::move(harness), c.path);
  return AllOk(RunAlgorithmRanks(*harness, c.world, body, c.chunk_bytes, absl::Seconds(60),
                                 c.path));
}

CollectiveArgs ArgsOf(const AlgorithmCase& c) {
  CollectiveArgs args;
  args.kind = c.kind;
  args.op = c.op;
  args.root = c.root;
  args.count = c.count;
  return args;
}

// Buffers of one run: input[r] starts as a copy of inputs.data[r] (so that a write
// into an input shows), output[r] as Garbage of `output_elements`. Rank r's thread
// touches only its own entries.
struct Buffers {
  Buffers(const RankInputs& inputs, int world, size_t output_elements)
      : input(inputs.data), output(world, Garbage(output_elements * DTypeSize(inputs.dtype))) {}

  std::vector<std::vector<std::byte>> input;
  std::vector<std::vector<std::byte>> output;
};

// CheckReduced checks `got` against op over every rank's input elements
// [first, first + got.size()).
absl::Status CheckReduced(const AlgorithmUnderTest& algorithm, const RankInputs& inputs,
                          ReduceOp op, size_t first, ConstBufferView got,
                          const std::string& what) {
  if (algorithm.rank_order_bitwise) {
    const std::vector<std::byte> want = RankOrderReduce(inputs, op, first, got.size());
    return ExpectSameBytes(ViewOf(want, inputs.dtype), got,
                           absl::StrCat(what, " against the rank-order fold"));
  }
  const absl::Status status = ExpectReduction(inputs, op, first, got);
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// ExpectInputKept checks that input buffer `index` still holds inputs.data[index],
// except the elements `aliased` (the output's, in place).
absl::Status ExpectInputKept(const RankInputs& inputs, const Buffers& buffers, int index,
                             const std::string& what, BlockRange aliased = {}) {
  const ConstBufferView want = inputs.View(index);
  const ConstBufferView got = ViewOf(buffers.input[index], inputs.dtype);
  LOOM_RETURN_IF_ERROR(ExpectSameBytes(Slice(want, 0, aliased.offset),
                                       Slice(got, 0, aliased.offset), what));
  const size_t after = aliased.offset + aliased.count;
  return ExpectSameBytes(Slice(want, after, want.size() - after),
                         Slice(got, after, got.size() - after),
                         after == 0 ? what : absl::StrCat(what, " from element ", after));
}

absl::Status ExpectInputsKept(const RankInputs& inputs, const Buffers& buffers) {
  for (size_t r = 0; r < buffers.input.size(); ++r) {
    LOOM_RETURN_IF_ERROR(ExpectInputKept(inputs, buffers, static_cast<int>(r),
                                         absl::StrCat("rank ", r, "'s input")));
  }
  return absl::OkStatus();
}

// CopyElements copies rank r's input elements `from` to element `to` of `buffer`.
void CopyElements(const RankInputs& inputs, int r, BlockRange from, size_t to,
                  std::vector<std::byte>& buffer) {
  const size_t width = DTypeSize(inputs.dtype);
  std::copy_n(inputs.data[r].begin() + from.offset * width, from.count * width,
              buffer.begin() + to * width);
}

absl::Status CheckAllReduce(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args = ArgsOf(c);
    args.output = MutableViewOf(c.in_place ? buffers.input[r] : buffers.output[r], c.dtype);
    args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(buffers.input[r], c.dtype);
    return algorithm.all_reduce(ctx, args);
  }));
  // Rank 0 against the reference; the others bit for bit against rank 0, which
  // checks them as fully with one reference computation, not n.
  const auto& results = c.in_place ? buffers.input : buffers.output;
  LOOM_RETURN_IF_ERROR(
      CheckReduced(algorithm, inputs, c.op, 0, ViewOf(results[0], c.dtype), "rank 0"));
  for (int r = 1; r < c.world; ++r) {
    LOOM_RETURN_IF_ERROR(ExpectSameBytes(ViewOf(results[0], c.dtype), ViewOf(results[r], c.dtype),
                                         absl::StrCat("rank ", r, " against rank 0")));
  }
  return c.in_place ? absl::OkStatus() : ExpectInputsKept(inputs, buffers);
}

absl::Status CheckReduceScatter(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.world * c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args = ArgsOf(c);
    args.input = ViewOf(buffers.input[r], c.dtype);
    args.output = c.in_place ? Slice(MutableViewOf(buffers.input[r], c.dtype), r * c.count, c.count)
                             : MutableViewOf(buffers.output[r], c.dtype);
    return algorithm.reduce_scatter(ctx, args);
  }));
  for (int r = 0; r < c.world; ++r) {
    const BlockRange mine{r * c.count, c.count};
    const ConstBufferView got = c.in_place ? Slice(ViewOf(buffers.input[r], c.dtype), mine)
                                           : ViewOf(buffers.output[r], c.dtype);
    LOOM_RETURN_IF_ERROR(
        CheckReduced(algorithm, inputs, c.op, mine.offset, got, absl::StrCat("rank ", r)));
    // The input is only read: entirely out of place, outside the own block in place.
    LOOM_RETURN_IF_ERROR(ExpectInputKept(inputs, buffers, r, absl::StrCat("rank ", r, "'s input"),
                                         c.in_place ? mine : BlockRange{}));
  }
  return absl::OkStatus();
}

absl::Status CheckReduceScatterBlocks(const AlgorithmUnderTest& algorithm,
                                      const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    const BufferView output =
        MutableViewOf(c.in_place ? buffers.input[r] : buffers.output[r], c.dtype);
    const ConstBufferView input = c.in_place ? output : ViewOf(buffers.input[r], c.dtype);
    return algorithm.reduce_scatter_blocks(ctx, c.op, input, output);
  }));
  const std::vector<std::byte> untouched = Garbage(inputs.bytes_per_rank());
  for (int r = 0; r < c.world; ++r) {
    const ConstBufferView result =
        ViewOf(c.in_place ? buffers.input[r] : buffers.output[r], c.dtype);
    for (int b = 0; b < c.world; ++b) {
      const BlockRange block = Block(c.count, c.world, b);
      if (b == r) {
        LOOM_RETURN_IF_ERROR(CheckReduced(algorithm, inputs, c.op, block.offset,
                                          Slice(result, block), absl::StrCat("rank ", r)));
      } else if (algorithm.blocks_leave_the_rest) {
        const ConstBufferView before = c.in_place ? inputs.View(r) : ViewOf(untouched, c.dtype);
        LOOM_RETURN_IF_ERROR(ExpectSameBytes(Slice(before, block), Slice(result, block),
                                             absl::StrCat("rank ", r, ", other block ", b)));
      }
    }
  }
  return c.in_place ? absl::OkStatus() : ExpectInputsKept(inputs, buffers);
}

absl::Status CheckAllGather(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.world * c.count);
  if (c.in_place) {
    for (int r = 0; r < c.world; ++r) {
      CopyElements(inputs, r, {0, c.count}, r * c.count, buffers.output[r]);
    }
  }
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args = ArgsOf(c);
    args.output = MutableViewOf(buffers.output[r], c.dtype);
    args.input = c.in_place ? Slice(ConstBufferView(args.output), r * c.count, c.count)
                            : ViewOf(buffers.input[r], c.dtype);
    return algorithm.all_gather(ctx, args);
  }));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      LOOM_RETURN_IF_ERROR(ExpectSameBytes(
          inputs.View(b), Slice(ViewOf(buffers.output[r], c.dtype), b * c.count, c.count),
          absl::StrCat("rank ", r, ", block ", b)));
    }
  }
  return ExpectInputsKept(inputs, buffers);
}

absl::Status CheckAllGatherBlocks(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  for (int r = 0; r < c.world; ++r) {
    const BlockRange mine = Block(c.count, c.world, r);
    CopyElements(inputs, r, mine, mine.offset, buffers.output[r]);
  }
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    return algorithm.all_gather_blocks(ctx, MutableViewOf(buffers.output[ctx.rank()], c.dtype));
  }));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      const BlockRange block = Block(c.count, c.world, b);
      LOOM_RETURN_IF_ERROR(ExpectSameBytes(Slice(inputs.View(b), block),
                                           Slice(ViewOf(buffers.output[r], c.dtype), block),
                                           absl::StrCat("rank ", r, ", block ", b)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  // One input: the root's (input[0]); in place it is the root's output too.
  const RankInputs inputs = MakeInputs(c.dtype, c.op, 1, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  const auto result = [&](int r) -> std::vector<std::byte>& {
    return r == c.root && c.in_place ? buffers.input[0] : buffers.output[r];
  };
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    CollectiveArgs args = ArgsOf(c);
    args.output = MutableViewOf(result(ctx.rank()), c.dtype);
    if (ctx.rank() == c.root) {
      args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(buffers.input[0], c.dtype);
    }
    return algorithm.broadcast(ctx, args);
  }));
  for (int r = 0; r < c.world; ++r) {
    LOOM_RETURN_IF_ERROR(
        ExpectSameBytes(inputs.View(0), ViewOf(result(r), c.dtype), absl::StrCat("rank ", r)));
  }
  return ExpectInputKept(inputs, buffers, 0, "the root's input");
}

absl::Status CheckReduce(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  std::vector<std::byte>& result = c.in_place ? buffers.input[c.root] : buffers.output[c.root];
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    CollectiveArgs args = ArgsOf(c);
    args.input = ViewOf(buffers.input[ctx.rank()], c.dtype);
    if (ctx.rank() == c.root) {
      args.output = MutableViewOf(result, c.dtype);
      if (c.in_place) args.input = args.output;
    }
    return algorithm.reduce(ctx, args);
  }));
  LOOM_RETURN_IF_ERROR(CheckReduced(algorithm, inputs, c.op, 0, ViewOf(result, c.dtype), "root"));
  for (int r = 0; r < c.world; ++r) {
    if (c.in_place && r == c.root) continue;
    LOOM_RETURN_IF_ERROR(ExpectInputKept(inputs, buffers, r, absl::StrCat("rank ", r, "'s input")));
  }
  return absl::OkStatus();
}

absl::Status CheckGather(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Buffers buffers(inputs, c.world, 0);
  std::vector<std::byte> gathered = Garbage(c.world * inputs.bytes_per_rank());
  if (c.in_place) CopyElements(inputs, c.root, {0, c.count}, c.root * c.count, gathered);
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args = ArgsOf(c);
    args.input = ViewOf(buffers.input[r], c.dtype);
    if (r == c.root) {
      args.output = MutableViewOf(gathered, c.dtype);
      if (c.in_place) args.input = Slice(ConstBufferView(args.output), r * c.count, c.count);
    }
    return algorithm.gather(ctx, args);
  }));
  for (int b = 0; b < c.world; ++b) {
    LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(b),
                                         Slice(ViewOf(gathered, c.dtype), b * c.count, c.count),
                                         absl::StrCat("the root's block ", b)));
  }
  return ExpectInputsKept(inputs, buffers);
}

absl::Status CheckScatter(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  // One input: the root's (input[0]), every rank's block in rank order; in place the
  // root's output is its own block of it.
  const RankInputs inputs = MakeInputs(c.dtype, c.op, 1, c.world * c.count, c.seed());
  Buffers buffers(inputs, c.world, c.count);
  const auto result = [&](int r) {
    return r == c.root && c.in_place
               ? Slice(MutableViewOf(buffers.input[0], c.dtype), r * c.count, c.count)
               : MutableViewOf(buffers.output[r], c.dtype);
  };
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    CollectiveArgs args = ArgsOf(c);
    args.output = result(ctx.rank());
    if (ctx.rank() == c.root) args.input = ViewOf(buffers.input[0], c.dtype);
    return algorithm.scatter(ctx, args);
  }));
  for (int r = 0; r < c.world; ++r) {
    LOOM_RETURN_IF_ERROR(ExpectSameBytes(Slice(inputs.View(0), r * c.count, c.count), result(r),
                                         absl::StrCat("rank ", r)));
  }
  // In place too: the root's own block holds what it held.
  return ExpectInputKept(inputs, buffers, 0, "the root's input");
}

absl::Status CheckAllToAll(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.world * c.count, c.seed());
  Buffers buffers(inputs, c.world, c.world * c.count);
  const auto& results = c.in_place ? buffers.input : buffers.output;
  LOOM_RETURN_IF_ERROR(RunRanks(c, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args = ArgsOf(c);
    args.output = MutableViewOf(c.in_place ? buffers.input[r] : buffers.output[r], c.dtype);
    args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(buffers.input[r], c.dtype);
    return algorithm.all_to_all(ctx, args);
  }));
  // Block b of rank r's output is block r of rank b's input.
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      LOOM_RETURN_IF_ERROR(
          ExpectSameBytes(Slice(inputs.View(b), r * c.count, c.count),
                          Slice(ViewOf(results[r], c.dtype), b * c.count, c.count),
                          absl::StrCat("rank ", r, ", block ", b)));
    }
  }
  return c.in_place ? absl::OkStatus() : ExpectInputsKept(inputs, buffers);
}

absl::Status CheckBarrier(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  constexpr int kRounds = 5;
  std::vector<std::atomic<int>> entered(kRounds);
  for (auto& e : entered) e.store(0);
  return RunRanks(c, [&](const CallContext& ctx) {
    for (int round = 0; round < kRounds; ++round) {
      // A different rank is late to each round.
      if (ctx.rank() == round % c.world) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      entered[round].fetch_add(1);
      LOOM_RETURN_IF_ERROR(algorithm.barrier(ctx, CollectiveArgs{}));
      const int seen = entered[round].load();
      if (seen != c.world) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank(), " left round ", round,
                                                " when only ", seen, " of ", c.world,
                                                " had entered"));
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

uint64_t AlgorithmCase::seed() const {
  return static_cast<uint64_t>(world) * 1000003 + count * 31 + static_cast<uint64_t>(dtype) * 7 +
         static_cast<uint64_t>(op) * 3 + static_cast<uint64_t>(root) +
         static_cast<uint64_t>(kind) * 101 + (blocks ? 53 : 0);
}

std::string CaseName(const ::testing::TestParamInfo<AlgorithmCase>& info) {
  return Name(info.param);
}

void PrintTo(const AlgorithmCase& c, std::ostream* os) { *os << Name(c); }

std::vector<size_t> MatrixCounts(int world) {
  std::vector<size_t> counts = {0, 1, 3, static_cast<size_t>(world - 1), 1000, kLargestCount};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

std::vector<AlgorithmCase> Matrix(const AlgorithmUnderTest& algorithm,
                                  const MatrixOptions& options) {
  std::vector<AlgorithmCase> cases;
  for (const Call& call : Calls(algorithm)) {
    const bool reduces = Reduces(call.kind);
    size_t rotation = 0;
    for (int world : options.worlds) {
      if (call.kind == CollectiveKind::kBarrier) {
        AlgorithmCase c;
        c.kind = call.kind;
        c.world = world;
        cases.push_back(c);
        continue;
      }
      for (size_t count : MatrixCounts(world)) {
        const bool largest = count == kLargestCount;
        const bool one_type = !reduces || (largest && options.largest_count_first_type_only);
        const size_t types = one_type ? 1 : options.types.size();
        for (size_t t = 0; t < types; ++t) {
          for (int root : RootsOf(call.kind, world, count, options.roots)) {
            for (bool in_place : {false, true}) {
              AlgorithmCase c;
              c.kind = call.kind;
              c.blocks = call.blocks;
              c.world = world;
              c.count = largest && SpansTheWorld(call.kind, call.blocks)
                            ? (kLargestCount / static_cast<size_t>(world)) | 1
                            : count;
              c.dtype = reduces ? options.types[t].first
                                : AllDTypes()[rotation++ % AllDTypes().size()];
              c.op = options.types[t].second;
              c.in_place = in_place;
              c.root = root;
              const bool small = options.small_chunks == MatrixChunks::kInPlace ? in_place : t == 0;
              c.chunk_bytes = small ? kSmallChunkBytes : kDefaultChunkBytes;
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

std::vector<AlgorithmCase> LongPathCases(const std::vector<AlgorithmCase>& cases,
                                         const std::vector<int>& worlds) {
  std::vector<AlgorithmCase> out;
  const PathEstimate paths[] = {{absl::Milliseconds(4), 250e6}, {absl::Microseconds(100), 1e8}};
  for (const AlgorithmCase& base : cases) {
    const bool on_world = worlds.empty() ? base.world > 1
                                         : std::find(worlds.begin(), worlds.end(), base.world) != worlds.end();
    if (!on_world || base.count < 1000 || base.dtype != DType::kF32) continue;
    for (const PathEstimate& path : paths) {
      AlgorithmCase c = base;
      c.chunk_bytes = 4096;
      c.path = path;
      out.push_back(c);
    }
  }
  return out;
}

std::vector<AlgorithmCase> DTypeOpMatrix(const AlgorithmUnderTest& algorithm,
                                         const DTypeOpOptions& options) {
  std::vector<AlgorithmCase> cases;
  for (const Call& call : Calls(algorithm)) {
    if (call.blocks || !Reduces(call.kind)) continue;
    size_t index = 0;
    for (int world : options.worlds) {
      for (size_t count : options.counts) {
        size_t dtype_index = 0;
        for (DType dtype : AllDTypes()) {
          constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax};
          // Under a sanitizer each dtype runs one op, the four in turn: every element
          // width and every op's kernel still runs through the algorithm's threads
          // (what the sanitizer checks); the suite runs all 32 pairs (the numerics).
          std::vector<ReduceOp> ops(std::begin(kOps), std::end(kOps));
          if (kUnderSanitizer) ops = {kOps[dtype_index % std::size(kOps)]};
          ++dtype_index;
          for (ReduceOp op : ops) {
            const std::vector<bool> placements =
                options.both_placements ? std::vector<bool>{false, true}
                                        : std::vector<bool>{index++ % 2 == 1};
            for (bool in_place : placements) {
              AlgorithmCase c;
              c.kind = call.kind;
              c.world = world;
              c.count = count;
              c.dtype = dtype;
              c.op = op;
              c.in_place = in_place;
              c.root = Rooted(call.kind) ? world - 1 : 0;
              c.chunk_bytes = options.chunk_bytes;
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

std::vector<absl::Status> RunInPlace(CollectiveFn fn, CollectiveKind kind,
                                     const std::vector<size_t>& counts, DType dtype,
                                     size_t chunk_bytes, absl::Duration timeout) {
  return RunAlgorithmRanks(
      *MakeInprocHarness(), static_cast<int>(counts.size()),
      [&](const CallContext& ctx) {
        const size_t count = counts[ctx.rank()];
        if (count == kNeverCalls) return absl::OkStatus();
        std::vector<std::byte> data(count * DTypeSize(dtype));
        CollectiveArgs args;
        args.kind = kind;
        args.count = count;
        args.output = MutableViewOf(data, dtype);
        args.input = args.output;
        return fn(ctx, args);
      },
      chunk_bytes, timeout);
}

std::vector<AlgorithmCase> Concat(const std::vector<std::vector<AlgorithmCase>>& lists) {
  std::vector<AlgorithmCase> cases;
  absl::flat_hash_set<std::string> names;
  for (const std::vector<AlgorithmCase>& list : lists) {
    for (const AlgorithmCase& c : list) {
      if (names.insert(Name(c)).second) cases.push_back(c);
    }
  }
  return cases;
}

absl::Status CheckCase(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c) {
  if (c.blocks) {
    if (c.kind == CollectiveKind::kReduceScatter && algorithm.reduce_scatter_blocks != nullptr) {
      return CheckReduceScatterBlocks(algorithm, c);
    }
    if (c.kind == CollectiveKind::kAllGather && algorithm.all_gather_blocks != nullptr) {
      return CheckAllGatherBlocks(algorithm, c);
    }
  } else if (EntryOf(algorithm, c.kind) != nullptr) {
    switch (c.kind) {
      case CollectiveKind::kAllReduce: return CheckAllReduce(algorithm, c);
      case CollectiveKind::kReduceScatter: return CheckReduceScatter(algorithm, c);
      case CollectiveKind::kAllGather: return CheckAllGather(algorithm, c);
      case CollectiveKind::kBroadcast: return CheckBroadcast(algorithm, c);
      case CollectiveKind::kReduce: return CheckReduce(algorithm, c);
      case CollectiveKind::kGather: return CheckGather(algorithm, c);
      case CollectiveKind::kScatter: return CheckScatter(algorithm, c);
      case CollectiveKind::kAllToAll: return CheckAllToAll(algorithm, c);
      case CollectiveKind::kBarrier: return CheckBarrier(algorithm, c);
      default: break;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("the algorithm has no entry point for ", Name(c)));
}

}  // namespace collectives_internal
}  // namespace loom
