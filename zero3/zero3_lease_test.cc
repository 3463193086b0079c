// Unit leases (core/parameter_source.h's LeaseUnit) through the ZeRO engine's
// gather/release coordinator: a leased unit stays gathered, and its gradients
// unreduced, until the lease ends; a unit may be used again while leased (tied
// weights); what a lease cannot do is named, and nothing hangs.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "collectives/inproc_ranks_testing.h"
#include "core/parameter_source.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "zero3/partition.h"
#include "zero3/zero3_engine.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// A model of five units as a GPT declares them: the embeddings, three blocks (of
// uneven sizes) and the head; `tiny` (unit 5) falls under the persistence
// threshold and stays whole.
std::vector<ParamSpec> UnitSpecs() {
  return {{"embed.token", {37, 5}, 0}, {"embed.position", {8, 5}, 0},
          {"blocks.0.w", {5, 15}, 1},  {"blocks.0.b", {15}, 1},
          {"blocks.1.w", {5, 23}, 2},  {"blocks.1.b", {23}, 2},
          {"blocks.2.w", {23, 5}, 3},  {"head.w", {5, 41}, 4},
          {"tiny", {3}, 5}};
}

std::vector<ParameterUnit> Units() {
  return {{"embed", 0, 2}, {"blocks.0", 2, 4}, {"blocks.1", 4, 6},
          {"blocks.2", 6, 7}, {"head", 7, 8}, {"tiny", 8, 9}};
}

PartitionOptions Options(int dp) {
  PartitionOptions options;
  options.dp_size = dp;
  options.persistence_threshold = 4;
  options.align_numel = 16;
  return options;
}

std::vector<float> Initial(const Partition& partition) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> flat(static_cast<size_t>(partition.TotalNumel()));
  for (float& x : flat) x = dist(rng);
  return flat;
}

// The values of parameter p in the flat model.
std::vector<float> Whole(const Partition& partition, const std::vector<float>& flat, int p) {
  const int64_t at = partition.FlatOffset(p);
  return std::vector<float>(flat.begin() + at, flat.begin() + at + partition.slot(p).numel);
}

// Rank r's gradient of parameter p: distinct per rank, parameter and element.
std::vector<float> Grad(const Partition& partition, int rank, int p) {
  std::vector<float> g(static_cast<size_t>(partition.slot(p).numel));
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>((rank + 1) * 0.125 + p * 0.5 - static_cast<double>(i) / 64.0);
  }
  return g;
}

std::vector<float> Span(absl::Span<const float> s) { return std::vector<float>(s.begin(), s.end()); }

// A forward pass that leases the embeddings at its start and uses them again after
// the last block (tied weights: the head reads the embedding table) sees the same
// values both times, while the blocks in between are gathered and released as
// usual; the same second use without a lease is refused, naming the lease.
TEST(Zero3LeaseTest, ALeasedUnitMayBeUsedAgainLaterInThePass) {
  for (const int prefetch : {0, 1, 3}) {
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                              Partition::Create(UnitSpecs(), Options(2)));
    ASSERT_EQ(partition.num_buckets(), 5);
    const std::vector<float> initial = Initial(partition);
    RunInprocRanks(2, [&](int, Communicator& comm) {
      Zero3Options options;
      options.prefetch_depth = prefetch + 1;  // the held lease takes one buffer
      std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial, options);
      const std::vector<ParameterUnit> units = Units();
      LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
      {
        LOOM_ASSERT_OK_AND_ASSIGN(UnitLease embed, engine->LeaseUnit(units[0]));
        LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> table, embed.Get(0));
        EXPECT_EQ(Span(table), Whole(partition, initial, 0));
        for (int u = 1; u <= 4; ++u) {
          LOOM_ASSERT_OK_AND_ASSIGN(UnitLease unit, engine->LeaseUnit(units[u]));
          for (int p = units[u].first; p < units[u].end; ++p) {
            LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, unit.Get(p));
            EXPECT_EQ(Span(w), Whole(partition, initial, p)) << p;
          }
        }
        // Used again, after the pass moved past it: legal while leased.
        LOOM_ASSERT_OK_AND_ASSIGN(UnitLease again, engine->LeaseUnit(units[0]));
        LOOM_ASSERT_OK_AND_ASSIGN(table, again.Get(0));
        EXPECT_EQ(Span(table), Whole(partition, initial, 0));
        EXPECT_LE(engine->Stats().live_gathered_bytes,
                  engine->gather_buffers() * engine->gathered_bytes_per_element() *
                      partition.MaxBucketNumel());
      }
      LOOM_ASSERT_OK(engine->EndPass());
      // Without a lease the embeddings go when the pass moves on.
      LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
      LOOM_ASSERT_OK(engine->Acquire(0).status());
      LOOM_ASSERT_OK(engine->Acquire(7).status());
      EXPECT_THAT(engine->LeaseUnit(units[0]),
                  StatusIs(absl::StatusCode::kFailedPrecondition,
                           HasSubstr("LeaseUnit(\"embed\"): its bucket 0 was already released in "
                                     "this forward pass (no lease held it")));
      EXPECT_THAT(engine->Acquire(0), StatusIs(absl::StatusCode::kFailedPrecondition,
                                               HasSubstr("held by a lease")));
      EXPECT_THAT(engine->EndPass(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Zero3Engine rank")));
    });
  }
}

