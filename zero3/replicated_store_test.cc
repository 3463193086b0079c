#include "zero3/replicated_store.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/inproc_ranks_testing.h"
#include "core/float_bits_testing.h"
#include "core/half.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/adamw/cpu_adamw.h"
#include "zero3/gradient_all_reducer.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Two parameters, 6 and 10 elements.
std::vector<ParamSpec> Specs() {
  return {ParamSpec{"fc.w", {2, 3}}, ParamSpec{"fc.b", {10}}};
}
constexpr int kTotal = 16;

std::vector<float> Initial() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> out(kTotal);
  for (float& v : out) v = dist(rng);
  return out;
}

// Gradient of rank r, pass k: multiples of 1/64 so that every sum and the average
// over 4 ranks are exact in f32, whatever order the all-reduce folds them in.
std::vector<float> Grad(int rank, int pass) {
  std::vector<float> g(kTotal);
  for (int i = 0; i < kTotal; ++i) g[i] = static_cast<float>((rank + 1) * (i - 7) + 3 * pass) / 64;
  return g;
}

AdamWHyper Hyper(int64_t step) {
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = step;
  hyper.grad_scale = 0.5f;
  return hyper;
}

// One step on 4 ranks, two backward passes each: the bucket holds the dp average
// of the pass sums, the step equals AdamW on one rank with that gradient (bitwise),
// and it took one all-reduce.
void CheckOneStep(DType dtype) {
  constexpr int kDp = 4;
  std::vector<float> average(kTotal, 0.0f);
  for (int r = 0; r < kDp; ++r) {
    for (int k = 0; k < 2; ++k) {
      const std::vector<float> g = Grad(r, k);
      for (int i = 0; i < kTotal; ++i) average[i] += g[i];
    }
  }
  for (float& g : average) g /= kDp;
  if (dtype == DType::kBF16) {
    for (float& g : average) g = ToFloat(ToBFloat16(g));
  }
  // The reference: AdamW on one copy of the master.
  std::vector<float> master = Initial();
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(kTotal));
  LOOM_ASSERT_OK(AdamWStep(Hyper(1), absl::MakeSpan(master), average, state));
  std::vector<float> expected_weights = master;
  if (dtype == DType::kBF16) {
    for (float& w : expected_weights) w = ToFloat(ToBFloat16(w));
  }
  std::vector<float> expected_m(kTotal), expected_v(kTotal);
  LOOM_ASSERT_OK(state.ReadMoments(absl::MakeSpan(expected_m), absl::MakeSpan(expected_v)));

  RunInprocRanks(kDp, [&](int rank, Communicator& comm) {
    ReplicatedStoreOptions options;
    options.compute_dtype = dtype;
    options.adamw_threads = 2;
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(Specs(), &comm, Initial(), options));
    EXPECT_EQ(store->StateBytes(), (dtype == DType::kBF16 ? 22 : 16) * kTotal);
    for (int k = 0; k < 2; ++k) {
      const std::vector<float> g = Grad(rank, k);
      LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
      LOOM_ASSERT_OK(store->Acquire(1).status());
      LOOM_ASSERT_OK(store->AddGrad(1, absl::MakeConstSpan(g).subspan(6)));
      LOOM_ASSERT_OK(store->AddGrad(0, absl::MakeConstSpan(g).subspan(0, 6)));
      LOOM_ASSERT_OK(store->EndPass());
    }
    LOOM_ASSERT_OK(store->ReduceGradients());
    for (int i = 0; i < kTotal; ++i) EXPECT_EQ(store->gradient()[i], average[i]) << i;
    LOOM_ASSERT_OK_AND_ASSIGN(const double sq, store->ReducedGradSquaredNorm({1.0f, 0.0f}));
    double expected_sq = 0;
    for (int i = 0; i < 6; ++i) expected_sq += static_cast<double>(average[i]) * static_cast<double>(average[i]);
    EXPECT_EQ(sq, rank == 0 ? expected_sq : 0.0);
    LOOM_ASSERT_OK(store->Step(Hyper(1)));
    EXPECT_EQ(comm.Counters(CollectiveKind::kAllReduce).calls, 1u);  // Step reduced no more
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kForward));
    for (int p = 0; p < 2; ++p) {
      LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, store->Acquire(p));
      const int at = p == 0 ? 0 : 6;
      for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], expected_weights[at + i]) << p << i;
      // The bf16 copy the products read: the same values before widening (f32: none).
      const absl::StatusOr<absl::Span<const BFloat16>> w16 = store->AcquireBf16(p);
      if (dtype == DType::kF32) {
        EXPECT_THAT(w16, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("f32")));
        continue;
      }
      LOOM_ASSERT_OK(w16.status());
      ASSERT_EQ(w16->size(), w.size());
      for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(ToFloat((*w16)[i]), w[i]) << p << i;
    }
    LOOM_ASSERT_OK(store->EndPass());
    EXPECT_THAT(store->AcquireBf16(0), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                HasSubstr("outside a pass")));
    std::vector<float> got_master(10), m(10), v(10);
    LOOM_ASSERT_OK(store->ReadState(1, absl::MakeSpan(got_master), absl::MakeSpan(m),
                               absl::MakeSpan(v)));
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(got_master[i], master[6 + i]);
      EXPECT_EQ(m[i], expected_m[6 + i]);
      EXPECT_EQ(v[i], expected_v[6 + i]);
    }
    // The bucket is zero for the next step.
    for (const float g : store->gradient()) EXPECT_EQ(g, 0.0f);
  });
}

