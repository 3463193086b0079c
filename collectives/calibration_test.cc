#include "collectives/calibration.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// Four thread ranks calibrate; all end with rank 0's constants, positive and
// finite, and a model that round-trips through its text form.
TEST(CalibrationTest, EveryRankGetsTheSameMeasuredModel) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(4));
  std::vector<absl::StatusOr<CostModel>> models(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = group->Endpoint(r);
      if (!endpoint.ok()) { models[r] = endpoint.status(); return; }
      CommunicatorOptions options;
      options.ranks_per_node = 2;
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(std::move(*endpoint), options);
      if (!comm.ok()) { models[r] = comm.status(); return; }
      CalibrationOptions calibration;
      calibration.latency_round_trips = 20;
      calibration.bandwidth_bytes = 1 << 20;
      calibration.bandwidth_round_trips = 3;
      models[r] = Calibrate(**comm, calibration);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < 4; ++r) ASSERT_THAT(models[r], IsOk()) << r;
  for (int r = 1; r < 4; ++r) EXPECT_EQ(models[r]->Serialize(), models[0]->Serialize());
  const CostModel::Constants& c = models[0]->constants();
  // Measured, not the defaults: a default constant surviving would mean a
  // measurement did not happen.
  const CostModel::Constants defaults = CostModel::Default().constants();
  EXPECT_NE(c.alpha, defaults.alpha);
  EXPECT_NE(c.beta, defaults.beta);
  EXPECT_NE(c.gamma, defaults.gamma);
  EXPECT_NE(c.inter_node_alpha, defaults.inter_node_alpha);
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel parsed, CostModel::Parse(models[0]->Serialize()));
  EXPECT_EQ(parsed.Serialize(), models[0]->Serialize());
}

// RunRanks runs `body` on four thread ranks (`ranks_per_node` a node), each with its
// communicator.
template <typename Result>
std::vector<absl::StatusOr<Result>> RunRanks(
    const std::function<absl::StatusOr<Result>(Communicator&)>& body, int ranks_per_node = 2) {
  std::vector<absl::StatusOr<Result>> results(4, absl::UnknownError("not run"));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(4);
  if (!group.ok()) return std::vector<absl::StatusOr<Result>>(4, group.status());
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
      if (!endpoint.ok()) { results[r] = endpoint.status(); return; }
      CommunicatorOptions options;
      options.ranks_per_node = ranks_per_node;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*endpoint), options);
      if (!comm.ok()) { results[r] = comm.status(); return; }
      results[r] = body(**comm);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

// QuickCurves: a short calibration of all-reduce curves at `sizes`, two batches a
// point, for thread ranks.
CalibrationOptions QuickCurves(std::vector<size_t> sizes, double batch_seconds) {
  CalibrationOptions calibration;
  calibration.latency_round_trips = 5;
  calibration.bandwidth_bytes = 1 << 16;
  calibration.bandwidth_round_trips = 2;
  calibration.curve_sizes = std::move(sizes);
  calibration.curve_kinds = {CollectiveKind::kAllReduce};
  calibration.curve_batches = 2;
  calibration.curve_batch_seconds = batch_seconds;
  return calibration;
}

// Curves with batches of one call (a batch time no call fits in: the timed call is
// the first batch, and larger sizes skip their timed call) and of many: every rank
// runs the same calls (a rank that ran one more would hang its peers) and ends with
// rank 0's curves, one positive point per size, unsorted sizes included.
TEST(CalibrationTest, CurvesAgreeWhateverTheBatchLength) {
  // (batch seconds, warm-call seconds): warm calls before every size, before the
  // first only (no budget for the rest), or as the constants price them.
  for (const auto& [batch, warm] : std::vector<std::pair<double, double>>{
           {1e-9, -1}, {1e-9, 0}, {0.0, 0}, {2e-3, 1e9}, {2e-3, 1e-3}}) {
    const double batch_seconds = batch;
    const double warm_seconds = warm;
    SCOPED_TRACE(absl::StrCat("batch ", batch_seconds, " s, warm calls ", warm_seconds, " s"));
    const std::vector<absl::StatusOr<CostModel>> models =
        RunRanks<CostModel>([&](Communicator& comm) {
          CalibrationOptions calibration =
              QuickCurves({64 << 10, 4 << 10, 1 << 20, 16 << 10}, batch_seconds);
          calibration.curve_warm_seconds = warm_seconds;
          return Calibrate(comm, calibration);
        });
    for (int r = 0; r < 4; ++r) ASSERT_THAT(models[r], IsOk()) << r;
    for (int r = 1; r < 4; ++r) EXPECT_EQ(models[r]->Serialize(), models[0]->Serialize());
    const auto curve = models[0]->curve(CollectiveKind::kAllReduce, Algorithm::kRing, 4, 2);
    ASSERT_EQ(curve.size(), 4u);
    for (const auto& [bytes, seconds] : curve) EXPECT_GT(seconds, 0) << bytes;
  }
}