// Gradients given to a unit while its lease outlives its turn (the pass has moved
// on to earlier units) are reduced when the lease ends: the step's result is
// bitwise that of the same gradients given in pass order without leases.
TEST(Zero3LeaseTest, ALeaseDefersItsUnitsReductionAndChangesNoBit) {
  for (const int stage : {2, 3}) {
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition,
                              Partition::Create(UnitSpecs(), Options(3)));
    const std::vector<float> initial = Initial(partition);
    std::vector<std::vector<float>> plain(3), leased(3);
    CommunicatorOptions deterministic = InprocTestOptions();
    deterministic.deterministic = true;  // rank-order folds: bitwise comparable
    for (const bool use_leases : {false, true}) {
      RunInprocRanks(3, [&](int rank, Communicator& comm) {
        Zero3Options options;
        options.stage = stage;
        std::unique_ptr<Zero3Engine> engine =
            *Zero3Engine::Create(partition, &comm, initial, options);
        const std::vector<ParameterUnit> units = Units();
        LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kBackward));
        if (use_leases) {
          // blocks.2 stays leased while blocks.1 and blocks.0 are used; its
          // gradients come last, after the pass has moved past it.
          LOOM_ASSERT_OK_AND_ASSIGN(UnitLease head, engine->LeaseUnit(units[4]));
          LOOM_ASSERT_OK(engine->AddGrad(7, Grad(partition, rank, 7)));
          head.Release();
          LOOM_ASSERT_OK_AND_ASSIGN(UnitLease held, engine->LeaseUnit(units[3]));
          for (int u = 2; u >= 0; --u) {
            LOOM_ASSERT_OK_AND_ASSIGN(UnitLease unit, engine->LeaseUnit(units[u]));
            for (int p = units[u].end - 1; p >= units[u].first; --p) {
              LOOM_ASSERT_OK(engine->AddGrad(p, Grad(partition, rank, p)));
            }
          }
          LOOM_ASSERT_OK(engine->AddGrad(6, Grad(partition, rank, 6)));
        } else {
          for (int p = 7; p >= 0; --p) LOOM_ASSERT_OK(engine->AddGrad(p, Grad(partition, rank, p)));
        }
        LOOM_ASSERT_OK(engine->AddGrad(8, Grad(partition, rank, 8)));
        LOOM_ASSERT_OK(engine->EndPass());
        AdamWHyper hyper;
        hyper.step = 1;
        LOOM_ASSERT_OK(engine->Step(hyper));
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> after, engine->GatherAll());
        (use_leases ? leased : plain)[static_cast<size_t>(rank)] = std::move(after);
      }, deterministic);
    }
    for (int r = 0; r < 3; ++r) {
      ASSERT_EQ(leased[r].size(), plain[r].size());
      for (size_t i = 0; i < plain[r].size(); ++i) {
        ASSERT_EQ(leased[r][i], plain[r][i]) << "stage " << stage << " rank " << r << " at " << i;
      }
      EXPECT_NE(plain[r], initial);  // the step did move the weights
    }
  }
}