TEST(ReplicatedStoreTest, StepIsAdamWOnTheDpAverageF32) { CheckOneStep(DType::kF32); }
TEST(ReplicatedStoreTest, StepIsAdamWOnTheDpAverageBF16) { CheckOneStep(DType::kBF16); }

TEST(ReplicatedStoreTest, WriteStateReplacesMasterMomentsAndWeights) {
  RunInprocRanks(1, [](int, Communicator& comm) {
    ReplicatedStoreOptions options;
    options.compute_dtype = DType::kBF16;
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(Specs(), &comm, Initial(), options));
    std::vector<float> master(6), m(6), v(6);
    for (int i = 0; i < 6; ++i) {
      master[i] = 1.0f + 1.0f / 1024 * static_cast<float>(i + 1);  // not bf16-exact
      m[i] = 0.25f * i;
      v[i] = 0.5f * i;
    }
    LOOM_ASSERT_OK(store->WriteState(0, master, m, v));
    std::vector<float> got_master(6), got_m(6), got_v(6);
    LOOM_ASSERT_OK(store->ReadState(0, absl::MakeSpan(got_master), absl::MakeSpan(got_m),
                               absl::MakeSpan(got_v)));
    EXPECT_EQ(got_master, master);
    EXPECT_EQ(got_m, m);
    EXPECT_EQ(got_v, v);
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kRegather));
    LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, store->Acquire(0));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], ToFloat(ToBFloat16(master[i])));
    LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const BFloat16> w16, store->AcquireBf16(0));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w16[i].bits, ToBFloat16(master[i]).bits);
    LOOM_ASSERT_OK(store->EndPass());
  });
}

