// Time and communication per training step of two tensor-parallel blocks on
// inproc ranks (threads of this process), forward plus backward:
//   BM_MlpBlock        column-parallel h -> 4h, GELU, row-parallel 4h -> h;
//   BM_AttentionBlock  ParallelSelfAttention (column-parallel QKV, causal attention
//                      per local head, row-parallel output).
// Arguments: tp (1, 2, 4) and sequence parallelism (0 off, 1 on). Shapes: s = 128,
// b = 2, h = 256, 8 heads, f32; B = s * b * h * 4 bytes = 256 KiB per activation.
//
// Communication per step and rank, analytically (both blocks alike: one column- and
// one row-parallel projection), for tp = p > 1 (zero for p = 1):
//   SP off: forward all-reduce of the row output (B) + backward all-reduce of the
//           column input gradient (B): logical 2B. A bandwidth-optimal all-reduce
//           (ring, halving-doubling) sends 2(p-1)/p of its buffer: wire 4(p-1)/p B.
//   SP on:  forward all-gather of the input (B gathered) and reduce-scatter of the
//           row output (B); backward all-gather of the output gradient (B) and
//           reduce-scatter of the input gradient (B): logical 4B; each sends
//           (p-1)/p B: wire 4(p-1)/p B, the same wire bytes as without SP (with
//           activations and LayerNorm work cut by p, which is SP's point).
// Counters, per step on rank 0:
//   logical_B / logical_analytic_B   the layers' CommTally next to the formula;
//   wire_sent_B / wire_analytic_B    Communicator::Counters' bytes_sent (all
//                                    collectives) next to the formula;
//   calls                            collective calls.
//
//   ./bazelw run //tensor_parallel/layers:tp_block_benchmark
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/row_parallel_linear.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {
namespace {

constexpr int64_t kSeq = 128, kBatch = 2, kHidden = 256, kHeads = 8;
constexpr uint64_t kActivationBytes = kSeq * kBatch * kHidden * sizeof(float);

Tensor Random(std::vector<int64_t> shape, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(NumElements(shape)));
  for (float& x : v) x = dist(gen);
  return *Tensor::FromValues(std::move(shape), v);
}

// One rank's step and its layers' tally.
struct RankBlock {
  std::function<absl::Status()> step;
  std::function<CommTally()> tally;
};
using SetupFn = std::function<absl::StatusOr<RankBlock>(Communicator&)>;

// RankPool keeps `tp` rank threads, each with its communicator and block, and runs
// one step on all of them per Step() (threads persist, so a step costs no thread
// or communicator creation).
class RankPool {
 public:
  RankPool(int tp, const SetupFn& setup) : tp_(tp), comms_(tp), blocks_(tp), status_(tp) {
    absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(tp);
    if (!group.ok()) {
      setup_status_ = group.status();
      return;
    }
    for (int rank = 0; rank < tp; ++rank) {
      threads_.emplace_back([this, rank, group = *group, &setup] { Worker(rank, *group, setup); });
    }
    MutexLock lock(&mu_);
    while (ready_ != tp_) cv_.Wait(&mu_);
    for (const absl::Status& s : status_) {
      if (!s.ok() && setup_status_.ok()) setup_status_ = s;
    }
  }

  ~RankPool() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.SignalAll();
    for (std::thread& t : threads_) t.join();
  }

  const absl::Status& setup_status() const { return setup_status_; }

  // Step runs one step on every rank and returns the first rank's error.
  absl::Status Step() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    pending_ = tp_;
    ++generation_;
    cv_.SignalAll();
    while (pending_ != 0) cv_.Wait(&mu_);
    for (const absl::Status& s : status_) {
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Rank 0's bytes sent by all collectives, and its layers' tally (between steps).
  uint64_t WireBytesSent() const {
    uint64_t total = 0;
    for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                CollectiveKind::kReduceScatter}) {
      total += comms_[0]->Counters(kind).bytes_sent;
    }
    return total;
  }
  CommTally Tally() const { return blocks_[0].tally(); }

 private:
  void Worker(int rank, InprocGroup& group, const SetupFn& setup) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::Status status = [&]() -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, group.Endpoint(rank));
      LOOM_ASSIGN_OR_RETURN(comms_[rank], Communicator::Create(std::move(endpoint)));
      LOOM_ASSIGN_OR_RETURN(blocks_[rank], setup(*comms_[rank]));
      return absl::OkStatus();
    }();
    uint64_t seen = 0;
    mu_.Lock();
    status_[rank] = status;
    ++ready_;
    cv_.SignalAll();
    while (true) {
      while (!stop_ && generation_ == seen) cv_.Wait(&mu_);
      if (stop_) break;
      seen = generation_;
      mu_.Unlock();  // the step runs without the lock
      absl::Status step_status =
          status.ok() ? blocks_[rank].step() : absl::FailedPreconditionError("setup failed");
      mu_.Lock();
      status_[rank] = step_status;
      if (--pending_ == 0) cv_.SignalAll();
    }
    mu_.Unlock();
  }

  const int tp_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<RankBlock> blocks_;
  std::vector<std::thread> threads_;
  Mutex mu_;
  CondVar cv_;  // ready_, pending_, generation_ or stop_ changed
  std::vector<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  int ready_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status setup_status_;
};

