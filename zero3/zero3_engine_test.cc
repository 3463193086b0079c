#include "zero3/zero3_engine.h"

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/inproc_ranks_testing.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "zero3/partition.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A model of odd sizes: an empty tensor, tiny persistent ones, parameters larger
// than a bucket, and several sharing one.
std::vector<ParamSpec> Specs() {
  return {{"wte", {37, 5}},  {"ln0.g", {5}},     {"attn.w", {5, 15}}, {"attn.b", {15}},
          {"empty", {0}},    {"mlp.w1", {5, 23}}, {"mlp.b1", {3}},    {"mlp.w2", {23, 5}},
          {"scalar", {}},    {"head.w", {5, 41}}};
}

PartitionOptions Options(int dp, int64_t bucket = 96, int64_t threshold = 4) {
  PartitionOptions options;
  options.dp_size = dp;
  options.bucket_numel = bucket;
  options.persistence_threshold = threshold;
  options.align_numel = 16;
  return options;
}

std::vector<float> InitialParams(const Partition& partition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> flat(static_cast<size_t>(partition.TotalNumel()));
  for (float& x : flat) x = dist(rng);
  return flat;
}

// The toy loss of rank r on pass k: its gradient for element i of parameter p is
// w * a + c, with a and c drawn from (r, k, p, i): it depends on the gathered
// value and differs per rank, so both the gather and the reduction are checked.
float Grad(float w, int rank, int pass, int param, int64_t i) {
  const uint32_t h = static_cast<uint32_t>((rank * 7919 + pass * 104729 + param * 1299709) ^
                                           static_cast<int>(i * 2654435761u));
  const float a = 0.5f + static_cast<float>(h % 97) / 97.0f;
  const float c = static_cast<float>(static_cast<int>(h % 1013) - 506) / 1013.0f;
  return w * a + c;
}

// Grads: Grad for every element of parameter `param`'s acquired values `w`.
std::vector<float> Grads(absl::Span<const float> w, int rank, int pass, int param) {
  std::vector<float> g(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    g[i] = Grad(w[i], rank, pass, param, static_cast<int64_t>(i));
  }
  return g;
}

float RoundBF16(float x) { return ToFloat(ToBFloat16(x)); }

// Which parameters rank `rank` uses: all, unless `skip_on_rank1` names one that
// rank 1 leaves out (a branch taken on the other ranks only).
using Uses = std::function<bool(int rank, int param)>;

std::unique_ptr<Communicator> MakeCommunicator(std::unique_ptr<Transport> endpoint,
                                               bool deterministic) {
  CommunicatorOptions options;
  options.deterministic = deterministic;
  options.timeout = absl::Seconds(60);
  return *Communicator::Create(std::shared_ptr<Transport>(std::move(endpoint)), options);
}

// RunRanks runs `body(rank, comm)` on dp threads over one inproc group.
// deterministic: rank-order folds, so the references below are bitwise; it costs
// the reduce-scatter extra traffic, so the traffic test turns it off.
void RunRanks(int dp, const std::function<void(int, Communicator&)>& body,
              bool deterministic = true) {
  CommunicatorOptions options = InprocTestOptions();
  options.deterministic = deterministic;
  RunInprocRanks(dp, body, options);
}

// RunRanksWithWorld is RunRanks with a second communicator over the same ranks,
// `world`, for what a training job all-reduces beside the engine (the engine's
// own communicator is driven by the engine alone).
void RunRanksWithWorld(int dp, const std::function<void(int, Communicator&, Communicator&)>& body) {
  std::shared_ptr<InprocGroup> dp_group = *InprocGroup::Create(dp);
  std::shared_ptr<InprocGroup> world_group = *InprocGroup::Create(dp);
  std::vector<std::unique_ptr<Transport>> dp_ends, world_ends;
  for (int r = 0; r < dp; ++r) {
    dp_ends.push_back(*dp_group->Endpoint(r));
    world_ends.push_back(*world_group->Endpoint(r));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < dp; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = MakeCommunicator(std::move(dp_ends[r]), true);
      std::unique_ptr<Communicator> world = MakeCommunicator(std::move(world_ends[r]), true);
      body(r, *comm, *world);
    });
  }
  for (std::thread& t : threads) t.join();
}

AdamWHyper Hyper(int64_t step, float eps = AdamWHyper().eps) {
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = step;
  hyper.eps = eps;
  return hyper;
}

// ReducedGrad: the dp-averaged gradient of the whole model (flat), computed in one
// place, for the f32 master weights `master`. Each rank's f32 gradient (from the
// compute copy: bf16-rounded in bf16) is averaged over ranks in rank order, then
// (bf16) rounded once into the bf16 gradient; passes accumulate. Stage 1 reduces
// once per step instead: each rank first accumulates its passes in its own (bf16:
// rounded) whole gradient, and the average of those is rounded once.
std::vector<float> ReducedGrad(const Partition& partition, DType dtype,
                               absl::Span<const float> master, int passes, const Uses& uses,
                               int stage) {
  const int dp = partition.options().dp_size;
  const bool bf16 = dtype == DType::kBF16;
  auto round = [bf16](float x) { return bf16 ? RoundBF16(x) : x; };
  std::vector<float> compute(master.begin(), master.end());
  for (float& x : compute) x = round(x);
  std::vector<float> grad(master.size(), 0.0f);
  for (int p = 0; p < partition.num_params(); ++p) {
    const int64_t base = partition.FlatOffset(p);
    const bool per_step = stage == 1 && !partition.slot(p).persistent;
    for (int64_t i = 0; i < partition.slot(p).numel; ++i) {
      std::vector<float> local(dp, 0.0f);  // stage 1: each rank's accumulated gradient
      for (int pass = 0; pass < passes; ++pass) {
        float sum = 0.0f;
        for (int r = 0; r < dp; ++r) {
          const float g = uses(r, p) ? Grad(compute[base + i], r, pass, p, i) : 0.0f;
          local[r] = round(local[r] + g);
          sum = r == 0 ? g : sum + g;
        }
        if (!per_step) grad[base + i] = round(grad[base + i] + sum / static_cast<float>(dp));
      }
      if (per_step) {
        float sum = local[0];
        for (int r = 1; r < dp; ++r) sum += local[r];
        grad[base + i] = round(sum / static_cast<float>(dp));
      }
    }
  }
  return grad;
}

// SquaredNorm: sum of (grad / passes)^2 * weight[p] over the whole model, in double.
double SquaredNorm(const Partition& partition, absl::Span<const float> grad, int passes,
                   absl::Span<const float> weight) {
  double total = 0.0;
  for (int p = 0; p < partition.num_params(); ++p) {
    for (int64_t i = 0; i < partition.slot(p).numel; ++i) {
      const double g = static_cast<double>(grad[partition.FlatOffset(p) + i]) / passes;
      total += g * g * static_cast<double>(weight[p]);
    }
  }
  return total;
}

// ClipFactor: what a job passes as grad_scale for global-norm clipping.
double ClipFactor(double squared_norm, double max_norm) {
  return std::min(1.0, max_norm / (std::sqrt(squared_norm) + 1e-6));
}

struct ReferenceRun {
  std::vector<float> params;
  std::vector<double> clips;  // per step, with max_norm > 0
};

// RunReference: the same training on the whole model in one place (ReducedGrad,
// then AdamW with Hyper(step, eps)). max_norm > 0 clips: the gradient is pre-scaled
// by the clip factor of its global norm, rounded to f32 as AdamW rounds
// grad_scale, and AdamW gets only the 1 / passes.
ReferenceRun RunReference(const Partition& partition, DType dtype, int steps, int passes,
                          const Uses& uses, int stage, double max_norm,
                          float eps = AdamWHyper().eps) {
  ReferenceRun run;
  std::vector<float>& master = run.params;
  master = InitialParams(partition);
  AdamWState state = *AdamWState::Create(static_cast<int64_t>(master.size()));
  const std::vector<float> ones(partition.num_params(), 1.0f);
  for (int step = 1; step <= steps; ++step) {
    std::vector<float> grad = ReducedGrad(partition, dtype, master, passes, uses, stage);
    if (max_norm > 0) {
      const double clip = ClipFactor(SquaredNorm(partition, grad, passes, ones), max_norm);
      run.clips.push_back(clip);
      for (float& g : grad) g *= static_cast<float>(clip);
    }
    AdamWHyper hyper = Hyper(step, eps);
    hyper.grad_scale = 1.0f / static_cast<float>(passes);
    EXPECT_THAT(AdamWStep(hyper, absl::MakeSpan(master), grad, state), IsOk());
  }
  return run;
}

std::vector<float> Reference(const Partition& partition, DType dtype, int steps, int passes,
                             const Uses& uses, int stage = 3) {
  return RunReference(partition, dtype, steps, passes, uses, stage, 0.0).params;
}

struct RunResult {
  std::vector<std::vector<float>> params;  // GatherAll on each rank
  std::vector<Zero3Stats> stats;
  std::vector<CollectiveCounters> gathers, reduces, all_reduces;
};

// BeforeStep runs on each rank between its last backward pass and Step.
using BeforeStep = std::function<void(int rank, Zero3Engine& engine)>;