// curve_prune_factor: a factor no price exceeds leaves every candidate measured
// at the largest size; one every price exceeds runs only the cheapest candidate
// there, and prices the others' largest point as their previous one times the
// sizes' ratio. Every rank runs the same calls and ends with the same curves.
TEST(CalibrationTest, PrunedCandidatesArePricedInProportionToBytes) {
  const std::vector<size_t> sizes = {4 << 10, 64 << 10, 256 << 10};
  for (const double factor : {1e9, 1e-9}) {
    SCOPED_TRACE(absl::StrCat("prune factor ", factor));
    const std::vector<absl::StatusOr<CostModel>> models =
        RunRanks<CostModel>([&](Communicator& comm) {
          CalibrationOptions calibration = QuickCurves(sizes, 1e-9);
          calibration.curve_prune_factor = factor;
          return Calibrate(comm, calibration);
        });
    for (int r = 0; r < 4; ++r) ASSERT_THAT(models[r], IsOk()) << r;
    for (int r = 1; r < 4; ++r) EXPECT_EQ(models[r]->Serialize(), models[0]->Serialize());
    int measured_at_top = 0, priced_at_top = 0;
    for (const Algorithm algorithm : AllAlgorithms()) {
      const auto curve = models[0]->curve(CollectiveKind::kAllReduce, algorithm, 4, 2);
      if (curve.empty()) continue;
      ASSERT_EQ(curve.size(), sizes.size()) << AlgorithmName(algorithm);
      const double proportional = curve[1].second * static_cast<double>(sizes[2]) /
                                  static_cast<double>(sizes[1]);
      if (curve[2].second == proportional) {
        ++priced_at_top;
      } else {
        ++measured_at_top;
      }
    }
    if (factor > 1) {
      EXPECT_EQ(priced_at_top, 0);
      EXPECT_GE(measured_at_top, 3);
    } else {
      EXPECT_EQ(measured_at_top, 1);  // the cheapest at the size before
      EXPECT_GE(priced_at_top, 2);
    }
  }
}

// At each size the candidates' batches take turns, one batch of each a round, each
// round starting one candidate further along, so that a slow stretch of the machine
// weighs on all of them alike. Read from the flight recorder's 64 KiB calls: at
// 4 KiB no call fits in a batch, so the batches at 64 KiB are single calls with no
// timed call first; each candidate has its warm call (in candidate order), then
// three rounds of batches.
TEST(CalibrationTest, CandidatesBatchesTakeTurns) {
  const std::vector<absl::StatusOr<std::vector<Algorithm>>> batches =
      RunRanks<std::vector<Algorithm>>(
          [&](Communicator& comm) -> absl::StatusOr<std::vector<Algorithm>> {
            CalibrationOptions calibration = QuickCurves({4 << 10, 64 << 10}, 1e-9);
            calibration.curve_batches = 3;
            calibration.curve_warm_seconds = -1;  // a warm call before every size
            LOOM_RETURN_IF_ERROR(Calibrate(comm, calibration).status());
            std::vector<Algorithm> calls;  // the 64 KiB all-reduces, in order
            for (const FlightRecord& record : comm.FlightRecorderSnapshot()) {
              if (record.kind == CollectiveKind::kAllReduce && record.dtype == DType::kF32 &&
                  record.count == (64 << 10) / sizeof(float)) {
                calls.push_back(record.algorithm);
              }
            }
            return calls;
          });
  for (int r = 0; r < 4; ++r) ASSERT_THAT(batches[r], IsOk()) << r;
  const std::vector<Algorithm>& calls = *batches[0];
  std::vector<Algorithm> candidates;
  for (Algorithm algorithm : calls) {
    if (std::find(candidates.begin(), candidates.end(), algorithm) == candidates.end()) {
      candidates.push_back(algorithm);
    }
  }
  const size_t n = candidates.size();
  ASSERT_GE(n, 3u);
  ASSERT_EQ(calls.size(), 4 * n);  // a warm call and three batches each
  for (size_t round = 0; round < 3; ++round) {
    for (size_t turn = 0; turn < n; ++turn) {
      EXPECT_EQ(calls[(round + 1) * n + turn], candidates[(round + turn) % n])
          << "round " << round << ", turn " << turn;
    }
  }
  for (int r = 1; r < 4; ++r) EXPECT_EQ(*batches[r], calls) << "rank " << r;
}