// A lease held at EndPass is the caller's error, named on every rank, and the
// ranks still make the same calls: the next pass runs, and the stale lease's end
// does nothing to it.
TEST(Zero3LeaseTest, ALeaseHeldAtEndPassIsNamedAndNothingHangs) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(UnitSpecs(), Options(2)));
  const std::vector<float> initial = Initial(partition);
  RunInprocRanks(2, [&](int rank, Communicator& comm) {
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial);
    const std::vector<ParameterUnit> units = Units();
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kBackward));
    LOOM_ASSERT_OK_AND_ASSIGN(UnitLease forgotten, engine->LeaseUnit(units[4]));
    LOOM_ASSERT_OK(engine->AddGrad(7, Grad(partition, rank, 7)));
    EXPECT_THAT(engine->EndPass(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("EndPass with leases still held on bucket(s) 4 (\"head.w\")")));
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
    forgotten.Release();  // of the last pass: nothing happens
    for (int p = 0; p < 9; ++p) LOOM_ASSERT_OK(engine->Acquire(p).status()) << p;
    LOOM_EXPECT_OK(engine->EndPass());
  });
}

// Leases that keep every pool buffer past their turn leave the next unit no room:
// named with the leased buckets and what to change, not a hang.
TEST(Zero3LeaseTest, LeasesHoldingThePoolAreNamed) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(UnitSpecs(), Options(2)));
  const std::vector<float> initial = Initial(partition);
  RunInprocRanks(2, [&](int, Communicator& comm) {
    Zero3Options options;
    options.prefetch_depth = 0;  // one buffer
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial, options);
    const std::vector<ParameterUnit> units = Units();
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
    LOOM_ASSERT_OK_AND_ASSIGN(UnitLease embed, engine->LeaseUnit(units[0]));
    EXPECT_THAT(engine->LeaseUnit(units[1]),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("bucket 1 (\"blocks.0.w\" and 1 more) has no gather buffer: the "
                                   "pool's 1 are held by leases on bucket(s) 0 (\"embed.token\" "
                                   "and 1 more)")));
    embed.Release();
    EXPECT_THAT(engine->EndPass(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("Zero3Engine rank")));
    // The engine is usable again.
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
    for (int u = 0; u < 6; ++u) LOOM_ASSERT_OK(engine->LeaseUnit(units[u]).status()) << u;
    LOOM_EXPECT_OK(engine->EndPass());
  });
}

// What a lease is asked for outside its unit or after it ended, and a lease of
// what is not a unit, are named.
TEST(Zero3LeaseTest, MisuseIsNamed) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition partition, Partition::Create(UnitSpecs(), Options(1)));
  const std::vector<float> initial = Initial(partition);
  RunInprocRanks(1, [&](int, Communicator& comm) {
    std::unique_ptr<Zero3Engine> engine = *Zero3Engine::Create(partition, &comm, initial);
    const std::vector<ParameterUnit> units = Units();
    EXPECT_THAT(engine->LeaseUnit(units[0]),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("outside a pass")));
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kForward));
    LOOM_ASSERT_OK_AND_ASSIGN(UnitLease block, engine->LeaseUnit(units[1]));
    EXPECT_THAT(block.Get(4), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("parameter 4 is not in the unit's [2, 4)")));
    block.Release();
    EXPECT_FALSE(block.held());
    EXPECT_THAT(block.Get(2), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("after the lease ended")));
    EXPECT_THAT(engine->LeaseUnit(ParameterUnit{"blocks.0-1", 2, 6}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("parameters 2 and 4 lie in different buckets")));
    EXPECT_THAT(engine->LeaseUnit(ParameterUnit{"past", 8, 12}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the model has 9")));
    // The persistent unit is resident: its lease pins nothing.
    LOOM_ASSERT_OK_AND_ASSIGN(UnitLease tiny, engine->LeaseUnit(units[5]));
    LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<const float> w, tiny.Get(8));
    EXPECT_EQ(Span(w), Whole(partition, initial, 8));
    tiny.Release();
    LOOM_EXPECT_OK(engine->EndPass());
    LOOM_ASSERT_OK(engine->BeginParameterPass(ParameterPass::kGradients));
    EXPECT_THAT(engine->LeaseUnit(units[1]),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gathers nothing")));
    LOOM_EXPECT_OK(engine->EndPass());
  });
}

}  // namespace
}  // namespace loom