// Train runs `steps` steps of `passes` forward + backward passes per step on dp
// ranks: forward acquires every used parameter in order, backward in reverse
// and adds its gradient.
RunResult Train(const Partition& partition, const Zero3Options& options, int steps, int passes,
                const Uses& uses, bool deterministic = true,
                const BeforeStep& before_step = nullptr) {
  const int dp = partition.options().dp_size;
  RunResult result;
  result.params.resize(dp);
  result.stats.resize(dp);
  result.gathers.resize(dp);
  result.reduces.resize(dp);
  result.all_reduces.resize(dp);
  const std::vector<float> initial = InitialParams(partition);
  RunRanks(dp, [&](int rank, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                              Zero3Engine::Create(partition, &comm, initial, options));
    for (int step = 1; step <= steps; ++step) {
      for (int pass = 0; pass < passes; ++pass) {
        LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
        for (int p = 0; p < partition.num_params(); ++p) {
          if (!uses(rank, p)) continue;
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
          ASSERT_EQ(static_cast<int64_t>(w.size()), partition.slot(p).numel);
        }
        LOOM_ASSERT_OK(engine->EndPass());
        LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
        for (int p = partition.num_params() - 1; p >= 0; --p) {
          if (!uses(rank, p)) continue;
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
          const std::vector<float> g = Grads(w, rank, pass, p);
          LOOM_ASSERT_OK(engine->AddGrad(p, g));
        }
        LOOM_ASSERT_OK(engine->EndPass());
      }
      if (before_step) before_step(rank, *engine);
      LOOM_ASSERT_OK(engine->Step(Hyper(step)));
    }
    // The training's traffic, before GatherAll adds its own.
    result.gathers[rank] = comm.Counters(CollectiveKind::kAllGather);
    result.reduces[rank] = comm.Counters(CollectiveKind::kReduceScatter);
    result.all_reduces[rank] = comm.Counters(CollectiveKind::kAllReduce);
    result.stats[rank] = engine->Stats();
    LOOM_ASSERT_OK_AND_ASSIGN(result.params[rank], engine->GatherAll());
  }, deterministic);
  return result;
}

bool UseAll(int, int) { return true; }

TEST(Zero3EngineTest, F32TrainingEqualsTheUnshardedReferenceBitwise) {
  for (const int dp : {1, 2, 3, 4}) {
    for (const int passes : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("dp ", dp, " passes ", passes));
      LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
      Zero3Options options;
      const RunResult run = Train(partition, options, 3, passes, UseAll);
      const std::vector<float> reference = Reference(partition, DType::kF32, 3, passes, UseAll);
      for (int r = 0; r < dp; ++r) EXPECT_EQ(run.params[r], reference) << "rank " << r;
    }
  }
}

TEST(Zero3EngineTest, BF16MixedPrecisionEqualsItsReferenceBitwise) {
  for (const int dp : {2, 3}) {
    SCOPED_TRACE(absl::StrCat("dp ", dp));
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
    Zero3Options options;
    options.compute_dtype = DType::kBF16;
    options.offload_optimizer = true;
    options.adamw_threads = 2;
    const RunResult run = Train(partition, options, 3, 2, UseAll);
    const std::vector<float> reference = Reference(partition, DType::kBF16, 3, 2, UseAll);
    for (int r = 0; r < dp; ++r) EXPECT_EQ(run.params[r], reference) << "rank " << r;
  }
}

// Prefetch depth and the live-byte bound change when gathers happen, never the
// result; the peak of gathered bytes stays within the bound.
TEST(Zero3EngineTest, PrefetchDepthAndLiveBoundChangeNothingButPeaks) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(3)));
  const std::vector<float> reference = Reference(partition, DType::kF32, 2, 1, UseAll);
  const int64_t bucket_bytes = partition.MaxBucketNumel() * 4;
  for (const int depth : {0, 1, 3, 100}) {
    for (const int64_t bound : {int64_t{0}, 2 * bucket_bytes}) {
      SCOPED_TRACE(absl::StrCat("depth ", depth, " bound ", bound));
      Zero3Options options;
      options.prefetch_depth = depth;
      options.max_live_gathered_bytes = bound;
      const RunResult run = Train(partition, options, 2, 1, UseAll);
      for (int r = 0; r < 3; ++r) {
        EXPECT_EQ(run.params[r], reference);
        const int64_t slots = std::min<int64_t>(depth + 1, partition.num_buckets());
        int64_t limit = slots * bucket_bytes;
        if (bound > 0) limit = std::min(limit, bound);
        EXPECT_LE(run.stats[r].peak_gathered_bytes, limit);
        EXPECT_GT(run.stats[r].peak_gathered_bytes, 0);
        EXPECT_EQ(run.stats[r].live_gathered_bytes, 0);  // all released after each pass
      }
    }
  }
}

// The gradient-buffer bound changes when a backward pass waits, never the result:
// the buffers allocated (and the peak of those live) stay within max_grad_buffers
// of the largest bucket, also in a kGradients pass, which gathers nothing; the
// waits for gathered buckets and for buffers are counted.
TEST(Zero3EngineTest, GradientBuffersStayWithinTheirBound) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(3)));
  ASSERT_GE(partition.num_buckets(), 4);
  const std::vector<float> reference = Reference(partition, DType::kF32, 2, 2, UseAll);
  const int64_t bucket_bytes = partition.MaxBucketNumel() * 4;
  const int64_t pool_bytes =
      std::min<int64_t>(Zero3Options().prefetch_depth + 1, partition.num_buckets()) * bucket_bytes;
  for (const int bound : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("max_grad_buffers ", bound));
    Zero3Options options;
    options.max_grad_buffers = bound;
    const RunResult run = Train(partition, options, 2, 2, UseAll);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(run.params[r], reference) << "rank " << r;
      EXPECT_LE(run.stats[r].peak_grad_buffer_bytes, bound * bucket_bytes);
      EXPECT_GT(run.stats[r].peak_grad_buffer_bytes, 0);
      EXPECT_LE(run.stats[r].buffer_bytes, pool_bytes + bound * bucket_bytes);
      EXPECT_GT(run.stats[r].gather_wait_seconds, 0.0);
      EXPECT_GE(run.stats[r].grad_buffer_wait_seconds, 0.0);
    }
  }
  // A kGradients pass over every bucket at once (a caller that kept its weights)
  // is bounded the same way.
  const std::vector<float> initial = InitialParams(partition);
  RunRanks(3, [&](int rank, Communicator& comm) {
    Zero3Options options;
    options.max_grad_buffers = 1;
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                              Zero3Engine::Create(partition, &comm, initial, options));
    LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kGradients));
    for (int p = partition.num_params() - 1; p >= 0; --p) {
      const std::vector<float> g(static_cast<size_t>(partition.slot(p).numel), 0.5f + rank);
      LOOM_ASSERT_OK(engine->AddGrad(p, g));
    }
    LOOM_ASSERT_OK(engine->EndPass());
    EXPECT_EQ(engine->Stats().peak_grad_buffer_bytes, bucket_bytes);
    EXPECT_EQ(engine->Stats().reduce_scatters, partition.num_buckets());
  });
}

// Model-state bytes per rank, with P the padded bucket elements and S = P / dp
// this rank's shard (persistent elements cost 16 bytes at every stage):
//   stage 3: 16 S (f32: param, grad, m, v; bf16: param 2, grad 2, master 4, m, v)
//   stage 2: whole params + 12 S (f32: 4 P + grad, m, v; bf16: 2 P + grad 2, master 4, m, v)
//   stage 1: whole params and grads + the rest (f32: 8 P + m, v; bf16: 4 P + master, m, v)
// Traffic per step: stage 3 two all-gathers and one reduce-scatter of the padded
// buckets, (dp-1)/dp of each, 3 P (dp-1)/dp elements, less the forward's last
// window (K = prefetch depth + 1 buckets, PK their padded elements), which the
// backward takes over still gathered: (3 P - PK) (dp-1)/dp; stages 1 and 2 one
// of each, 2 P (dp-1)/dp, plain data parallelism's all-reduce.
TEST(Zero3EngineTest, MemoryAndTrafficMatchTheFormulas) {
  for (const int stage : {1, 2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int dp : {2, 4}) {
        SCOPED_TRACE(absl::StrCat("stage ", stage, " ", DTypeName(dtype), " dp ", dp));
        LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                  Partition::Create(Specs(), Options(dp)));
        Zero3Options options;
        options.stage = stage;
        options.compute_dtype = dtype;
        const RunResult run = Train(partition, options, 1, 1, UseAll, /*deterministic=*/false);
        const int64_t bytes = dtype == DType::kBF16 ? 2 : 4;
        int64_t padded = 0;
        for (int b = 0; b < partition.num_buckets(); ++b) {
          padded += partition.bucket(b).padded_numel;
        }
        const int64_t shard = partition.ShardNumel();
        ASSERT_EQ(shard * dp, padded);
        const int64_t expected_state = stage == 3   ? 16 * shard
                                       : stage == 2 ? bytes * padded + (16 - bytes) * shard
                                                    : 2 * bytes * padded + (16 - 2 * bytes) * shard;
        const int64_t gathers = stage == 3 ? 2 : 1;
        const int buckets = partition.num_buckets();
        // Units handed over still gathered (stage 3) or widened (stages 1 and 2
        // in bf16); only stage 3's save all-gathers.
        const bool buffers = stage == 3 || dtype == DType::kBF16;
        const int handed = buffers ? std::min(options.prefetch_depth + 1, buckets) : 0;
        ASSERT_LT(handed, buckets);  // so that the case shows both
        int64_t handed_numel = 0;
        for (int b = buckets - handed; b < buckets; ++b) {
          handed_numel += partition.bucket(b).padded_numel;
        }
        const int kept = stage == 3 ? handed : 0;
        const int64_t kept_numel = stage == 3 ? handed_numel : 0;
        for (int r = 0; r < dp; ++r) {
          EXPECT_EQ(run.stats[r].model_state_bytes, expected_state);
          EXPECT_EQ(run.stats[r].persistent_state_bytes, 16 * partition.PersistentNumel());
          EXPECT_EQ(run.gathers[r].bytes_sent,
                    static_cast<uint64_t>((gathers * padded - kept_numel) * bytes * (dp - 1) / dp));
          // The communicator reduces bf16 in f32 and rounds once at the end, so the
          // partial sums travel as f32: the reduce-scatter moves 4 bytes per element
          // in both precisions.
          EXPECT_EQ(run.reduces[r].bytes_sent, static_cast<uint64_t>(padded * 4 * (dp - 1) / dp));
          EXPECT_EQ(run.gathers[r].calls, static_cast<uint64_t>(gathers * buckets - kept));
          EXPECT_EQ(run.reduces[r].calls, static_cast<uint64_t>(partition.num_buckets()));
          EXPECT_EQ(run.all_reduces[r].calls, 1u);  // the persistent gradients
          EXPECT_EQ(run.stats[r].gathers, gathers * buckets - kept);
          EXPECT_EQ(run.stats[r].gathers_kept, handed);
          EXPECT_EQ(run.stats[r].gathered_numel_kept, handed_numel);
        }
      }
    }
  }
}

