// A Communicator given its ranks' nodes in any order (CommunicatorOptions::
// node_of_rank): the algorithms run node by node, every call keeps the caller's
// numbering. Checked three ways on thread ranks over inproc:
// - every collective x algorithm x count over a seeded sweep of layouts (equal and
//   unequal nodes, shuffled), each result against the reference;
// - the renumbered run is the blocked run: the bytes that cross nodes are the same
//   as with the same ranks launched node by node, for every algorithm, and fewer
//   than node-blind for the ring;
// - layouts that split, deterministic mode, a node transport, and bad options.
#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "collectives/algorithm_registry.h"
#include "collectives/communicator.h"
#include "collectives/internal/algorithm_testing.h"
#include "collectives/internal/node_order.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using collectives_internal::ExpectReduction;
using collectives_internal::ExpectSameBytes;
using collectives_internal::MakeInputs;
using collectives_internal::MutableViewOf;
using collectives_internal::RankInputs;
using collectives_internal::ResolveNodeOrder;
using collectives_internal::ViewOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// CrossNodeCounter: a transport that forwards to another and adds up the bytes this
// rank posts to peers on another node than its own.
class CrossNodeCounter final : public Transport {
 public:
  CrossNodeCounter(std::unique_ptr<Transport> inner, std::vector<int> node_of_rank,
                   std::atomic<uint64_t>* cross, std::atomic<uint64_t>* within)
      : inner_(std::move(inner)), nodes_(std::move(node_of_rank)), cross_(cross), within_(within) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override {
    if (peer >= 0 && peer < size()) {
      (nodes_[peer] == nodes_[rank()] ? within_ : cross_)->fetch_add(data.size());
    }
    return inner_->PostSend(peer, tag, data, stamp);
  }
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override {
    return inner_->PostRecv(peer, tag, data, combiner, stamp);
  }
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    return inner_->Wait(requests, deadline);
  }
  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Transport> inner_;
  std::vector<int> nodes_;
  std::atomic<uint64_t>* cross_;
  std::atomic<uint64_t>* within_;
};

struct Traffic {
  std::atomic<uint64_t> cross{0};
  std::atomic<uint64_t> within{0};
};

using RankFn = std::function<absl::Status(Communicator& comm)>;

// RunLayout runs `body` on `nodes.size()` thread ranks whose nodes are `nodes`, each
// with a communicator made with `options` (node_of_rank as the caller set it) over an
// inproc endpoint counted into `traffic` by the same nodes. With `node_groups`, each
// node's ranks also get an inproc node transport among themselves, numbered in rank
// order. Returns every rank's status.
std::vector<absl::Status> RunLayout(const std::vector<int>& nodes, const CommunicatorOptions& options,
                                    const RankFn& body, Traffic* traffic = nullptr,
                                    bool node_groups = false) {
  const int world = static_cast<int>(nodes.size());
  std::vector<absl::Status> results(world);
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(world);
  if (!group.ok()) return std::vector<absl::Status>(world, group.status());
  // The node groups: one inproc group per node, the rank's place in it.
  std::vector<std::shared_ptr<InprocGroup>> node_group(world);
  std::vector<int> place(world, 0);
  if (node_groups) {
    std::vector<int> seen;
    for (int r = 0; r < world; ++r) {
      if (std::find(seen.begin(), seen.end(), nodes[r]) != seen.end()) continue;
      seen.push_back(nodes[r]);
      std::vector<int> members;
      for (int q = 0; q < world; ++q) {
        if (nodes[q] == nodes[r]) members.push_back(q);
      }
      absl::StatusOr<std::shared_ptr<InprocGroup>> g =
          InprocGroup::Create(static_cast<int>(members.size()));
      if (!g.ok()) return std::vector<absl::Status>(world, g.status());
      for (size_t i = 0; i < members.size(); ++i) {
        node_group[members[i]] = *g;
        place[members[i]] = static_cast<int>(i);
      }
    }
  }
  Traffic unused;
  Traffic* counted = traffic != nullptr ? traffic : &unused;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(rank);
      if (!endpoint.ok()) {
        results[rank] = endpoint.status();
        return;
      }
      CommunicatorOptions mine = options;
      mine.timeout = absl::Seconds(60);
      if (node_groups) {
        absl::StatusOr<std::unique_ptr<Transport>> node = node_group[rank]->Endpoint(place[rank]);
        if (!node.ok()) {
          results[rank] = node.status();
          return;
        }
        mine.node_transport = std::move(*node);
      }
      auto counter = std::make_shared<CrossNodeCounter>(std::move(*endpoint), nodes,
                                                        &counted->cross, &counted->within);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(counter, mine);
      results[rank] = comm.ok() ? body(**comm) : comm.status();
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

void ExpectAllOk(const std::vector<absl::Status>& results, const std::string& what) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_THAT(results[r], IsOk()) << what << ", rank " << r;
  }
}