// The rank's input and output-gradient pieces: the sequence piece under SP.
absl::StatusOr<std::pair<Tensor, Tensor>> Inputs(const Communicator& comm, bool sp) {
  const Tensor x = Random({kSeq, kBatch, kHidden}, 1, 1.0f);
  const Tensor dy = Random({kSeq, kBatch, kHidden}, 2, 1.0f);
  if (!sp) return std::make_pair(x.Clone(), dy.Clone());
  const ShardExtent piece = ShardExtentOf(kSeq, comm.size(), comm.rank(), ShardRule::kBalanced);
  LOOM_ASSIGN_OR_RETURN(Tensor xs, x.Slice(0, piece.offset, piece.length));
  LOOM_ASSIGN_OR_RETURN(Tensor dys, dy.Slice(0, piece.offset, piece.length));
  return std::make_pair(std::move(xs), std::move(dys));
}

// GELU, tanh form, and its derivative.
float Gelu(float x) {
  const float c = 0.7978845608f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}
float GeluGrad(float x) {
  const float c = 0.7978845608f;
  const float t = std::tanh(c * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
}

struct MlpState {
  std::optional<ColumnParallelLinear> fc1;
  std::optional<RowParallelLinear> fc2;
  Tensor x, dy, pre;
};

absl::StatusOr<RankBlock> MlpSetup(Communicator& comm, bool sp) {
  auto state = std::make_shared<MlpState>();
  const Tensor w1 = Random({4 * kHidden, kHidden}, 3, 0.05f), b1 = Random({4 * kHidden}, 4, 0.05f);
  const Tensor w2 = Random({kHidden, 4 * kHidden}, 5, 0.05f), b2 = Random({kHidden}, 6, 0.05f);
  ColumnParallelOptions column;
  column.sequence_parallel = sp;
  column.sequence_length = kSeq;
  RowParallelOptions row;
  row.sequence_parallel = sp;
  row.sequence_length = kSeq;
  LOOM_ASSIGN_OR_RETURN(state->fc1, ColumnParallelLinear::Create(w1, &b1, comm, column));
  LOOM_ASSIGN_OR_RETURN(state->fc2, RowParallelLinear::Create(w2, &b2, comm, row));
  LOOM_ASSIGN_OR_RETURN(std::tie(state->x, state->dy), Inputs(comm, sp));
  RankBlock block;
  block.step = [state]() -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(state->pre, state->fc1->Forward(state->x));
    LOOM_ASSIGN_OR_RETURN(absl::Span<const float> pre, state->pre.As<float>());
    std::vector<float> act(pre.size());
    for (size_t i = 0; i < pre.size(); ++i) act[i] = Gelu(pre[i]);
    LOOM_ASSIGN_OR_RETURN(Tensor a, Tensor::FromValues(state->pre.shape(), act));
    LOOM_ASSIGN_OR_RETURN(Tensor y, state->fc2->Forward(a));
    benchmark::DoNotOptimize(y);
    LOOM_ASSIGN_OR_RETURN(Tensor da, state->fc2->Backward(state->dy));
    LOOM_ASSIGN_OR_RETURN(absl::Span<float> g, da.As<float>());
    for (size_t i = 0; i < g.size(); ++i) g[i] *= GeluGrad(pre[i]);
    LOOM_ASSIGN_OR_RETURN(Tensor dx, state->fc1->Backward(da));
    benchmark::DoNotOptimize(dx);
    return absl::OkStatus();
  };
  block.tally = [state] { return state->fc1->comm_tally() + state->fc2->comm_tally(); };
  return block;
}