// One rank's shard is the whole model: stage 3 lends it (f32) or widens it (bf16)
// for the passes instead of all-gathering a copy, and trains to the same bits.
TEST(Zero3EngineTest, OneRankUsesItsShardWithoutAllGathers) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(1)));
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int passes : {1, 3}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " passes ", passes));
      Zero3Options options;
      options.compute_dtype = dtype;
      const RunResult run = Train(partition, options, 3, passes, UseAll);
      EXPECT_EQ(run.params[0], Reference(partition, dtype, 3, passes, UseAll));
      EXPECT_EQ(run.gathers[0].calls, 0u);
      EXPECT_EQ(run.gathers[0].bytes_sent, 0u);
    }
  }
}

// Stages 1 and 2 train to the same bits as their references: stage 2's gradients
// are reduced as stage 3's, stage 1's once per step (see Reference).
TEST(Zero3EngineTest, Stages1And2EqualTheirReferencesBitwise) {
  for (const int stage : {1, 2}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int dp : {1, 2, 3}) {
        for (const int passes : {1, 2}) {
          SCOPED_TRACE(absl::StrCat("stage ", stage, " ", DTypeName(dtype), " dp ", dp,
                                    " passes ", passes));
          LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                    Partition::Create(Specs(), Options(dp)));
          Zero3Options options;
          options.stage = stage;
          options.compute_dtype = dtype;
          options.offload_optimizer = dp == 2;
          options.adamw_threads = 2;
          options.prefetch_depth = dp - 1;
          const RunResult run = Train(partition, options, 3, passes, UseAll);
          const std::vector<float> reference =
              Reference(partition, dtype, 3, passes, UseAll, stage);
          for (int r = 0; r < dp; ++r) EXPECT_EQ(run.params[r], reference) << "rank " << r;
        }
      }
    }
  }
  // Stage 1's order of summation differs from the others' with accumulation; the
  // reference above follows it, so this shows the test can tell them apart.
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(3)));
  EXPECT_NE(Reference(partition, DType::kBF16, 3, 2, UseAll, 1),
            Reference(partition, DType::kBF16, 3, 2, UseAll, 3));
}

// WriteShard at stages 1 and 2 changes every rank's shard; the next pass hands out
// the new whole parameters (BeginPass gathers them first).
TEST(Zero3EngineTest, WriteShardRefreshesTheWholeCopiesAtStages1And2) {
  const int dp = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::vector<float> initial = InitialParams(partition);
  std::vector<float> other(initial.size());
  for (size_t i = 0; i < other.size(); ++i) other[i] = 0.25f * static_cast<float>(i % 13) - 1.0f;
  for (const int stage : {1, 2}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat("stage ", stage, " ", DTypeName(dtype)));
      RunRanks(dp, [&](int rank, Communicator& comm) {
        Zero3Options options;
        options.stage = stage;
        options.compute_dtype = dtype;
        std::unique_ptr<Zero3Engine> source = *Zero3Engine::Create(partition, &comm, other, options);
        std::vector<float> sharded(partition.ShardNumel()), persistent(partition.PersistentNumel());
        LOOM_ASSERT_OK(source->ReadShard(absl::MakeSpan(sharded), absl::MakeSpan(persistent)));
        std::unique_ptr<Zero3Engine> engine =
            *Zero3Engine::Create(partition, &comm, initial, options);
        LOOM_ASSERT_OK(engine->WriteShard(sharded, persistent));
        LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
        for (int p = 0; p < partition.num_params(); ++p) {
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
          for (size_t i = 0; i < w.size(); ++i) {
            const float want = other[partition.FlatOffset(p) + static_cast<int64_t>(i)];
            ASSERT_EQ(w[i], dtype == DType::kBF16 ? RoundBF16(want) : want)
                << "rank " << rank << " param " << p << " element " << i;
          }
        }
        LOOM_ASSERT_OK(engine->EndPass());
      });
    }
  }
}


std::unique_ptr<DiskTier> MakeDisk(const std::string& dir) {
  DiskTierOptions options;
  options.directories = {dir};
  options.stripe_bytes = 64 << 10;
  options.checksum_block_bytes = 4096;
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Create(options);
  EXPECT_THAT(tier.status(), IsOk());
  return tier.ok() ? std::move(*tier) : nullptr;
}

int CountFiles(const std::string& dir) {
  int n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// NVMe offload moves the optimizer state (m, v, and in bf16 the f32 master) to
// disk between steps and changes no bit of the training; what leaves memory is
// exactly what the disk holds, and the engine removes its files when it goes.
TEST(Zero3EngineTest, NvmeOffloadKeepsTheStateOnDiskAndChangesNoBit) {
  const int dp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::string dir = FreshTestDirectory("nvme");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  for (const int stage : {1, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat("stage ", stage, " ", DTypeName(dtype)));
      Zero3Options options;
      options.stage = stage;
      options.compute_dtype = dtype;
      const RunResult in_memory = Train(partition, options, 3, 2, UseAll);
      options.optimizer_disk = disk.get();
      const RunResult on_disk = Train(partition, options, 3, 2, UseAll);
      const std::vector<float> reference = Reference(partition, dtype, 3, 2, UseAll, stage);
      const int64_t stored = (dtype == DType::kBF16 ? 12 : 8) * partition.ShardNumel();
      for (int r = 0; r < dp; ++r) {
        EXPECT_EQ(on_disk.params[r], reference) << "rank " << r;
        EXPECT_EQ(on_disk.stats[r].disk_state_bytes, stored);
        EXPECT_EQ(on_disk.stats[r].model_state_bytes,
                  in_memory.stats[r].model_state_bytes - stored);
        EXPECT_EQ(on_disk.stats[r].persistent_state_bytes,
                  in_memory.stats[r].persistent_state_bytes);
      }
      EXPECT_EQ(CountFiles(dir), 0);  // the engines removed their tensors
    }
  }
  EXPECT_GT(disk->stats().bytes_written, 0u);
  EXPECT_GT(disk->stats().bytes_read, 0u);
}

// OneBackwardStep runs one backward pass over every parameter, with the seeded
// gradients of pass 0, and Step(number), on rank `rank`'s engine.
void OneBackwardStep(const Partition& partition, int rank, Zero3Engine& engine, int number) {
  LOOM_ASSERT_OK(engine.BeginPass(Zero3Pass::kBackward));
  for (int p = partition.num_params() - 1; p >= 0; --p) {
    LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine.Acquire(p));
    const std::vector<float> g = Grads(w, rank, 0, p);
    LOOM_ASSERT_OK(engine.AddGrad(p, g));
  }
  LOOM_ASSERT_OK(engine.EndPass());
  LOOM_ASSERT_OK(engine.Step(Hyper(number)));
}

// CopyState moves `from`'s shard and moments into `to` through ReadShard /
// ReadMoments and WriteShard / WriteMoments (a checkpoint's path).
void CopyState(const Partition& partition, const Zero3Engine& from, Zero3Engine& to) {
  const size_t s = static_cast<size_t>(partition.ShardNumel());
  const size_t q = static_cast<size_t>(partition.PersistentNumel());
  std::vector<float> w(s), wp(q), m(s), mp(q), v(s), vp(q);
  LOOM_ASSERT_OK(from.ReadShard(absl::MakeSpan(w), absl::MakeSpan(wp)));
  LOOM_ASSERT_OK(from.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(mp), absl::MakeSpan(v),
                                  absl::MakeSpan(vp)));
  LOOM_ASSERT_OK(to.WriteShard(w, wp));
  LOOM_ASSERT_OK(to.WriteMoments(m, mp, v, vp));
}