TEST(ReplicatedStoreTest, RefusesCallsOutOfOrderByName) {
  RunInprocRanks(1, [](int, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(Specs(), &comm, Initial()));
    EXPECT_THAT(store->Acquire(0).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("\"fc.w\"")));
    EXPECT_THAT(store->Acquire(2).status(), StatusIs(absl::StatusCode::kOutOfRange, ::testing::_));
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kForward));
    EXPECT_THAT(store->BeginParameterPass(ParameterPass::kBackward),
                StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
    const std::vector<float> g(10, 1.0f);
    EXPECT_THAT(store->AddGrad(1, g),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("kForward")));
    LOOM_ASSERT_OK(store->EndPass());
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kGradients));
    EXPECT_THAT(store->Acquire(1).status(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
    EXPECT_THAT(store->AddGrad(1, absl::MakeConstSpan(g).subspan(1)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("9 elements for 10")));
    LOOM_ASSERT_OK(store->AddGrad(1, g));
    EXPECT_THAT(store->ReduceGradients(), StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
    LOOM_ASSERT_OK(store->EndPass());
    EXPECT_THAT(store->ReducedGradSquaredNorm({1.0f, 1.0f}).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
    LOOM_ASSERT_OK(store->ReduceGradients());
    EXPECT_THAT(store->ReducedGradSquaredNorm({1.0f}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 weights for 2")));
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
    EXPECT_THAT(store->AddGrad(1, g), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               HasSubstr("after ReduceGradients")));
    LOOM_ASSERT_OK(store->EndPass());
    EXPECT_THAT(store->StepWith(nullptr),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null")));
  });
}

TEST(ReplicatedStoreTest, CreateNamesBadInput) {
  RunInprocRanks(1, [](int, Communicator& comm) {
    EXPECT_THAT(ReplicatedStore::Create(Specs(), &comm, std::vector<float>(15)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("15 initial values for 16")));
    EXPECT_THAT(ReplicatedStore::Create({}, &comm, {}).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no parameters")));
    ReplicatedStoreOptions options;
    options.adamw_threads = 0;
    EXPECT_THAT(ReplicatedStore::Create(Specs(), &comm, Initial(), options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("adamw_threads 0")));
    options = ReplicatedStoreOptions();
    options.compute_dtype = DType::kF16;
    EXPECT_THAT(ReplicatedStore::Create(Specs(), &comm, Initial(), options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f16")));
  });
}

// StepWith hands the averaged bucket and the weights to an outside optimizer, then
// zeroes the bucket; in bf16 it is refused (the weights are not the master).
TEST(ReplicatedStoreTest, StepWithRunsTheCallersStep) {
  RunInprocRanks(2, [](int rank, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(Specs(), &comm, Initial()));
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kGradients));
    const std::vector<float> g = Grad(rank, 0);
    LOOM_ASSERT_OK(store->AddGrad(0, absl::MakeConstSpan(g).subspan(0, 6)));
    LOOM_ASSERT_OK(store->AddGrad(1, absl::MakeConstSpan(g).subspan(6)));
    LOOM_ASSERT_OK(store->EndPass());
    const std::vector<float> g0 = Grad(0, 0), g1 = Grad(1, 0);
    LOOM_ASSERT_OK(store->StepWith([&](absl::Span<const absl::Span<float>> weights,
                                  absl::Span<const float> gradient) -> absl::Status {
      EXPECT_EQ(weights.size(), 2u);
      for (int i = 0; i < kTotal; ++i) EXPECT_EQ(gradient[i], (g0[i] + g1[i]) / 2) << i;
      for (float& w : weights[0]) w = 5.0f;  // the caller's update
      return absl::OkStatus();
    }));
    for (const float v : store->gradient()) EXPECT_EQ(v, 0.0f);
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kForward));
    LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, store->Acquire(0));
    for (const float v : w) EXPECT_EQ(v, 5.0f);
    LOOM_ASSERT_OK(store->EndPass());
  });
  RunInprocRanks(1, [](int, Communicator& comm) {
    ReplicatedStoreOptions options;
    options.compute_dtype = DType::kBF16;
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(Specs(), &comm, Initial(), options));
    EXPECT_THAT(store->StepWith([](absl::Span<const absl::Span<float>>,
                                   absl::Span<const float>) { return absl::OkStatus(); }),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("f32")));
  });
}