CommunicatorOptions NodesOf(const std::vector<int>& nodes) {
  CommunicatorOptions options;
  options.node_of_rank = nodes;
  return options;
}

// ---------------------------------------------------------------------------
// The order.

TEST(ResolveNodeOrderTest, NodeByNodeInTheOrderOfEachNodesLowestRank) {
  CommunicatorOptions options = NodesOf({0, 1, 0, 1});
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<int> order, ResolveNodeOrder(4, &options));
  EXPECT_THAT(order, ElementsAre(0, 2, 1, 3));
  EXPECT_EQ(options.ranks_per_node, 2);

  options = NodesOf({7, 5, 9, 5, 7, 9});  // node names are any ints
  LOOM_ASSERT_OK_AND_ASSIGN(order, ResolveNodeOrder(6, &options));
  EXPECT_THAT(order, ElementsAre(0, 4, 1, 3, 2, 5));
  EXPECT_EQ(options.ranks_per_node, 2);

  options = NodesOf({3, 3, 4, 4});  // already in blocks: the identity
  LOOM_ASSERT_OK_AND_ASSIGN(order, ResolveNodeOrder(4, &options));
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(options.ranks_per_node, 2);

  options = NodesOf({0, 1, 0, 0, 2});  // unequal nodes: in node order, no ranks_per_node
  LOOM_ASSERT_OK_AND_ASSIGN(order, ResolveNodeOrder(5, &options));
  EXPECT_THAT(order, ElementsAre(0, 2, 3, 1, 4));
  EXPECT_EQ(options.ranks_per_node, 0);

  options = CommunicatorOptions();  // none given: the identity, ranks_per_node untouched
  options.ranks_per_node = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(order, ResolveNodeOrder(4, &options));
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(options.ranks_per_node, 2);
}