// ReadShard / ReadMoments read the state on disk and WriteShard / WriteMoments
// write it: an engine without disk resumes from them to the same bits.
TEST(Zero3EngineTest, NvmeStateMovesThroughReadAndWriteShard) {
  const int dp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::string dir = FreshTestDirectory("nvme_shard");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  const std::vector<float> initial = InitialParams(partition);
  const std::vector<float> reference = Reference(partition, DType::kBF16, 3, 1, UseAll);
  std::vector<std::vector<float>> resumed(dp), moved(dp);
  RunRanks(dp, [&](int rank, Communicator& comm) {
    auto step = [&](Zero3Engine& engine, int number) {
      OneBackwardStep(partition, rank, engine, number);
    };
    Zero3Options options;
    options.compute_dtype = DType::kBF16;
    Zero3Options with_disk = options;
    with_disk.optimizer_disk = disk.get();
    std::unique_ptr<Zero3Engine> first = *Zero3Engine::Create(partition, &comm, initial, with_disk);
    step(*first, 1);
    step(*first, 2);
    std::unique_ptr<Zero3Engine> second = *Zero3Engine::Create(partition, &comm, initial, options);
    CopyState(partition, *first, *second);
    step(*second, 3);
    resumed[rank] = *second->GatherAll();
    // And back onto disk: WriteShard and WriteMoments into a disk engine.
    with_disk.disk_prefix = "third";  // names must not clash with `first`'s, still alive
    std::unique_ptr<Zero3Engine> third = *Zero3Engine::Create(partition, &comm, initial, with_disk);
    CopyState(partition, *first, *third);
    step(*third, 3);
    moved[rank] = *third->GatherAll();
  });
  for (int r = 0; r < dp; ++r) {
    EXPECT_EQ(resumed[r], reference) << "rank " << r;
    EXPECT_EQ(moved[r], reference) << "rank " << r;
  }
}

// Parameter offload (param_disk) keeps each bucket's compute-dtype shard on disk,
// read by every gather (prefetched ahead of use) and written by Step: no bit of
// the training changes, with the optimizer state in memory or on disk too; what
// leaves memory is the shard (f32: the master; bf16: its bf16 copy), and the
// engine removes its files when it goes.
TEST(Zero3EngineTest, ParameterOffloadToDiskChangesNoBit) {
  const int dp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::string dir = FreshTestDirectory("param_disk");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const bool optimizer_too : {false, true}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), optimizer_too ? ", optimizer on disk" : ""));
      Zero3Options options;
      options.compute_dtype = dtype;
      options.prefetch_depth = 1;
      if (optimizer_too) options.optimizer_disk = disk.get();
      const RunResult in_memory = Train(partition, options, 3, 2, UseAll);
      options.param_disk = disk.get();
      const RunResult on_disk = Train(partition, options, 3, 2, UseAll);
      const std::vector<float> reference = Reference(partition, dtype, 3, 2, UseAll);
      const int64_t shard = (dtype == DType::kBF16 ? 2 : 4) * partition.ShardNumel();
      for (int r = 0; r < dp; ++r) {
        EXPECT_EQ(on_disk.params[r], reference) << "rank " << r;
        EXPECT_EQ(on_disk.stats[r].model_state_bytes,
                  in_memory.stats[r].model_state_bytes - shard);
        EXPECT_EQ(on_disk.stats[r].disk_state_bytes,
                  in_memory.stats[r].disk_state_bytes + shard);
        // Every gather read its shard. Of 3 steps x 2 passes x (forward +
        // backward) x the buckets, each step's F B F B hands its last 2 units
        // (prefetch depth 1) over to the next pass three times, ungathered.
        EXPECT_EQ(on_disk.stats[r].param_disk_reads, on_disk.stats[r].gathers);
        EXPECT_EQ(on_disk.stats[r].gathers_kept, 3 * 3 * 2);
        EXPECT_EQ(on_disk.stats[r].gathers + on_disk.stats[r].gathers_kept,
                  3 * 2 * 2 * partition.num_buckets());
        EXPECT_EQ(on_disk.stats[r].gathers, in_memory.stats[r].gathers);
      }
      EXPECT_EQ(CountFiles(dir), 0);
    }
  }
  EXPECT_GT(disk->stats().reads, 0u);
}

// AcquireBf16 hands out, in every pass of every step, the bf16 values Acquire's are
// the exact widening of, at every stage and dp (the one-rank shard, the gathered
// bucket, the whole copy), and with the shards on disk where the gather lands in the
// pool (dp 2); Unimplemented in f32, for persistent parameters and for a one-rank
// shard staged from disk. Training with it changes no bit.
TEST(Zero3EngineTest, AcquireBf16IsWhatAcquireWidens) {
  const std::string dir = FreshTestDirectory("acquire_bf16");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  struct Case {
    DType dtype;
    int stage, dp;
    bool on_disk;
  };
  std::vector<Case> cases = {{DType::kF32, 3, 1, false}, {DType::kF32, 3, 2, false},
                             {DType::kBF16, 3, 1, true}, {DType::kBF16, 3, 2, true}};
  for (const int stage : {1, 2, 3}) {
    for (const int dp : {1, 2, 3}) cases.push_back({DType::kBF16, stage, dp, false});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), " stage ", c.stage, " dp ", c.dp,
                              c.on_disk ? " shards on disk" : ""));
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(c.dp)));
    Zero3Options options;
    options.compute_dtype = c.dtype;
    options.stage = c.stage;
    options.prefetch_depth = 1;
    if (c.on_disk) options.param_disk = disk.get();
    const std::vector<float> initial = InitialParams(partition);
    std::vector<std::vector<float>> params(c.dp);
    std::vector<int> lent(c.dp, 0);
    RunRanks(c.dp, [&](int rank, Communicator& comm) {
      LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                Zero3Engine::Create(partition, &comm, initial, options));
      auto check = [&](int p, absl::Span<const float> w) {
        const absl::StatusOr<absl::Span<const BFloat16>> w16 = engine->AcquireBf16(p);
        const bool expected = c.dtype == DType::kBF16 && !partition.slot(p).persistent &&
                              !(c.on_disk && c.dp == 1 && c.stage == 3);
        if (!expected) {
          EXPECT_TRUE(absl::IsUnimplemented(w16.status())) << p << ": " << w16.status();
          return;
        }
        ASSERT_THAT(w16, IsOk()) << p;
        ASSERT_EQ(w16->size(), w.size()) << p;
        for (size_t i = 0; i < w.size(); ++i) {
          uint32_t widened = 0, acquired = 0;
          const float wide = ToFloat((*w16)[i]);
          std::memcpy(&widened, &wide, sizeof(widened));
          std::memcpy(&acquired, &w[i], sizeof(acquired));
          ASSERT_EQ(widened, acquired) << "parameter " << p << " element " << i;
        }
        ++lent[rank];
      };
      for (int step = 1; step <= 2; ++step) {
        for (int pass = 0; pass < 2; ++pass) {
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
          for (int p = 0; p < partition.num_params(); ++p) {
            LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
            check(p, w);
          }
          LOOM_ASSERT_OK(engine->EndPass());
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
          for (int p = partition.num_params() - 1; p >= 0; --p) {
            LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
            check(p, w);
            const std::vector<float> g = Grads(w, rank, pass, p);
            LOOM_ASSERT_OK(engine->AddGrad(p, g));
          }
          LOOM_ASSERT_OK(engine->EndPass());
        }
        LOOM_ASSERT_OK(engine->Step(Hyper(step)));
      }
      LOOM_ASSERT_OK_AND_ASSIGN(params[rank], engine->GatherAll());
    });
    const std::vector<float> reference = Reference(partition, c.dtype, 2, 2, UseAll, c.stage);
    for (int r = 0; r < c.dp; ++r) {
      EXPECT_EQ(params[r], reference) << "rank " << r;
      if (c.dtype == DType::kBF16 && !(c.on_disk && c.dp == 1 && c.stage == 3)) {
        EXPECT_GT(lent[r], 0) << "rank " << r;
      } else {
        EXPECT_EQ(lent[r], 0) << "rank " << r;
      }
    }
  }
  EXPECT_EQ(CountFiles(dir), 0);
}

// In bf16 a parameter is widened to f32 by its first Acquire in a pass, not with
// its bucket: one a model only multiplies (AcquireBf16) is never widened. Over
// stages 1-3 and dp 1-2, two steps of a forward that takes the matrices in bf16 only
// and a backward that takes them in bf16 first and then in f32: the elements widened
// are exactly the f32 acquisitions', and every widening is the bf16 copy's bits
// (after a Step too, where a widening from before the Step must not be handed out).
TEST(Zero3EngineTest, Bf16ParametersAreWidenedOnlyWhenAcquiredInF32) {
  for (const int stage : {1, 2, 3}) {
    for (const int dp : {1, 2}) {
      SCOPED_TRACE(absl::StrCat("stage ", stage, " dp ", dp));
      LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                Partition::Create(Specs(), Options(dp)));
      Zero3Options options;
      options.compute_dtype = DType::kBF16;
      options.stage = stage;
      options.prefetch_depth = 1;
      const std::vector<float> initial = InitialParams(partition);
      // The matrices (two dimensions) are the products' operands.
      auto is_matrix = [&](int p) {
        return partition.slot(p).shape.size() == 2 && !partition.slot(p).persistent;
      };
      int64_t f32_numel = 0;  // what one pass widens: the sharded parameters read in f32
      for (int p = 0; p < partition.num_params(); ++p) {
        if (!partition.slot(p).persistent) f32_numel += partition.slot(p).numel;
      }
      int64_t matrix_numel = 0;
      for (int p = 0; p < partition.num_params(); ++p) {
        if (is_matrix(p)) matrix_numel += partition.slot(p).numel;
      }
      ASSERT_GT(matrix_numel, 0);
      RunRanks(dp, [&](int rank, Communicator& comm) {
        LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                  Zero3Engine::Create(partition, &comm, initial, options));
        auto same_bits = [](int p, absl::Span<const BFloat16> w16, absl::Span<const float> w) {
          ASSERT_EQ(w16.size(), w.size()) << p;
          for (size_t i = 0; i < w.size(); ++i) {
            const float wide = ToFloat(w16[i]);
            ASSERT_EQ(std::memcmp(&wide, &w[i], sizeof(float)), 0)
                << "parameter " << p << " element " << i;
          }
        };
        for (int step = 1; step <= 2; ++step) {
          int64_t before = engine->Stats().widened_numel;
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
          for (int p = 0; p < partition.num_params(); ++p) {
            if (is_matrix(p)) {
              LOOM_ASSERT_OK(engine->AcquireBf16(p).status());
              continue;
            }
            LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const float> w, engine->Acquire(p));
            if (!partition.slot(p).persistent) {
              LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const BFloat16> w16,
                                        engine->AcquireBf16(p));
              same_bits(p, w16, w);
            }
          }
          LOOM_ASSERT_OK(engine->EndPass());
          EXPECT_EQ(engine->Stats().widened_numel - before, f32_numel - matrix_numel);
          before = engine->Stats().widened_numel;
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
          for (int p = partition.num_params() - 1; p >= 0; --p) {
            if (is_matrix(p)) {
              LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const BFloat16> w16,
                                        engine->AcquireBf16(p));
              LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const float> w, engine->Acquire(p));
              same_bits(p, w16, w);
              // A second Acquire in the pass widens nothing more.
              LOOM_ASSERT_OK(engine->Acquire(p).status());
            }
            LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<const float> w, engine->Acquire(p));
            const std::vector<float> g = Grads(w, rank, step, p);
            LOOM_ASSERT_OK(engine->AddGrad(p, g));
          }
          LOOM_ASSERT_OK(engine->EndPass());
          // Every sharded parameter once: the buckets kept gathered from the forward
          // (its last window: mlp.w2 and head.w here) hold matrices only, which the
          // forward did not widen.
          EXPECT_EQ(engine->Stats().widened_numel - before, f32_numel);
          LOOM_ASSERT_OK(engine->Step(Hyper(step)));
        }
      });
    }
  }
}