// Overlap: each unit is all-reduced on the reducer's thread as soon as its last
// gradient of the step arrives (before ReduceGradients), bitwise the whole-bucket
// result; a parameter given too many is refused; units short of gradients are
// reduced by ReduceGradients; every step reuses the thread.
TEST(ReplicatedStoreTest, OverlappedUnitsEqualOneAllReduce) {
  constexpr int kDp = 4;
  // Three parameters in two units (fc.w with fc.b, then a unit-less one).
  const std::vector<ParamSpec> specs = {ParamSpec{"fc.w", {2, 3}, 0}, ParamSpec{"fc.b", {4}, 0},
                                        ParamSpec{"out", {6}, -1}};
  std::vector<float> average(kTotal, 0.0f);
  for (int r = 0; r < kDp; ++r) {
    for (int k = 0; k < 2; ++k) {
      const std::vector<float> g = Grad(r, k);
      for (int i = 0; i < kTotal; ++i) average[i] += g[i];
    }
  }
  for (float& g : average) g /= kDp;
  RunInprocRanks(kDp, [&](int rank, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<GradientAllReducer> reducer,
                              GradientAllReducer::Create(&comm, {}));
    ReplicatedStoreOptions options;
    options.reducer = reducer;
    options.grads_per_step = 2;
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                              ReplicatedStore::Create(specs, &comm, Initial(), options));
    EXPECT_EQ(store->num_buckets(), 2);
    for (int step = 1; step <= 2; ++step) {
      for (int k = 0; k < 2; ++k) {
        const std::vector<float> g = Grad(rank, k);
        LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
        LOOM_ASSERT_OK(store->AddGrad(2, absl::MakeConstSpan(g).subspan(10)));
        LOOM_ASSERT_OK(store->AddGrad(1, absl::MakeConstSpan(g).subspan(6, 4)));
        LOOM_ASSERT_OK(store->AddGrad(0, absl::MakeConstSpan(g).subspan(0, 6)));
        LOOM_ASSERT_OK(store->EndPass());
      }
      // Both units went to the reducer during the second backward.
      EXPECT_EQ(reducer->enqueued(), 2 * step);
      LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
      EXPECT_THAT(store->AddGrad(2, absl::MakeConstSpan(Grad(rank, 0)).subspan(10)),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("\"out\") a 3th time this step, past grads_per_step 2")));
      LOOM_ASSERT_OK(store->EndPass());
      LOOM_ASSERT_OK(store->ReduceGradients());
      for (int i = 0; i < kTotal; ++i) ASSERT_EQ(store->gradient()[i], average[i]) << i;
      LOOM_ASSERT_OK(store->Step(Hyper(step)));
    }
    // A step with one backward: no unit is complete, ReduceGradients reduces both.
    const std::vector<float> g = Grad(rank, 0);
    LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
    for (int p : {2, 1, 0}) {
      const size_t at = p == 0 ? 0 : (p == 1 ? 6 : 10);
      const size_t n = p == 0 ? 6 : (p == 1 ? 4 : 6);
      LOOM_ASSERT_OK(store->AddGrad(p, absl::MakeConstSpan(g).subspan(at, n)));
    }
    LOOM_ASSERT_OK(store->EndPass());
    EXPECT_EQ(reducer->enqueued(), 4);
    LOOM_ASSERT_OK(store->ReduceGradients());
    EXPECT_EQ(reducer->enqueued(), 6);
    std::vector<float> one(kTotal, 0.0f);
    for (int r = 0; r < kDp; ++r) {
      const std::vector<float> gr = Grad(r, 0);
      for (int i = 0; i < kTotal; ++i) one[i] += gr[i];
    }
    for (int i = 0; i < kTotal; ++i) EXPECT_EQ(store->gradient()[i], one[i] / kDp) << i;
    EXPECT_EQ(comm.Counters(CollectiveKind::kAllReduce).calls, 6u);
  });
}

