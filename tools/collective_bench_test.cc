#include "tools/collective_bench.h"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// RunOnThreeRanks runs the bench with `options` on 3 in-process thread ranks; each
// rank's rows or error, by rank.
std::vector<absl::StatusOr<std::vector<BenchRow>>> RunOnThreeRanks(const BenchOptions& options) {
  std::vector<absl::StatusOr<std::vector<BenchRow>>> results(3, absl::UnknownError("not run"));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(3);
  if (!group.ok()) {
    results.assign(3, group.status());
    return results;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
      if (!endpoint.ok()) { results[r] = endpoint.status(); return; }
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(std::move(*endpoint));
      if (!comm.ok()) { results[r] = comm.status(); return; }
      results[r] = RunCollectiveBench(**comm, options);
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

TEST(BusFactorTest, MatchesNcclTests) {
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveKind::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveKind::kAllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveKind::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusFactor(CollectiveKind::kBroadcast, 4), 1.0);
}

// Every op the bench drives, checked, on 3 thread ranks: no wrong elements, rows
// for each size, and a table with the closing line.
TEST(RunCollectiveBenchTest, EveryOpChecksClean) {
  for (CollectiveKind op : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                            CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                            CollectiveKind::kReduce, CollectiveKind::kAllToAll}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kI8}) {
      BenchOptions options;
      options.op = op;
      options.dtype = dtype;
      options.redop = dtype == DType::kI8 ? ReduceOp::kProd : ReduceOp::kAvg;
      options.min_bytes = 96;
      options.max_bytes = 96 << 6;
      options.step_factor = 4;
      options.iters = 2;
      options.warmup = 1;
      options.check = true;
      options.in_place = dtype == DType::kBF16;
      options.root = 1;
      const std::vector<absl::StatusOr<std::vector<BenchRow>>> results = RunOnThreeRanks(options);
      for (int r = 0; r < 3; ++r) ASSERT_THAT(results[r], IsOk()) << CollectiveKindName(op);
      const std::vector<BenchRow>& rows = *results[0];
      ASSERT_EQ(rows.size(), 4u) << CollectiveKindName(op);
      for (const BenchRow& row : rows) {
        EXPECT_EQ(row.wrong, 0) << CollectiveKindName(op) << " " << DTypeName(dtype) << " " << row.bytes;
        EXPECT_GT(row.time_us, 0);
        EXPECT_GT(row.busbw_gbps, 0);
      }
      const std::string table = FormatBenchTable(rows, 3, options);
      EXPECT_THAT(table, HasSubstr("size(B)        count   type  redop"));
      EXPECT_THAT(table, HasSubstr("# Avg bus bandwidth    : "));
      EXPECT_THAT(FormatBenchJson(rows, 3, options), HasSubstr("\"busbw_gbps\": "));
    }
  }
}

TEST(ItersForMinSecondsTest, FillsTheTimeWithinBounds) {
  EXPECT_EQ(ItersForMinSeconds(20, 0, 1e-6), 20);      // off: exactly --iters
  EXPECT_EQ(ItersForMinSeconds(20, 0.2, 1e-3), 200);   // 0.2 s of 1 ms calls
  EXPECT_EQ(ItersForMinSeconds(20, 0.2, 0.3e-3), 667); // rounded up
  EXPECT_EQ(ItersForMinSeconds(20, 0.2, 0.5), 20);     // slow calls keep --iters
  EXPECT_EQ(ItersForMinSeconds(20, 0.2, 0), kMostIters);
  EXPECT_EQ(ItersForMinSeconds(20, 60, 1e-12), kMostIters);
  EXPECT_EQ(ItersForMinSeconds(kMostIters + 5, 0.2, 1e-3), kMostIters + 5);
}

TEST(ValidateBenchOptionsTest, MinTimeOutOfRangeIsNamed) {
  BenchOptions options;
  options.min_seconds = -1;
  EXPECT_THAT(ValidateBenchOptions(options, 2, 1).message(), HasSubstr("--min_time=-1s"));
  options.min_seconds = kMostMinSeconds + 1;
  EXPECT_THAT(ValidateBenchOptions(options, 2, 1).message(), HasSubstr("--min_time=61s"));
  options.min_seconds = std::nan("");
  EXPECT_FALSE(ValidateBenchOptions(options, 2, 1).ok());
}

// With --min_time every rank runs the same, larger count (the run would hang
// otherwise), and the JSON and the header say so.
TEST(RunCollectiveBenchTest, MinTimeRunsMoreCallsOnEveryRank) {
  BenchOptions options;
  options.min_bytes = 4096;
  options.max_bytes = 65536;
  options.step_factor = 16;
  options.iters = 2;
  options.warmup = 1;
  options.min_seconds = 0.2;
  options.check = true;
  const std::vector<absl::StatusOr<std::vector<BenchRow>>> results = RunOnThreeRanks(options);
  for (int r = 0; r < 3; ++r) ASSERT_THAT(results[r], IsOk());
  ASSERT_EQ(results[0]->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const BenchRow& row = (*results[0])[i];
    EXPECT_EQ(row.wrong, 0);
    // An in-process all-reduce of 4 KiB takes far less than 100 ms, so 0.2 s of them
    // is more than 2 calls on any machine this runs on, sanitizers included.
    if (row.bytes == 4096) {
      EXPECT_GT(row.iters, options.iters);
    }
    EXPECT_GE(row.iters, options.iters);
    for (int r = 1; r < 3; ++r) EXPECT_EQ((*results[r])[i].iters, row.iters) << "rank " << r;
  }
  EXPECT_THAT(FormatBenchTable(*results[0], 3, options),
              HasSubstr("2 iterations or more (each size at least 0.2s)"));
  EXPECT_THAT(FormatBenchJson(*results[0], 3, options), HasSubstr("\"iters\": "));
}

}  // namespace
}  // namespace loom