// Gradient offload (grad_disk) keeps each bucket's gradient shard on disk, added
// into by every reduce-scatter and read by the norm and the step: the parameters
// and the norms are bitwise those of the shards in memory, at stages 2 and 3, in
// f32 and bf16, two backward passes per step (the second reads what the first
// stored); what leaves memory is the gradient shard, less the staging shard the
// communication thread adds in; stage 1 refuses it; the files go with the engine.
TEST(Zero3EngineTest, GradientOffloadToDiskChangesNoBit) {
  const int dp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::string dir = FreshTestDirectory("grad_disk");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  const std::vector<float> ones(static_cast<size_t>(partition.num_params()), 1.0f);
  for (const int stage : {2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat("stage ", stage, ", ", DTypeName(dtype)));
      std::vector<std::vector<double>> norms(dp);
      const BeforeStep record_norm = [&](int rank, Zero3Engine& engine) {
        LOOM_ASSERT_OK(engine.ReduceGradients());
        LOOM_ASSERT_OK_AND_ASSIGN(const double norm, engine.ReducedGradSquaredNorm(ones));
        norms[static_cast<size_t>(rank)].push_back(norm);
      };
      Zero3Options options;
      options.stage = stage;
      options.compute_dtype = dtype;
      const RunResult in_memory = Train(partition, options, 3, 2, UseAll, true, record_norm);
      const std::vector<std::vector<double>> memory_norms = norms;
      norms.assign(dp, {});
      options.grad_disk = disk.get();
      const RunResult on_disk = Train(partition, options, 3, 2, UseAll, true, record_norm);
      const int64_t element = dtype == DType::kBF16 ? 2 : 4;
      const int64_t shard = element * partition.ShardNumel();
      int64_t largest = 0;
      for (int b = 0; b < partition.num_buckets(); ++b) {
        largest = std::max(largest, partition.bucket(b).shard_numel);
      }
      for (int r = 0; r < dp; ++r) {
        EXPECT_EQ(on_disk.params[r], in_memory.params[r]) << "rank " << r;
        EXPECT_EQ(norms[r], memory_norms[r]) << "rank " << r;
        EXPECT_EQ(norms[r].size(), 3u);
        EXPECT_EQ(on_disk.stats[r].model_state_bytes,
                  in_memory.stats[r].model_state_bytes - shard);
        EXPECT_EQ(on_disk.stats[r].disk_state_bytes,
                  in_memory.stats[r].disk_state_bytes + shard);
        EXPECT_EQ(on_disk.stats[r].buffer_bytes,
                  in_memory.stats[r].buffer_bytes + element * largest);
      }
      EXPECT_EQ(CountFiles(dir), 0);
    }
  }
  EXPECT_GT(disk->stats().reads, 0u);
  RunRanks(1, [&](int, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition one, Partition::Create(Specs(), Options(1)));
    Zero3Options options;
    options.stage = 1;
    options.grad_disk = disk.get();
    EXPECT_THAT(Zero3Engine::Create(one, &comm, InitialParams(one), options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("grad_disk needs stage 2 or 3")));
  });
}

// The shard on param_disk moves through ReadShard / WriteShard (a checkpoint's
// path) and GatherAll; stages 1 and 2 keep whole parameters and refuse it.
TEST(Zero3EngineTest, ParameterOffloadMovesThroughReadAndWriteShard) {
  const int dp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::string dir = FreshTestDirectory("param_shard");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  const std::vector<float> initial = InitialParams(partition);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<float> reference = Reference(partition, dtype, 3, 1, UseAll);
    std::vector<std::vector<float>> resumed(dp);
    RunRanks(dp, [&](int rank, Communicator& comm) {
      auto step = [&](Zero3Engine& engine, int number) {
        OneBackwardStep(partition, rank, engine, number);
      };
      Zero3Options options;
      options.compute_dtype = dtype;
      options.param_disk = disk.get();
      std::unique_ptr<Zero3Engine> first = *Zero3Engine::Create(partition, &comm, initial, options);
      step(*first, 1);
      step(*first, 2);
      options.disk_prefix = "second";  // `first` is still alive
      std::unique_ptr<Zero3Engine> second =
          *Zero3Engine::Create(partition, &comm, initial, options);
      CopyState(partition, *first, *second);
      step(*second, 3);
      resumed[rank] = *second->GatherAll();
    });
    for (int r = 0; r < dp; ++r) EXPECT_EQ(resumed[r], reference) << "rank " << r;
  }
  RunRanks(1, [&](int, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition one, Partition::Create(Specs(), Options(1)));
    Zero3Options options;
    options.stage = 2;
    options.param_disk = disk.get();
    EXPECT_THAT(Zero3Engine::Create(one, &comm, InitialParams(one), options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("param_disk needs stage 3 (stage 2 keeps")));
  });
  EXPECT_EQ(CountFiles(dir), 0);
}

// A corrupted state file on disk is a DataLoss error from Step naming the tensor,
// never silent garbage.
TEST(Zero3EngineTest, CorruptedStateOnDiskIsDataLoss) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(1)));
  const std::string dir = FreshTestDirectory("nvme_corrupt");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  RunRanks(1, [&](int, Communicator& comm) {
    Zero3Options options;
    options.optimizer_disk = disk.get();
    options.disk_prefix = "job7";
    std::unique_ptr<Zero3Engine> engine =
        *Zero3Engine::Create(partition, &comm, InitialParams(partition), options);
    const std::string file = dir + "/job7.r0.b1.0.ldt";
    FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr) << file;
    ASSERT_EQ(std::fseek(f, 4096 + 5, SEEK_SET), 0);
    const int c = std::fgetc(f);
    ASSERT_EQ(std::fseek(f, 4096 + 5, SEEK_SET), 0);
    std::fputc(c ^ 0x5A, f);
    std::fclose(f);
    LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
    LOOM_ASSERT_OK(engine->EndPass());
    EXPECT_THAT(engine->Step(Hyper(1)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("job7.r0.b1")));
  });
}

// A stage that keeps its weights from the forward pass reduces its gradients in a
// kGradients pass: the same result, one all-gather per step instead of two.
TEST(Zero3EngineTest, AGradientsPassReducesWithoutGathering) {
  const int dp = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::vector<float> initial = InitialParams(partition);
  std::vector<std::vector<float>> params(dp);
  std::vector<CollectiveCounters> gathers(dp), reduces(dp);
  RunRanks(dp, [&](int rank, Communicator& comm) {
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial);
    for (int step = 1; step <= 2; ++step) {
      std::vector<std::vector<float>> kept(partition.num_params());
      LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
      for (int p = 0; p < partition.num_params(); ++p) {
        LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
        kept[p].assign(w.begin(), w.end());
      }
      LOOM_ASSERT_OK(engine->EndPass());
      LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kGradients));
      EXPECT_THAT(engine->Acquire(0), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               HasSubstr("gathers nothing")));
      for (int p = partition.num_params() - 1; p >= 0; --p) {
        std::vector<float> g(kept[p].size());
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = Grad(kept[p][i], rank, 0, p, static_cast<int64_t>(i));
        }
        LOOM_ASSERT_OK(engine->AddGrad(p, g));
      }
      LOOM_ASSERT_OK(engine->EndPass());
      LOOM_ASSERT_OK(engine->Step(Hyper(step)));
    }
    gathers[rank] = comm.Counters(CollectiveKind::kAllGather);
    reduces[rank] = comm.Counters(CollectiveKind::kReduceScatter);
    params[rank] = *engine->GatherAll();
  });
  const std::vector<float> reference = Reference(partition, DType::kF32, 2, 1, UseAll);
  for (int r = 0; r < dp; ++r) {
    EXPECT_EQ(params[r], reference);
    EXPECT_EQ(gathers[r].calls, static_cast<uint64_t>(2 * partition.num_buckets()));  // 2 steps
    EXPECT_EQ(reduces[r].calls, static_cast<uint64_t>(2 * partition.num_buckets()));
  }
}