struct AttentionState {
  std::optional<ParallelSelfAttention> attn;
  Tensor x, dy;
};

absl::StatusOr<RankBlock> AttentionSetup(Communicator& comm, bool sp) {
  auto state = std::make_shared<AttentionState>();
  const Tensor wqkv = Random({3 * kHidden, kHidden}, 7, 0.05f), bqkv = Random({3 * kHidden}, 8, 0.05f);
  const Tensor wo = Random({kHidden, kHidden}, 9, 0.05f), bo = Random({kHidden}, 10, 0.05f);
  ParallelSelfAttentionOptions options;
  options.num_heads = kHeads;
  options.sequence_parallel = sp;
  options.sequence_length = kSeq;
  LOOM_ASSIGN_OR_RETURN(state->attn,
                        ParallelSelfAttention::Create(wqkv, &bqkv, wo, &bo, comm, options));
  LOOM_ASSIGN_OR_RETURN(std::tie(state->x, state->dy), Inputs(comm, sp));
  RankBlock block;
  block.step = [state]() -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(Tensor y, state->attn->Forward(state->x));
    benchmark::DoNotOptimize(y);
    LOOM_ASSIGN_OR_RETURN(Tensor dx, state->attn->Backward(state->dy));
    benchmark::DoNotOptimize(dx);
    return absl::OkStatus();
  };
  block.tally = [state] { return state->attn->comm_tally(); };
  return block;
}

void RunBlock(benchmark::State& state,
              absl::StatusOr<RankBlock> (*setup)(Communicator&, bool)) {
  const int tp = static_cast<int>(state.range(0));
  const bool sp = state.range(1) != 0;
  RankPool pool(tp, [&](Communicator& comm) { return setup(comm, sp); });
  if (!pool.setup_status().ok()) {
    state.SkipWithError(pool.setup_status().ToString().c_str());
    return;
  }
  // One warm-up step: first-touch allocations and the selector's first choices.
  if (absl::Status s = pool.Step(); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  const uint64_t wire0 = pool.WireBytesSent();
  const uint64_t logical0 = pool.Tally().total(), calls0 = pool.Tally().calls;
  for (auto _ : state) {
    if (absl::Status s = pool.Step(); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
  }
  const double steps = static_cast<double>(state.iterations());
  const double p = tp;
  const double b = static_cast<double>(kActivationBytes);
  state.counters["logical_B"] = static_cast<double>(pool.Tally().total() - logical0) / steps;
  state.counters["logical_analytic_B"] = tp == 1 ? 0.0 : (sp ? 4.0 : 2.0) * b;
  state.counters["wire_sent_B"] = static_cast<double>(pool.WireBytesSent() - wire0) / steps;
  state.counters["wire_analytic_B"] = 4.0 * (p - 1.0) / p * b;
  state.counters["calls"] = static_cast<double>(pool.Tally().calls - calls0) / steps;
  state.SetBytesProcessed(static_cast<int64_t>(state.counters["logical_B"].value * steps));
}

void BM_MlpBlock(benchmark::State& state) { RunBlock(state, MlpSetup); }
void BM_AttentionBlock(benchmark::State& state) { RunBlock(state, AttentionSetup); }

void Args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tp", "sp"});
  for (int tp : {1, 2, 4}) {
    for (int sp : {0, 1}) b->Args({tp, sp});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_MlpBlock)->Apply(Args);
BENCHMARK(BM_AttentionBlock)->Apply(Args);

}  // namespace
}  // namespace loom