TEST(ResolveNodeOrderTest, BadLayoutsAreInvalidArgumentNamingTheValues) {
  CommunicatorOptions options = NodesOf({0, 1, 0});
  EXPECT_THAT(ResolveNodeOrder(4, &options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node_of_rank has 3 entries for a group of 4")));
  options = NodesOf({0, 1, 0, 1});
  options.ranks_per_node = 4;
  EXPECT_THAT(ResolveNodeOrder(4, &options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ranks_per_node 4 does not fit node_of_rank [0,1,0,1]: 2 ranks "
                                 "on each of 2 nodes")));
  options = NodesOf({0, 1, 1});
  options.ranks_per_node = 1;
  EXPECT_THAT(ResolveNodeOrder(3, &options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nodes of 1, 2 ranks")));
}

TEST(NodeOrderTest, CreateChecksTheNodeTransportAgainstTheLayout) {
  // Rank 1 of {0, 1, 0, 1} is its node's first rank: a node transport of rank 1 is
  // wrong for it.
  absl::StatusOr<std::shared_ptr<InprocGroup>> world = InprocGroup::Create(4);
  absl::StatusOr<std::shared_ptr<InprocGroup>> node = InprocGroup::Create(2);
  ASSERT_THAT(world.status(), IsOk());
  ASSERT_THAT(node.status(), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, (*world)->Endpoint(1));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> wrong, (*node)->Endpoint(1));
  CommunicatorOptions options = NodesOf({0, 1, 0, 1});
  options.node_transport = std::move(wrong);
  EXPECT_THAT(Communicator::Create(std::move(endpoint), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node_transport of rank 1 in 2 does not fit rank 1 at 2 ranks "
                                 "per node (it must be rank 0 in 2)")));
}

// ---------------------------------------------------------------------------
// Every collective, every algorithm, over a sweep of layouts.

// CheckEveryKind runs every collective with `algorithm` (kAuto, or each the
// registry has for a kind) at `count` elements a block on `comm`, each result
// against the reference. In place where `in_place` and the call allows it.
absl::Status CheckEveryKind(Communicator& comm, Algorithm algorithm, size_t count, bool in_place,
                            DType dtype, uint64_t seed) {
  const int n = comm.size();
  const int r = comm.rank();
  const size_t width = DTypeSize(dtype);
  const ReduceOp op = dtype == DType::kI32 ? ReduceOp::kMax : ReduceOp::kSum;
  const RankInputs inputs = MakeInputs(dtype, op, n, n * count, seed);
  auto runs = [&](CollectiveKind kind) {
    if (algorithm == Algorithm::kAuto) return true;
    const std::vector<Algorithm> has = AlgorithmsFor(kind);
    return std::find(has.begin(), has.end(), algorithm) != has.end();
  };
  CallOptions call;
  call.algorithm = algorithm;
  const std::string label = absl::StrCat(AlgorithmName(algorithm), " count ", count,
                                         in_place ? " in place " : " ", DTypeName(dtype), ": ");
  auto named = [&](absl::string_view kind, absl::Status status) {
    return status.ok() ? status
                       : absl::Status(status.code(), absl::StrCat(label, kind, ": ", status.message()));
  };
  const int root = static_cast<int>((count + 1) % static_cast<size_t>(n));
  if (runs(CollectiveKind::kAllReduce)) {
    std::vector<std::byte> mine(inputs.data[r].begin(), inputs.data[r].begin() + count * width);
    std::vector<std::byte> out(count * width);
    BufferView output = in_place ? MutableViewOf(mine, dtype) : MutableViewOf(out, dtype);
    LOOM_RETURN_IF_ERROR(named("all_reduce", comm.AllReduce(ViewOf(mine, dtype), output, op, call)));
    LOOM_RETURN_IF_ERROR(named("all_reduce", ExpectReduction(inputs, op, 0, output)));
  }
  if (runs(CollectiveKind::kReduceScatter)) {
    std::vector<std::byte> mine = inputs.data[r], out(count * width);
    BufferView output = in_place ? BufferView(mine.data() + r * count * width, count, dtype)
                                 : MutableViewOf(out, dtype);
    LOOM_RETURN_IF_ERROR(
        named("reduce_scatter", comm.ReduceScatter(ViewOf(mine, dtype), output, op, call)));
    LOOM_RETURN_IF_ERROR(named("reduce_scatter", ExpectReduction(inputs, op, r * count, output)));
  }
  if (runs(CollectiveKind::kAllGather)) {
    std::vector<std::byte> out(n * count * width);
    ConstBufferView input(inputs.data[r].data(), count, dtype);
    if (in_place && count > 0) {
      std::memcpy(out.data() + r * count * width, inputs.data[r].data(), count * width);
      input = ConstBufferView(out.data() + r * count * width, count, dtype);
    }
    LOOM_RETURN_IF_ERROR(named("all_gather", comm.AllGather(input, MutableViewOf(out, dtype), call)));
    for (int q = 0; q < n; ++q) {
      LOOM_RETURN_IF_ERROR(named("all_gather", ExpectSameBytes(
          ConstBufferView(inputs.data[q].data(), count, dtype),
          ConstBufferView(out.data() + q * count * width, count, dtype), absl::StrCat("block ", q))));
    }
  }
  if (runs(CollectiveKind::kBroadcast)) {
    std::vector<std::byte> mine(inputs.data[r].begin(), inputs.data[r].begin() + count * width);
    LOOM_RETURN_IF_ERROR(named("broadcast", comm.Broadcast(ViewOf(mine, dtype),
                                                          MutableViewOf(mine, dtype), root, call)));
    LOOM_RETURN_IF_ERROR(named("broadcast", ExpectSameBytes(
        ConstBufferView(inputs.data[root].data(), count, dtype), ViewOf(mine, dtype), "output")));
  }
  if (runs(CollectiveKind::kReduce)) {
    std::vector<std::byte> out(r == root ? count * width : 0);
    LOOM_RETURN_IF_ERROR(named("reduce", comm.Reduce(ConstBufferView(inputs.data[r].data(), count, dtype),
                                                     MutableViewOf(out, dtype), op, root, call)));
    if (r == root) {
      LOOM_RETURN_IF_ERROR(named("reduce", ExpectReduction(inputs, op, 0, ViewOf(out, dtype))));
    }
  }
  if (runs(CollectiveKind::kAllToAll)) {
    std::vector<std::byte> out(n * count * width);
    LOOM_RETURN_IF_ERROR(named("all_to_all", comm.AllToAll(ViewOf(inputs.data[r], dtype),
                                                           MutableViewOf(out, dtype), call)));
    for (int q = 0; q < n; ++q) {
      LOOM_RETURN_IF_ERROR(named("all_to_all", ExpectSameBytes(
          ConstBufferView(inputs.data[q].data() + r * count * width, count, dtype),
          ConstBufferView(out.data() + q * count * width, count, dtype),
          absl::StrCat("block from rank ", q))));
    }
  }
  if (runs(CollectiveKind::kGather)) {
    std::vector<std::byte> out(r == root ? n * count * width : 0);
    LOOM_RETURN_IF_ERROR(named("gather", comm.Gather(ConstBufferView(inputs.data[r].data(), count, dtype),
                                                     MutableViewOf(out, dtype), root, call)));
    for (int q = 0; r == root && q < n; ++q) {
      LOOM_RETURN_IF_ERROR(named("gather", ExpectSameBytes(
          ConstBufferView(inputs.data[q].data(), count, dtype),
          ConstBufferView(out.data() + q * count * width, count, dtype), absl::StrCat("block ", q))));
    }
  }
  if (runs(CollectiveKind::kScatter)) {
    std::vector<std::byte> out(count * width);
    LOOM_RETURN_IF_ERROR(named("scatter", comm.Scatter(ViewOf(inputs.data[r], dtype),
                                                       MutableViewOf(out, dtype), root, call)));
    LOOM_RETURN_IF_ERROR(named("scatter", ExpectSameBytes(
        ConstBufferView(inputs.data[root].data() + r * count * width, count, dtype),
        ViewOf(out, dtype), "block")));
  }
  if (runs(CollectiveKind::kAllToAllV)) {
    // Rank q sends (q + 2j + count) % 5 elements to rank j: uneven, some empty.
    auto sends = [&](int q, int j) { return (q + 2 * j + count) % 5; };
    std::vector<size_t> send_counts(n), recv_counts(n);
    std::vector<int32_t> input, want;
    for (int j = 0; j < n; ++j) {
      send_counts[j] = sends(r, j);
      recv_counts[j] = sends(j, r);
      for (size_t e = 0; e < send_counts[j]; ++e) input.push_back(100000 * r + 100 * j + e);
      for (size_t e = 0; e < recv_counts[j]; ++e) want.push_back(100000 * j + 100 * r + e);
    }
    std::vector<int32_t> output(want.size(), -1);
    LOOM_RETURN_IF_ERROR(named("all_to_allv", comm.AllToAllV(
        ConstBufferView::Of(absl::MakeSpan(input)), send_counts,
        BufferView::Of(absl::MakeSpan(output)), recv_counts, call)));
    if (output != want) {
      return absl::InternalError(absl::StrCat(label, "all_to_allv: got [",
                                              absl::StrJoin(output, ","), "], want [",
                                              absl::StrJoin(want, ","), "]"));
    }
  }
  if (runs(CollectiveKind::kBarrier)) LOOM_RETURN_IF_ERROR(named("barrier", comm.Barrier(call)));
  return absl::OkStatus();
}

// Layouts: the ones a launcher makes (round-robin over 2 and 3 hosts), arbitrary node
// names, and a seeded sweep of shuffled equal and unequal nodes.
std::vector<std::vector<int>> Layouts(uint64_t seed, int random_layouts) {
  std::vector<std::vector<int>> layouts = {
      {0, 1, 0, 1}, {0, 1, 2, 0, 1, 2}, {9, 4, 4, 9}, {1, 0, 1, 0, 1, 0, 1, 0}, {0, 1, 1}};
  std::mt19937_64 random(seed);
  for (int i = 0; i < random_layouts; ++i) {
    const int world = 2 + static_cast<int>(random() % 7);  // 2..8
    const int nodes = 2 + static_cast<int>(random() % std::min(3, world - 1));
    std::vector<int> layout(world);
    if (world % nodes == 0 && random() % 2 == 0) {
      for (int r = 0; r < world; ++r) layout[r] = r % nodes;  // equal
    } else {
      for (int r = 0; r < world; ++r) layout[r] = r < nodes ? r : static_cast<int>(random() % nodes);
    }
    std::shuffle(layout.begin(), layout.end(), random);
    layouts.push_back(layout);
  }
  return layouts;
}

TEST(NodeOrderTest, EveryCollectiveAndAlgorithmMatchesTheReferenceOnEveryLayout) {
  const uint64_t seed = 20261129;
  std::cout << "layout seed " << seed << "\n";
  std::vector<Algorithm> algorithms = {Algorithm::kAuto};
  for (Algorithm a : AllAlgorithms()) {
    if (a != Algorithm::kNative && a != Algorithm::kAuto) algorithms.push_back(a);
  }
  for (const std::vector<int>& nodes : Layouts(seed, kUnderSanitizer ? 3 : 8)) {
    const std::string layout = absl::StrCat("nodes [", absl::StrJoin(nodes, ","), "]");
    SCOPED_TRACE(layout);
    const size_t world = nodes.size();
    // Counts: empty, one, fewer than ranks, uneven, and above the 256 KiB chunk.
    const std::vector<size_t> counts = {0, 1, world - 1, 1001,
                                        kUnderSanitizer ? size_t{20011} : size_t{70001}};
    // Every dtype in and out of place (16-bit floats widen to f32 first: their in-place
    // reduce-scatter is a block of the widened input), each at two of the counts.
    const DType dtypes[] = {DType::kI32, DType::kF32, DType::kBF16, DType::kF16};
    ExpectAllOk(RunLayout(nodes, NodesOf(nodes), [&](Communicator& comm) -> absl::Status {
      for (Algorithm algorithm : algorithms) {
        for (size_t i = 0; i < counts.size(); ++i) {
          for (bool in_place : {false, true}) {
            const DType dtype = dtypes[(i + (in_place ? 2 : 0)) % 4];
            LOOM_RETURN_IF_ERROR(CheckEveryKind(comm, algorithm, counts[i], in_place, dtype,
                                                seed + i));
          }
        }
      }
      return absl::OkStatus();
    }), layout);
  }
}

// ---------------------------------------------------------------------------
// The renumbered run is the blocked run.

// CrossBytes: the bytes that crossed nodes in one `kind` call with `algorithm` of
// `count` f32 a block on ranks on `nodes`, the communicator told `told` (empty:
// node-blind).
uint64_t CrossBytes(const std::vector<int>& nodes, const std::vector<int>& told,
                    CollectiveKind kind, Algorithm algorithm, size_t count) {
  Traffic traffic;
  CallOptions call;
  call.algorithm = algorithm;
  ExpectAllOk(RunLayout(nodes, NodesOf(told), [&](Communicator& comm) -> absl::Status {
    const size_t n = static_cast<size_t>(comm.size());
    std::vector<float> in(n * count, 1.0f), out(n * count);
    switch (kind) {
      case CollectiveKind::kAllReduce:
        return comm.AllReduce(ConstBufferView::Of(absl::MakeConstSpan(in).subspan(0, count)),
                              BufferView::Of(absl::MakeSpan(out).subspan(0, count)),
                              ReduceOp::kSum, call);
      case CollectiveKind::kReduceScatter:
        return comm.ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(in)),
                                  BufferView::Of(absl::MakeSpan(out).subspan(0, count)),
                                  ReduceOp::kSum, call);
      case CollectiveKind::kAllGather:
        return comm.AllGather(ConstBufferView::Of(absl::MakeConstSpan(in).subspan(0, count)),
                              BufferView::Of(absl::MakeSpan(out)), call);
      default: return absl::InternalError("kind not covered");
    }
  }, &traffic), absl::StrCat(CollectiveKindName(kind), " ", AlgorithmName(algorithm)));
  return traffic.cross.load();
}