// The deferred reduce-scatter: regather passes (reverse order, nothing reduced)
// for two microbatches whose gradients the caller sums, then one gradients pass
// with the sums: the same bits as one backward pass with the sums, the traffic of
// a gather per regather pass and one reduce-scatter per bucket. Without
// average_passes, two backward passes are summed, not averaged.
TEST(Zero3EngineTest, RegatherPassesDeferTheReduceScatter) {
  const int dp = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(dp)));
  const std::vector<float> initial = InitialParams(partition);
  std::vector<std::vector<float>> deferred(dp), summed(dp), reference(dp);
  std::vector<CollectiveCounters> gathers(dp), reduces(dp);
  RunRanks(dp, [&](int rank, Communicator& comm) {
    const int num_params = partition.num_params();
    // grads[p]: the sum of two microbatches' gradients, each the reference's
    // Grad of the initial weights at pass 0, halved.
    auto grads_of = [&](int p, absl::Span<const float> w) {
      std::vector<float> g(w.size());
      for (size_t i = 0; i < g.size(); ++i) {
        g[i] = 0.5f * Grad(w[i], rank, 0, p, static_cast<int64_t>(i));
      }
      return g;
    };
    {
      std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial);
      std::vector<std::vector<float>> sums(num_params);
      for (int mb = 0; mb < 2; ++mb) {
        LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kRegather));
        for (int p = num_params - 1; p >= 0; --p) {
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
          const std::vector<float> g = grads_of(p, w);
          if (sums[p].empty()) sums[p].assign(g.size(), 0.0f);
          for (size_t i = 0; i < g.size(); ++i) sums[p][i] += g[i];
        }
        EXPECT_THAT(engine->AddGrad(0, sums[0]),
                    StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("outside")));
        LOOM_ASSERT_OK(engine->EndPass());
      }
      LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kGradients));
      for (int p = num_params - 1; p >= 0; --p) LOOM_ASSERT_OK(engine->AddGrad(p, sums[p]));
      LOOM_ASSERT_OK(engine->EndPass());
      LOOM_ASSERT_OK(engine->Step(Hyper(1)));
      gathers[rank] = comm.Counters(CollectiveKind::kAllGather);
      reduces[rank] = comm.Counters(CollectiveKind::kReduceScatter);
      deferred[rank] = *engine->GatherAll();
    }
    {
      // Two backward passes of halves, summed (average_passes = false).
      Zero3Options options;
      options.average_passes = false;
      std::unique_ptr<Zero3Engine> engine =
          *Zero3Engine::Create(partition, &comm, initial, options);
      for (int mb = 0; mb < 2; ++mb) {
        LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kBackward));
        for (int p = num_params - 1; p >= 0; --p) {
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
          LOOM_ASSERT_OK(engine->AddGrad(p, grads_of(p, w)));
        }
        LOOM_ASSERT_OK(engine->EndPass());
      }
      LOOM_ASSERT_OK(engine->Step(Hyper(1)));
      summed[rank] = *engine->GatherAll();
    }
  });
  const std::vector<float> expected = Reference(partition, DType::kF32, 1, 1, UseAll);
  const uint64_t buckets = static_cast<uint64_t>(partition.num_buckets());
  for (int r = 0; r < dp; ++r) {
    SCOPED_TRACE(r);
    EXPECT_EQ(deferred[r], expected);  // 0.5 g + 0.5 g = g exactly
    EXPECT_EQ(summed[r], expected);
    // A gather per bucket and regather pass, less the buckets where the first
    // pass's last window (3 buckets at prefetch depth 2) meets the second's first
    // (both run backward: they share 2 * 3 - buckets, which the second takes over
    // gathered); one reduce-scatter per bucket.
    ASSERT_EQ(buckets, 5u);
    EXPECT_EQ(gathers[r].calls, 2 * buckets - (2 * 3 - buckets));
    EXPECT_EQ(reduces[r].calls, buckets);
  }
}

// Rank 1 never uses mlp.w1 (a branch the other ranks take): nothing hangs, and
// the result is the reference with rank 1 contributing zero gradient there.
TEST(Zero3EngineTest, ARankThatSkipsAParameterContributesZero) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(3)));
  const Uses uses = [](int rank, int param) { return !(rank == 1 && (param == 5 || param == 3)); };
  for (const int stage : {1, 2, 3}) {
    Zero3Options options;
    options.stage = stage;
    const RunResult run = Train(partition, options, 2, 1, uses);
    const std::vector<float> reference = Reference(partition, DType::kF32, 2, 1, uses, stage);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(run.params[r], reference) << "stage " << stage << " rank " << r;
    }
  }
  EXPECT_NE(Reference(partition, DType::kF32, 2, 1, uses),
            Reference(partition, DType::kF32, 2, 1, UseAll));
}

// GradientSlot is AddGrad in place: a backward that writes the even parameters'
// gradients into their slots (a second slot for the same parameter in the pass is
// empty, and AddGrad then adds to what the slot holds) and hands the odd ones to
// AddGrad trains bitwise as AddGrad alone, at stages 1-3, f32 and bf16, dp 1-3,
// two passes a step and a rank that skips parameters (their slots' share is 0).
TEST(Zero3EngineTest, GradientSlotIsAddGradInPlace) {
  struct Case {
    DType dtype;
    int stage, dp;
  };
  std::vector<Case> cases;
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int stage : {1, 2, 3}) {
      for (const int dp : {1, 2, 3}) cases.push_back({dtype, stage, dp});
    }
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), " stage ", c.stage, " dp ", c.dp));
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(c.dp)));
    const Uses uses = [](int rank, int param) { return !(rank == 1 && (param == 5 || param == 2)); };
    Zero3Options options;
    options.compute_dtype = c.dtype;
    options.stage = c.stage;
    const std::vector<float> initial = InitialParams(partition);
    std::vector<std::vector<float>> params(c.dp);
    std::vector<int> slots_written(c.dp, 0);
    constexpr int kSteps = 2, kPasses = 2;
    RunRanks(c.dp, [&](int rank, Communicator& comm) {
      LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                Zero3Engine::Create(partition, &comm, initial, options));
      EXPECT_THAT(engine->GradientSlot(0).status(),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("GradientSlot(0")));
      EXPECT_TRUE(absl::IsOutOfRange(engine->GradientSlot(partition.num_params()).status()));
      for (int step = 1; step <= kSteps; ++step) {
        for (int pass = 0; pass < kPasses; ++pass) {
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
          for (int p = 0; p < partition.num_params(); ++p) {
            if (uses(rank, p)) {
              LOOM_ASSERT_OK(engine->Acquire(p).status());
            }
          }
          LOOM_ASSERT_OK(engine->EndPass());
          EXPECT_TRUE(absl::IsFailedPrecondition(engine->GradientSlot(0).status()));
          LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
          for (int p = partition.num_params() - 1; p >= 0; --p) {
            if (!uses(rank, p)) continue;
            LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine->Acquire(p));
            const std::vector<float> g = Grads(w, rank, pass, p);
            if (p % 2 == 1) {
              LOOM_ASSERT_OK(engine->AddGrad(p, g));
              continue;
            }
            LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<float> slot, engine->GradientSlot(p));
            if (partition.slot(p).persistent || g.empty()) {
              EXPECT_TRUE(slot.empty()) << p;
              LOOM_ASSERT_OK(engine->AddGrad(p, g));
              continue;
            }
            ASSERT_EQ(slot.size(), g.size()) << p;
            std::copy(g.begin(), g.end(), slot.begin());
            ++slots_written[rank];
            // The parameter has its gradient now: no second slot; AddGrad adds.
            LOOM_ASSERT_OK_AND_ASSIGN(const absl::Span<float> again, engine->GradientSlot(p));
            EXPECT_TRUE(again.empty()) << p;
            LOOM_ASSERT_OK(engine->AddGrad(p, std::vector<float>(g.size(), 0.0f)));
          }
          LOOM_ASSERT_OK(engine->EndPass());
        }
        LOOM_ASSERT_OK(engine->Step(Hyper(step)));
      }
      LOOM_ASSERT_OK_AND_ASSIGN(params[rank], engine->GatherAll());
    });
    const std::vector<float> reference =
        Reference(partition, c.dtype, kSteps, kPasses, uses, c.stage);
    for (int r = 0; r < c.dp; ++r) {
      EXPECT_EQ(params[r], reference) << "rank " << r;
      EXPECT_GT(slots_written[r], 0) << "rank " << r;
    }
  }
}

// RunPasses runs `microbatches` forward and backward passes on one rank, then
// Step, and returns the first error (nothing after it runs).
absl::Status RunPasses(Zero3Engine& engine, const Partition& partition, int microbatches,
                       const Uses& uses, int rank) {
  for (int mb = 0; mb < microbatches; ++mb) {
    for (const Zero3Pass pass : {Zero3Pass::kForward, Zero3Pass::kBackward}) {
      LOOM_RETURN_IF_ERROR(engine.BeginPass(pass));
      absl::Status status;
      for (int i = 0; i < partition.num_params() && status.ok(); ++i) {
        const int p = pass == Zero3Pass::kForward ? i : partition.num_params() - 1 - i;
        if (!uses(rank, p)) continue;
        absl::StatusOr<absl::Span<const float>> w = engine.Acquire(p);
        status = w.status();
        if (status.ok() && pass == Zero3Pass::kBackward) {
          status = engine.AddGrad(p, std::vector<float>(w->size(), 0.25f));
        }
      }
      const absl::Status ended = engine.EndPass();
      LOOM_RETURN_IF_ERROR(status);
      LOOM_RETURN_IF_ERROR(ended);
    }
  }
  return engine.Step(Hyper(1));
}