// MeasureCall tells each rank the calls its batches had: the same everywhere, one
// where no call fits in a batch, and `calls` where the batch length is not measured.
TEST(CalibrationTest, MeasureCallReportsTheAgreedCalls) {
  for (const auto& [batch, calls_expected] : std::vector<std::pair<double, int64_t>>{
           {1e-9, 1}, {0.0, 3}}) {
    // (Copies: C++17 lambdas cannot capture structured bindings.)
    const double batch_seconds = batch;
    const int64_t expected = calls_expected;
    const std::vector<absl::StatusOr<int64_t>> calls = RunRanks<int64_t>(
        [&](Communicator& comm) -> absl::StatusOr<int64_t> {
          int64_t agreed = -1;
          LOOM_ASSIGN_OR_RETURN(const double seconds,
                                MeasureCall(comm, CollectiveKind::kAllReduce, Algorithm::kRing,
                                            64 << 10, /*batches=*/2, batch_seconds,
                                            /*warm=*/true, /*calls=*/3, &agreed));
          if (!(seconds > 0)) return absl::InternalError("no time measured");
          return agreed;
        });
    for (int r = 0; r < 4; ++r) {
      ASSERT_THAT(calls[r], IsOk()) << r;
      EXPECT_EQ(*calls[r], expected) << "rank " << r << ", batch " << batch_seconds << " s";
    }
  }
}

// Round trips cut to their time (latency_seconds, bandwidth_seconds: 3 a
// measurement here, where one takes microseconds) end together on both sides of each
// pair: every ping says how many trips are still to come, and a partner that ran one
// trip more or less than rank 0 would leave the curves after it waiting past their
// deadline. With one rank a node, ranks 0 and 1 are the inter-node pair, measured
// once: the intra-node constants are the same numbers.
TEST(CalibrationTest, RoundTripsCutToTheirTimeEndTogether) {
  for (const int per_node : {2, 1}) {
    SCOPED_TRACE(absl::StrCat(per_node, " rank(s) a node"));
    const std::vector<absl::StatusOr<CostModel>> models = RunRanks<CostModel>(
        [&](Communicator& comm) {
          CalibrationOptions calibration = QuickCurves({4 << 10, 64 << 10}, 1e-9);
          calibration.latency_round_trips = 50;
          calibration.bandwidth_round_trips = 20;
          calibration.latency_seconds = 1e-9;
          calibration.bandwidth_seconds = 1e-9;
          return Calibrate(comm, calibration);
        },
        per_node);
    for (int r = 0; r < 4; ++r) ASSERT_THAT(models[r], IsOk()) << r;
    for (int r = 1; r < 4; ++r) EXPECT_EQ(models[r]->Serialize(), models[0]->Serialize());
    const CostModel::Constants& c = models[0]->constants();
    EXPECT_GT(c.alpha, 0);
    EXPECT_GT(c.inter_node_alpha, 0);
    EXPECT_FALSE(models[0]->curve(CollectiveKind::kAllReduce, Algorithm::kRing, 4, per_node).empty());
    if (per_node == 1) {
      EXPECT_EQ(c.alpha, c.inter_node_alpha);
      EXPECT_EQ(c.beta, c.inter_node_beta);
    }
  }
}

// A point is the middle batch, not the luckiest: one stall does not price an
// algorithm out, and one lucky batch does not price it in.
TEST(CalibrationTest, LowerMedianIsTheMiddleBatch) {
  EXPECT_EQ(LowerMedian({}), 0);
  EXPECT_EQ(LowerMedian({3.0}), 3.0);
  EXPECT_EQ(LowerMedian({5.0, 4.0}), 4.0);             // two: the lower, as before
  EXPECT_EQ(LowerMedian({4.85, 5.9, 5.6}), 5.6);      // a lucky batch does not count
  EXPECT_EQ(LowerMedian({1.0, 140.0, 1.1}), 1.1);     // nor a stalled one
  EXPECT_EQ(LowerMedian({4.0, 1.0, 3.0, 2.0}), 2.0);
}

}  // namespace
}  // namespace loom