TEST(NodeOrderTest, BytesCrossNodesAsWhenTheRanksWereLaunchedNodeByNode) {
  const size_t count = 64 << 10;  // 256 KiB a block
  for (const std::vector<int>& alternating : {std::vector<int>{0, 1, 0, 1},
                                              std::vector<int>{0, 1, 2, 0, 1, 2}}) {
    std::vector<int> blocked = alternating;
    std::sort(blocked.begin(), blocked.end());
    for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                CollectiveKind::kAllGather}) {
      for (Algorithm algorithm : AlgorithmsFor(kind)) {
        SCOPED_TRACE(absl::StrCat(CollectiveKindName(kind), " ", AlgorithmName(algorithm), " on ",
                                  alternating.size(), " ranks"));
        const uint64_t renumbered = CrossBytes(alternating, alternating, kind, algorithm, count);
        const uint64_t launched_by_node = CrossBytes(blocked, blocked, kind, algorithm, count);
        EXPECT_EQ(renumbered, launched_by_node);
        EXPECT_GT(renumbered, 0u);
        if (algorithm == Algorithm::kRing) {
          // Node-blind, every step of the ring crosses: twice the bytes on 2 nodes.
          const uint64_t blind = CrossBytes(alternating, {}, kind, algorithm, count);
          EXPECT_GE(blind, renumbered * (alternating.size() == 4 ? 2 : 3) / 2);
        }
      }
    }
  }
}