// A rank that runs one microbatch more than the others: every rank fails at the
// next agreement check with the same error naming both positions, at once (long
// before the collectives' deadline), instead of gathering its extra pass's
// buckets from the others' next step.
TEST(Zero3EngineTest, RanksThatDisagreeOnMicrobatchesFailAtOnceNamingBoth) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(2)));
  const std::vector<float> initial = InitialParams(partition);
  std::vector<absl::Status> results(2);
  const absl::Time start = absl::Now();
  RunRanks(2, [&](int rank, Communicator& comm) {
    Zero3Options options;
    options.timeout = absl::Seconds(60);
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial, options);
    results[rank] = RunPasses(*engine, partition, rank == 0 ? 3 : 2, UseAll, rank);
    EXPECT_EQ(engine->Stats().steps, 0) << "rank " << rank;
    // Rank 0 started five passes; rank 1 four and its step's reduction.
    EXPECT_EQ(engine->Stats().agreement_checks, 5) << "rank " << rank;
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr(absl::StrCat("Zero3Engine rank ", r,
                                                      ": the data-parallel ranks disagree")),
                               HasSubstr("rank 0 is after 0 steps, starting a forward pass with 2 "
                                         "backward passes since the last step"),
                               HasSubstr("rank 1 is after 0 steps, reducing the gradients of 2 "
                                         "backward passes"))))
        << "rank " << r;
  }
}

// With require_same_use, a rank that skips a bucket fails the next check on every
// rank, naming the bucket and who skipped it; without it (the default) the skip
// contributes zero (ARankThatSkipsAParameterContributesZero).
TEST(Zero3EngineTest, ASkippedBucketIsNamedWhenUseMustAgree) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(2)));
  ASSERT_GE(partition.num_buckets(), 3);
  const int skipped_bucket = 1;
  const Uses uses = [&](int rank, int param) {
    return !(rank == 1 && partition.slot(param).bucket == skipped_bucket);
  };
  const std::vector<float> initial = InitialParams(partition);
  std::vector<absl::Status> results(2);
  RunRanks(2, [&](int rank, Communicator& comm) {
    Zero3Options options;
    options.require_same_use = true;
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial, options);
    results[rank] = RunPasses(*engine, partition, 1, uses, rank);
  });
  const std::string first = partition.slot(partition.bucket(skipped_bucket).params[0]).name;
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("used different parameters in the forward pass"),
                               HasSubstr(absl::StrCat("bucket 1 (\"", first, "\"")),
                               HasSubstr("used by rank 0 and skipped by rank 1"))))
        << "rank " << r;
  }
}

// BackwardPasses runs `passes` backward passes of the toy loss on one rank.
void BackwardPasses(Zero3Engine& engine, const Partition& partition, int rank, int passes) {
  for (int pass = 0; pass < passes; ++pass) {
    LOOM_ASSERT_OK(engine.BeginPass(Zero3Pass::kBackward));
    for (int p = partition.num_params() - 1; p >= 0; --p) {
      LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, engine.Acquire(p));
      const std::vector<float> g = Grads(w, rank, pass, p);
      LOOM_ASSERT_OK(engine.AddGrad(p, g));
    }
    LOOM_ASSERT_OK(engine.EndPass());
  }
}

// Weights leaving out attn.b (sharing a bucket), mlp.w1 (a bucket of its own) and
// mlp.b1 (persistent).
std::vector<float> SomeWeights() {
  std::vector<float> weight(Specs().size(), 1.0f);
  weight[3] = weight[5] = weight[6] = 0.0f;
  return weight;
}

// Summed over the dp ranks, ReducedGradSquaredNorm is the squared norm of the
// averaged gradient of the whole model, each element once: sharded elements on
// their owner, persistent ones on rank 0. The engine's gradient elements are the
// reference's bitwise (bf16 rounding included: the step tests below show it), so
// only the order of the double additions differs, and the bound is 1e-12
// relative; one bf16 ulp in one element moves the norm by about 1e-5 (checked).
TEST(Zero3EngineTest, GradSquaredNormSumsToTheNormOfTheAveragedGradient) {
  const std::vector<float> ones(Specs().size(), 1.0f);
  const std::vector<float> some = SomeWeights();
  for (const int stage : {1, 2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int dp : {2, 3}) {
        for (const int passes : {1, 2}) {
          SCOPED_TRACE(
              absl::StrCat("stage ", stage, " ", DTypeName(dtype), " dp ", dp, " passes ", passes));
          LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                    Partition::Create(Specs(), Options(dp)));
          const std::vector<float> initial = InitialParams(partition);
          std::vector<double> all(dp), part(dp);
          RunRanks(dp, [&](int rank, Communicator& comm) {
            Zero3Options options;
            options.stage = stage;
            options.compute_dtype = dtype;
            LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                      Zero3Engine::Create(partition, &comm, initial, options));
            BackwardPasses(*engine, partition, rank, passes);
            LOOM_ASSERT_OK(engine->ReduceGradients());
            LOOM_ASSERT_OK_AND_ASSIGN(all[rank], engine->ReducedGradSquaredNorm(ones));
            LOOM_ASSERT_OK_AND_ASSIGN(part[rank], engine->ReducedGradSquaredNorm(some));
          });
          double got_all = 0.0, got_part = 0.0;
          for (int r = 0; r < dp; ++r) {
            got_all += all[r];
            got_part += part[r];
          }
          std::vector<float> grad = ReducedGrad(partition, dtype, initial, passes, UseAll, stage);
          const double want_all = SquaredNorm(partition, grad, passes, ones);
          const double want_part = SquaredNorm(partition, grad, passes, some);
          EXPECT_NEAR(got_all, want_all, 1e-12 * want_all);
          EXPECT_NEAR(got_part, want_part, 1e-12 * want_part);
          EXPECT_GT(want_all - want_part, 0.01 * want_all);  // the left-out parameters count
          if (dtype == DType::kBF16) {
            // The bound sees a single rounding that went the other way.
            const auto big = std::max_element(grad.begin(), grad.end(), [](float a, float b) {
              return std::abs(a) < std::abs(b);
            });
            *big = ToFloat(BFloat16{static_cast<uint16_t>(ToBFloat16(*big).bits + 1)});
            EXPECT_GT(std::abs(SquaredNorm(partition, grad, passes, ones) - want_all),
                      1e-6 * want_all);
          }
        }
      }
    }
  }
}

// ReduceGradients before Step (here twice: the second call does nothing, and the
// norm in between reads only) leaves every bit and every collective as Step alone,
// NVMe offload included; both equal the reference.
TEST(Zero3EngineTest, ReduceGradientsBeforeStepChangesNoBit) {
  const std::string dir = FreshTestDirectory("reduce_first");
  std::unique_ptr<DiskTier> disk = MakeDisk(dir);
  ASSERT_NE(disk, nullptr);
  const std::vector<float> ones(Specs().size(), 1.0f);
  const BeforeStep reduce_first = [&](int, Zero3Engine& engine) {
    LOOM_ASSERT_OK(engine.ReduceGradients());
    LOOM_ASSERT_OK(engine.ReducedGradSquaredNorm(ones).status());
    LOOM_ASSERT_OK(engine.ReduceGradients());
  };
  for (const int stage : {1, 2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int dp : {2, 3}) {
        SCOPED_TRACE(absl::StrCat("stage ", stage, " ", DTypeName(dtype), " dp ", dp));
        LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                  Partition::Create(Specs(), Options(dp)));
        Zero3Options options;
        options.stage = stage;
        options.compute_dtype = dtype;
        options.optimizer_disk = dp == 3 ? disk.get() : nullptr;
        const RunResult alone = Train(partition, options, 2, 2, UseAll);
        const RunResult first = Train(partition, options, 2, 2, UseAll, true, reduce_first);
        const std::vector<float> reference = Reference(partition, dtype, 2, 2, UseAll, stage);
        for (int r = 0; r < dp; ++r) {
          SCOPED_TRACE(absl::StrCat("rank ", r));
          EXPECT_EQ(first.params[r], alone.params[r]);
          EXPECT_EQ(first.params[r], reference);
          EXPECT_EQ(first.gathers[r].calls, alone.gathers[r].calls);
          EXPECT_EQ(first.gathers[r].bytes_sent, alone.gathers[r].bytes_sent);
          EXPECT_EQ(first.reduces[r].calls, alone.reduces[r].calls);
          EXPECT_EQ(first.reduces[r].bytes_sent, alone.reduces[r].bytes_sent);
          EXPECT_EQ(first.all_reduces[r].calls, alone.all_reduces[r].calls);
          EXPECT_EQ(first.stats[r].reduce_scatters, alone.stats[r].reduce_scatters);
          EXPECT_EQ(first.stats[r].model_state_bytes, alone.stats[r].model_state_bytes);
        }
      }
    }
  }
  EXPECT_EQ(CountFiles(dir), 0);
}