// Buckets (DDP's bucket_cap): a unit is cut from its last parameter backwards at
// bucket_cap_bytes and each bucket is all-reduced as soon as its own parameters
// have all their gradients, before the rest of the unit; Step without
// ReduceGradients steps each bucket as its all-reduce ends. Weights and moments
// are bitwise those of one all-reduce per unit, reduced before the step, in f32
// and bf16 (dp 3; the gradients are multiples of 1/64, so any fold is exact).
TEST(ReplicatedStoreTest, BucketsTravelBeforeTheirUnitEndsAndStepAsTheyArrive) {
  constexpr int kDp = 3;
  // One unit: a (8 elements), b (4), c (4); a backward gives c, then b, then a.
  const std::vector<ParamSpec> specs = {ParamSpec{"a", {8}, 0}, ParamSpec{"b", {4}, 0},
                                        ParamSpec{"c", {4}, 0}};
  const int64_t at[] = {0, 8, 12, 16};
  struct Config {
    int64_t cap_bytes;
    bool reduce_first;
    int buckets;
    // reducer->enqueued() after AddGrad of c, b, a in a step's last backward.
    int64_t enqueued_after[3];
  };
  const Config configs[] = {
      {0, true, 1, {0, 0, 1}},    // the reference: one bucket, reduced, then stepped
      {0, false, 1, {0, 0, 1}},   // one bucket, stepped as it arrives
      {16, false, 3, {1, 2, 3}},  // every parameter alone
      {32, false, 2, {0, 1, 2}},  // b with c (32 bytes), a alone
  };
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    std::vector<std::vector<float>> weights(std::size(configs)), moments(std::size(configs));
    for (size_t c = 0; c < std::size(configs); ++c) {
      const Config& config = configs[c];
      SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " cap " << config.cap_bytes
                                      << (config.reduce_first ? " reduced first" : " overlapped"));
      RunInprocRanks(kDp, [&](int rank, Communicator& comm) {
        LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<GradientAllReducer> reducer,
                                  GradientAllReducer::Create(&comm, {}));
        ReplicatedStoreOptions options;
        options.compute_dtype = dtype;
        options.reducer = reducer;
        options.grads_per_step = 2;
        options.bucket_cap_bytes = config.cap_bytes;
        LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<ReplicatedStore> store,
                                  ReplicatedStore::Create(specs, &comm, Initial(), options));
        EXPECT_EQ(store->num_buckets(), config.buckets);
        for (int step = 1; step <= 2; ++step) {
          const int64_t before = reducer->enqueued();
          for (int k = 0; k < 2; ++k) {
            const std::vector<float> g = Grad(rank, k);
            LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kBackward));
            for (const int p : {2, 1, 0}) {
              LOOM_ASSERT_OK(store->AddGrad(
                  p, absl::MakeConstSpan(g).subspan(static_cast<size_t>(at[p]),
                                                    static_cast<size_t>(at[p + 1] - at[p]))));
              if (k == 1) {
                EXPECT_EQ(reducer->enqueued() - before, config.enqueued_after[2 - p])
                    << "after parameter " << p;
              }
            }
            LOOM_ASSERT_OK(store->EndPass());
          }
          if (config.reduce_first) {
            LOOM_ASSERT_OK(store->ReduceGradients());
          }
          LOOM_ASSERT_OK(store->Step(Hyper(step)));
          for (const float v : store->gradient()) ASSERT_EQ(v, 0.0f);
        }
        if (rank != 1) return;
        LOOM_ASSERT_OK(store->BeginParameterPass(ParameterPass::kForward));
        for (int p = 0; p < 3; ++p) {
          LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, store->Acquire(p));
          weights[c].insert(weights[c].end(), w.begin(), w.end());
          std::vector<float> master(w.size()), m(w.size()), v(w.size());
          LOOM_ASSERT_OK(store->ReadState(p, absl::MakeSpan(master), absl::MakeSpan(m),
                                          absl::MakeSpan(v)));
          for (const auto* field : {&master, &m, &v}) {
            moments[c].insert(moments[c].end(), field->begin(), field->end());
          }
        }
        LOOM_ASSERT_OK(store->EndPass());
      });
      ASSERT_EQ(weights[c].size(), static_cast<size_t>(kTotal));
      for (size_t i = 0; i < weights[c].size(); ++i) {
        EXPECT_EQ(testing_internal::FloatBits(weights[c][i]), testing_internal::FloatBits(weights[0][i])) << "weight " << i;
      }
      for (size_t i = 0; i < moments[c].size(); ++i) {
        EXPECT_EQ(testing_internal::FloatBits(moments[c][i]), testing_internal::FloatBits(moments[0][i])) << "state " << i;
      }
    }
  }
}

TEST(ReplicatedStoreTest, RefusesANegativeBucketCap) {
  RunInprocRanks(1, [](int, Communicator& comm) {
    ReplicatedStoreOptions options;
    options.bucket_cap_bytes = -1;
    EXPECT_THAT(ReplicatedStore::Create(Specs(), &comm, Initial(), options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bucket_cap_bytes -1")));
  });
}

}  // namespace
}  // namespace loom