TEST(NodeOrderTest, HierarchicalRunsItsNodePhasesOverTheNodeTransport) {
  // With a node transport, nothing goes between two ranks of a node over the
  // communicator's own transport: hierarchical's phases inside a node take the
  // node transport, in the node's own numbering.
  const std::vector<int> nodes = {0, 1, 0, 1, 0, 1};
  const size_t count = 3 << 16;
  const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, 6, count, 17);
  Traffic traffic;
  CallOptions call;
  call.algorithm = Algorithm::kHierarchical;
  ExpectAllOk(RunLayout(nodes, NodesOf(nodes), [&](Communicator& comm) -> absl::Status {
    if (comm.options().ranks_per_node != 3) return absl::InternalError("ranks_per_node");
    std::vector<std::byte> mine = inputs.data[comm.rank()];
    LOOM_RETURN_IF_ERROR(comm.AllReduce(ViewOf(mine, DType::kF32), MutableViewOf(mine, DType::kF32),
                                        ReduceOp::kSum, call));
    return ExpectReduction(inputs, ReduceOp::kSum, 0, ViewOf(mine, DType::kF32));
  }, &traffic, /*node_groups=*/true), "hierarchical");
  EXPECT_EQ(traffic.within.load(), 0u);
  EXPECT_GT(traffic.cross.load(), 0u);
}