// Global-norm clipping as a job does it: every rank's ReducedGradSquaredNorm
// all-reduced over the world, grad_scale = min(1, max_norm / (norm + 1e-6)). The
// reference pre-scales its averaged gradient by the same factor. The factors agree
// to the order of the double additions, so the parameters agree within float
// rounding (bitwise unless a factor's f32 rounding differs). AdamW is blind to a
// constant gradient scale but for eps, so a large eps lets the clipping show.
TEST(Zero3EngineTest, ClippingThroughGradScaleMatchesAPreScaledReference) {
  const double max_norm = 1.0;
  const float eps = 1e-2f;
  const std::vector<float> ones(Specs().size(), 1.0f);
  for (const int stage : {1, 2, 3}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      for (const int dp : {2, 3}) {
        for (const int passes : {1, 2}) {
          SCOPED_TRACE(
              absl::StrCat("stage ", stage, " ", DTypeName(dtype), " dp ", dp, " passes ", passes));
          LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                                    Partition::Create(Specs(), Options(dp)));
          const std::vector<float> initial = InitialParams(partition);
          std::vector<std::vector<float>> params(dp);
          std::vector<std::vector<double>> clips(dp);
          RunRanksWithWorld(dp, [&](int rank, Communicator& comm, Communicator& world) {
            Zero3Options options;
            options.stage = stage;
            options.compute_dtype = dtype;
            LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                      Zero3Engine::Create(partition, &comm, initial, options));
            for (int step = 1; step <= 2; ++step) {
              BackwardPasses(*engine, partition, rank, passes);
              LOOM_ASSERT_OK(engine->ReduceGradients());
              LOOM_ASSERT_OK_AND_ASSIGN(double squared, engine->ReducedGradSquaredNorm(ones));
              LOOM_ASSERT_OK(world.AllReduce(absl::MakeSpan(&squared, 1), ReduceOp::kSum));
              clips[rank].push_back(ClipFactor(squared, max_norm));
              AdamWHyper hyper = Hyper(step, eps);
              hyper.grad_scale = static_cast<float>(clips[rank].back());
              LOOM_ASSERT_OK(engine->Step(hyper));
            }
            LOOM_ASSERT_OK_AND_ASSIGN(params[rank], engine->GatherAll());
          });
          const ReferenceRun reference =
              RunReference(partition, dtype, 2, passes, UseAll, stage, max_norm, eps);
          const std::vector<float> unclipped =
              RunReference(partition, dtype, 2, passes, UseAll, stage, 0.0, eps).params;
          ASSERT_EQ(reference.clips.size(), 2u);
          auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
            float diff = 0.0f;
            for (size_t i = 0; i < a.size(); ++i) {
              diff = std::max(diff, std::abs(a[i] - b[i]) / std::max(1.0f, std::abs(b[i])));
            }
            return diff;
          };
          for (int r = 0; r < dp; ++r) {
            SCOPED_TRACE(absl::StrCat("rank ", r));
            ASSERT_EQ(clips[r].size(), 2u);
            EXPECT_EQ(clips[r], clips[0]);  // the same factor everywhere
            for (int s = 0; s < 2; ++s) {
              EXPECT_NEAR(clips[r][s], reference.clips[s], 1e-12 * reference.clips[s]);
              EXPECT_LT(reference.clips[s], 0.5);  // it clips
            }
            ASSERT_EQ(params[r].size(), reference.params.size());
            EXPECT_LE(max_diff(params[r], reference.params), 1e-6f);
          }
          EXPECT_GT(max_diff(unclipped, reference.params), 1e-3f);
        }
      }
    }
  }
}

// ReduceGradients and ReducedGradSquaredNorm out of order are refused, naming why;
// an evaluation (forward) pass may come between ReduceGradients and Step.
TEST(Zero3EngineTest, GradNormCallsOutOfOrderAreRefused) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(2)));
  const std::vector<float> initial = InitialParams(partition);
  const std::vector<float> ones(Specs().size(), 1.0f);
  for (const int stage : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("stage ", stage));
    RunRanks(2, [&](int rank, Communicator& comm) {
      Zero3Options options;
      options.stage = stage;
      LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Zero3Engine> engine,
                                Zero3Engine::Create(partition, &comm, initial, options));
      EXPECT_THAT(engine->ReduceGradients(),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr(absl::StrCat("Zero3Engine rank ", rank,
                                                  ": ReduceGradients without a backward pass "
                                                  "since the last Step"))));
      EXPECT_THAT(engine->ReducedGradSquaredNorm(ones),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("before ReduceGradients (no backward pass since the last "
                                     "Step)")));
      LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
      EXPECT_THAT(engine->ReduceGradients(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                      HasSubstr("ReduceGradients inside a pass")));
      EXPECT_THAT(engine->ReducedGradSquaredNorm(ones),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("ReducedGradSquaredNorm inside a pass")));
      LOOM_ASSERT_OK(engine->EndPass());
      EXPECT_THAT(engine->ReducedGradSquaredNorm(ones),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("before ReduceGradients (this step's gradients are not "
                                     "reduced yet)")));
      LOOM_ASSERT_OK(engine->ReduceGradients());
      EXPECT_THAT(engine->ReducedGradSquaredNorm(std::vector<float>(3, 1.0f)),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("ReducedGradSquaredNorm got 3 parameter weights; the model "
                                     "has 10 parameters")));
      std::vector<float> negative = ones;
      negative[2] = -1.0f;
      EXPECT_THAT(engine->ReducedGradSquaredNorm(negative),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("the weight of parameter 2 (\"attn.w\") is -1; it must be "
                                     "finite and >= 0")));
      EXPECT_THAT(engine->BeginPass(Zero3Pass::kBackward),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("a backward pass after ReduceGradients; Step first")));
      EXPECT_THAT(engine->BeginPass(Zero3Pass::kGradients),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("a backward pass after ReduceGradients")));
      // Zero gradients (the pass added none) have norm 0.
      EXPECT_THAT(engine->ReducedGradSquaredNorm(ones), IsOkAndHolds(0.0));
      LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
      LOOM_ASSERT_OK(engine->Acquire(0).status());
      LOOM_ASSERT_OK(engine->EndPass());
      LOOM_EXPECT_OK(engine->ReducedGradSquaredNorm(ones).status());
      LOOM_ASSERT_OK(engine->Step(Hyper(1)));
      EXPECT_THAT(engine->ReducedGradSquaredNorm(ones),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("no backward pass since the last Step")));
      LOOM_EXPECT_OK(engine->BeginPass(Zero3Pass::kBackward));
      LOOM_EXPECT_OK(engine->EndPass());
    });
  }
}

// Using a released bucket again is refused on that rank; the others, which make
// the same collective calls, finish normally.
TEST(Zero3EngineTest, OutOfOrderUseIsAClearErrorAndNobodyHangs) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(2)));
  ASSERT_GE(partition.num_buckets(), 3);
  const std::vector<float> initial = InitialParams(partition);
  std::vector<absl::Status> ends(2);
  RunRanks(2, [&](int rank, Communicator& comm) {
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial);
    LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kForward));
    const int last = partition.bucket(partition.num_buckets() - 1).params[0];
    LOOM_ASSERT_OK(engine->Acquire(last).status());
    if (rank == 0) {
      EXPECT_THAT(engine->Acquire(0),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("Zero3Engine rank 0: Acquire(0 \"wte\"): its bucket 0 was "
                                     "already released in this forward pass")));
      EXPECT_THAT(engine->AddGrad(0, std::vector<float>(185)),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("outside a backward pass")));
    }
    ends[rank] = engine->EndPass();
  });
  EXPECT_THAT(ends[0], StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("wte")));
  LOOM_EXPECT_OK(ends[1]);
}

TEST(Zero3EngineTest, BadInputIsNamed) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(Specs(), Options(2)));
  const std::vector<float> initial = InitialParams(partition);
  RunRanks(1, [&](int, Communicator& comm) {
    EXPECT_THAT(Zero3Engine::Create(partition, &comm, initial),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("the partition is for dp_size 2, the communicator has 1")));
  });
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition one, Partition::Create(Specs(), Options(1)));
  RunRanks(1, [&](int, Communicator& comm) {
    EXPECT_THAT(Zero3Engine::Create(one, &comm, std::vector<float>(5)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("the initial parameters have 5 elements, the partition's "
                                   "model has 719")));
    Zero3Options options;
    options.max_live_gathered_bytes = 100;
    EXPECT_THAT(Zero3Engine::Create(one, &comm, initial, options),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("Zero3Engine rank 0: parameter \""),
                               HasSubstr("gathered bytes; the budget (max_live_gathered_bytes) "
                                         "is 100"))));
    options = Zero3Options();
    options.compute_dtype = DType::kI32;
    EXPECT_THAT(Zero3Engine::Create(one, &comm, initial, options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compute_dtype i32")));
    options = Zero3Options();
    options.max_grad_buffers = 0;
    EXPECT_THAT(Zero3Engine::Create(one, &comm, initial, options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("Zero3Options.max_grad_buffers 0 is not >= 1")));
    options = Zero3Options();
    options.stage = 0;
    EXPECT_THAT(Zero3Engine::Create(one, &comm, initial, options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("Zero3Options.stage 0 is not 1, 2 or 3")));
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(one, &comm, initial);
    EXPECT_THAT(engine->Acquire(3), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr("Acquire(3 \"attn.b\") outside a pass")));
    EXPECT_THAT(engine->Acquire(99), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("the model has 10 parameters")));
    EXPECT_THAT(engine->Step(Hyper(1)),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("without a backward")));
    LOOM_ASSERT_OK(engine->BeginPass(Zero3Pass::kBackward));
    EXPECT_THAT(engine->AddGrad(0, std::vector<float>(3)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("AddGrad(0 \"wte\") has 3 elements, the parameter has 185")));
    EXPECT_THAT(engine->BeginPass(Zero3Pass::kForward),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("inside a pass")));
    LOOM_EXPECT_OK(engine->EndPass());
  });
}

}  // namespace
}  // namespace loom