// ---------------------------------------------------------------------------
// Splits, determinism.

TEST(NodeOrderTest, SplitsKeepTheirMembersNodes) {
  // World {0,1,0,1,0,1,0,1}: the even ranks share node 0.
  const std::vector<int> nodes = {0, 1, 0, 1, 0, 1, 0, 1};
  ExpectAllOk(RunLayout(nodes, NodesOf(nodes), [&](Communicator& comm) -> absl::Status {
    EXPECT_THAT(comm.NodeOrder(), ElementsAre(0, 2, 4, 6, 1, 3, 5, 7));
    EXPECT_EQ(comm.options().ranks_per_node, 4);
    const int r = comm.rank();
    // A half by rank, {0..3} or {4..7}: two nodes of 2, renumbered.
    std::vector<int> half(4);
    std::iota(half.begin(), half.end(), r < 4 ? 0 : 4);
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> by_rank, comm.Split(half));
    EXPECT_THAT(by_rank->NodeOrder(), ElementsAre(0, 2, 1, 3));
    EXPECT_EQ(by_rank->options().ranks_per_node, 2);
    // One node's ranks: no layout at all.
    std::vector<int> one_node = r % 2 == 0 ? std::vector<int>{0, 2, 4, 6} : std::vector<int>{1, 3, 5, 7};
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> node, comm.Split(one_node));
    EXPECT_THAT(node->NodeOrder(), ElementsAre(0, 1, 2, 3));
    EXPECT_EQ(node->options().ranks_per_node, 0);
    // Uneven {0,1,2} + {3..7}: node order, no ranks_per_node.
    std::vector<int> uneven = r < 3 ? std::vector<int>{0, 1, 2} : std::vector<int>{3, 4, 5, 6, 7};
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> part, comm.Split(uneven));
    if (r < 3) {
      EXPECT_THAT(part->NodeOrder(), ElementsAre(0, 2, 1));
    } else {
      EXPECT_THAT(part->NodeOrder(), ElementsAre(0, 2, 4, 1, 3));  // ranks 3,5,7 then 4,6
    }
    EXPECT_EQ(part->options().ranks_per_node, 0);
    // Every split still computes right, in the caller's numbering.
    for (Communicator* c : {by_rank.get(), node.get(), part.get()}) {
      LOOM_RETURN_IF_ERROR(CheckEveryKind(*c, Algorithm::kAuto, 1001, false, DType::kF32, 5));
      LOOM_RETURN_IF_ERROR(CheckEveryKind(*c, Algorithm::kRing, 257, true, DType::kI32, 6));
    }
    return absl::OkStatus();
  }), "splits");
}

TEST(NodeOrderTest, SplitsOfWholeNodesKeepTheNodeTransport) {
  // World {0,1,0,1}: node 0 holds ranks 0 and 2, node 1 ranks 1 and 3; node
  // transports numbered in rank order. A split {1,0,3,2} holds whole nodes with each
  // rank at its place: it keeps the node transport, and hierarchical sends nothing
  // inside a node over the world's transport. A split {2,1,0,3} puts rank 2 first on
  // its node: it drops it.
  const std::vector<int> nodes = {0, 1, 0, 1};
  const size_t count = 3 << 15;
  const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, 4, count, 23);
  CallOptions call;
  call.algorithm = Algorithm::kHierarchical;
  for (const std::vector<int>& members : {std::vector<int>{1, 0, 3, 2}, std::vector<int>{2, 1, 0, 3}}) {
    const bool keeps = members[0] == 1;
    SCOPED_TRACE(absl::StrCat("split [", absl::StrJoin(members, ","), "]"));
    Traffic traffic;
    ExpectAllOk(RunLayout(nodes, NodesOf(nodes), [&](Communicator& comm) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, comm.Split(members));
      if ((child->options().node_transport != nullptr) != keeps) {
        return absl::InternalError(absl::StrCat("node transport kept: ",
                                                child->options().node_transport != nullptr));
      }
      if (child->options().ranks_per_node != 2) return absl::InternalError("ranks_per_node");
      // The child's rank c holds world rank members[c]'s input.
      std::vector<std::byte> mine = inputs.data[members[child->rank()]];
      LOOM_RETURN_IF_ERROR(child->AllReduce(ViewOf(mine, DType::kF32),
                                            MutableViewOf(mine, DType::kF32), ReduceOp::kSum, call));
      return ExpectReduction(inputs, ReduceOp::kSum, 0, ViewOf(mine, DType::kF32));
    }, &traffic, /*node_groups=*/true), "split");
    EXPECT_GT(traffic.cross.load(), 0u);
    if (keeps) {
      EXPECT_EQ(traffic.within.load(), 0u);
    } else {
      EXPECT_GT(traffic.within.load(), 0u);
    }
  }
}

TEST(NodeOrderTest, ANodeTransportOnNodesOfUnequalSizesIsRefusedNamingThem) {
  absl::StatusOr<std::shared_ptr<InprocGroup>> world = InprocGroup::Create(3);
  absl::StatusOr<std::shared_ptr<InprocGroup>> node = InprocGroup::Create(2);
  ASSERT_THAT(world.status(), IsOk());
  ASSERT_THAT(node.status(), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, (*world)->Endpoint(0));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> on_node, (*node)->Endpoint(0));
  CommunicatorOptions options = NodesOf({0, 1, 0});
  options.node_transport = std::move(on_node);
  EXPECT_THAT(Communicator::Create(std::move(endpoint), options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("node_transport needs nodes of equal sizes, but node_of_rank "
                                 "[0,1,0] has nodes of different sizes")));
}

TEST(NodeOrderTest, DeterministicReductionsStillFoldInTheCallersRankOrder) {
  const std::vector<int> nodes = {0, 1, 2, 0, 1, 2};
  const size_t count = 30011;
  const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, 6, count, 99);
  const std::vector<std::byte> want =
      collectives_internal::RankOrderReduce(inputs, ReduceOp::kSum, 0, count);
  CommunicatorOptions options = NodesOf(nodes);
  options.deterministic = true;
  for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kDirect,
                              Algorithm::kHalvingDoubling, Algorithm::kHierarchical}) {
    CallOptions call;
    call.algorithm = algorithm;
    ExpectAllOk(RunLayout(nodes, options, [&](Communicator& comm) -> absl::Status {
      std::vector<std::byte> data = inputs.data[comm.rank()], out(data.size());
      LOOM_RETURN_IF_ERROR(comm.AllReduce(ViewOf(data, DType::kF32),
                                          MutableViewOf(out, DType::kF32), ReduceOp::kSum, call));
      return ExpectSameBytes(ViewOf(want, DType::kF32), ViewOf(out, DType::kF32), "all_reduce");
    }), std::string(AlgorithmName(algorithm)));
  }
}

}  // namespace
}  // namespace loom
