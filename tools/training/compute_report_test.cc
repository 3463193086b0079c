#include "tools/training/compute_report.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ResolveThreadsPerRankTest, DefaultSharesTheCpusBetweenTheRanks) {
  EXPECT_THAT(ResolveThreadsPerRank(0, 1, 2), IsOkAndHolds(2));
  EXPECT_THAT(ResolveThreadsPerRank(0, 2, 2), IsOkAndHolds(1));
  EXPECT_THAT(ResolveThreadsPerRank(0, 8, 2), IsOkAndHolds(1));  // never below 1
  EXPECT_THAT(ResolveThreadsPerRank(0, 3, 16), IsOkAndHolds(5));
}

TEST(ResolveThreadsPerRankTest, AnExplicitCountMustFitUnlessItIsOne) {
  EXPECT_THAT(ResolveThreadsPerRank(2, 1, 2), IsOkAndHolds(2));
  EXPECT_THAT(ResolveThreadsPerRank(1, 8, 2), IsOkAndHolds(1));  // time-sharing, as before
  EXPECT_THAT(ResolveThreadsPerRank(2, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--threads_per_rank 2 with 2 ranks on this host needs 4 CPUs; "
                                 "it has 2")));
  EXPECT_THAT(ResolveThreadsPerRank(3, 1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("with 1 rank on this host needs 3 CPUs")));
  EXPECT_THAT(ResolveThreadsPerRank(-1, 1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--threads_per_rank -1 is not in [0, 1024]")));
  EXPECT_THAT(ResolveThreadsPerRank(0, 0, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 ranks on 2 CPUs")));
}

TEST(CoresUsedTest, CountsBusyCoresPerHostTimesHosts) {
  EXPECT_EQ(CoresUsed(1, 2, 2, 1), 2);
  EXPECT_EQ(CoresUsed(1, 1, 2, 1), 1);
  EXPECT_EQ(CoresUsed(8, 1, 2, 1), 2);  // oversubscribed: the host's CPUs
  EXPECT_EQ(CoresUsed(2, 4, 16, 3), 24);
}

// Issue 56's model: V=256, 128 tokens a sequence, hidden 256, 8 heads, 4 blocks.
GptConfig IssueModel() {
  GptConfig model;
  model.vocab = 256;
  model.seq_len = 128;
  model.hidden = 256;
  model.heads = 8;
  model.layers = 4;
  return model;
}

TEST(ComputeMfuTest, IsAchievedOverMeasuredPeakTimesCores) {
  const GptConfig model = IssueModel();
  FmaPeak peak;
  peak.cpu_model = "Test CPU";
  peak.vector_target = "AVX3";
  peak.flops_per_core = 100e9;
  const MfuReport r = ComputeMfu(model, /*tokens_per_second=*/2000, peak, /*cores=*/2, 2);
  EXPECT_EQ(r.parameters, 3323392 - (256 + 128) * 256);  // the tables left out
  EXPECT_DOUBLE_EQ(r.flops_per_token, 20923392.0);
  EXPECT_DOUBLE_EQ(r.achieved_flops, 20923392.0 * 2000);
  EXPECT_DOUBLE_EQ(r.peak_flops, 200e9);
  EXPECT_DOUBLE_EQ(r.mfu, 20923392.0 * 2000 / 200e9);
  EXPECT_EQ(MfuLine(r),
            "compute: 20.92 MFLOP per token (6N + 12LTh, N = 3225088 besides the embedding tables), "
            "41.8 GFLOP/s; MFU 0.209 of 200.0 GFLOP/s measured (2 cores x 100.0, AVX3, Test CPU); 2 GEMM threads per "
            "rank");
  EXPECT_EQ(r.peak_kind, "f32");
  EXPECT_DOUBLE_EQ(r.mfu_f32_peak, r.mfu);
  // bf16 products: the bf16 peak is the denominator, the f32 MFU beside it.
  peak.bf16_flops_per_core = 250e9;
  const MfuReport b = ComputeMfu(model, 2000, peak, 2, 2, /*bf16_products=*/true);
  EXPECT_EQ(b.peak_kind, "bf16");
  EXPECT_DOUBLE_EQ(b.peak_flops, 500e9);
  EXPECT_DOUBLE_EQ(b.mfu, 20923392.0 * 2000 / 500e9);
  EXPECT_DOUBLE_EQ(b.mfu_f32_peak, r.mfu);
  EXPECT_EQ(MfuLine(b),
            "compute: 20.92 MFLOP per token (6N + 12LTh, N = 3225088 besides the embedding tables), "
            "41.8 GFLOP/s; MFU 0.084 of 500.0 GFLOP/s bf16 peak measured (2 cores x 250.0, AVX3, "
            "Test CPU; 0.209 of the "
            "f32 FMA peak); 2 GEMM threads per rank");
  // f32 products, or no bf16 peak (no AVX512_BF16): the f32 peak.
  EXPECT_EQ(ComputeMfu(model, 2000, peak, 2, 2, false).peak_kind, "f32");
  peak.bf16_flops_per_core = 0;
  EXPECT_DOUBLE_EQ(ComputeMfu(model, 2000, peak, 2, 2, true).mfu, r.mfu);
  // Without a measured peak the MFU is 0, never a division by zero.
  EXPECT_EQ(ComputeMfu(model, 2000, FmaPeak{}, 2, 1).mfu, 0.0);
}

// Where the backend's best product per GEMM thread beats the instruction loop (a
// unit the loop does not measure, as AMX tiles under oneDNN), it is the peak; the
// GEMM share is its FLOPs (6 x the product parameters per token) over the GEMM time
// on the ranks' GEMM threads at that peak.
TEST(ComputeMfuTest, TheBackendsBestProductRaisesThePeakAndTheGemmShareUsesIt) {
  const GptConfig model = IssueModel();
  EXPECT_EQ(model.ProductParameterCount(), 4 * 12 * 256 * 256 + 256 * 256);
  FmaPeak peak;
  peak.cpu_model = "Test CPU";
  peak.vector_target = "AVX3";
  peak.flops_per_core = 100e9;
  peak.bf16_flops_per_core = 250e9;
  GemmFigures gemm;
  gemm.backend = "oneDNN (test)";
  gemm.backend_flops_per_rank = 2 * 1000e9;  // 1 TFLOP/s per thread, 2 threads
  gemm.seconds_per_step = 0.5;               // summed over the ranks
  gemm.tokens_per_step = 4096;
  const MfuReport r = ComputeMfu(model, 2000, peak, /*cores=*/2, /*threads_per_rank=*/2,
                                 /*bf16_products=*/true, gemm);
  EXPECT_EQ(r.peak_kind, "bf16");
  EXPECT_EQ(r.peak_source, "backend");
  EXPECT_DOUBLE_EQ(r.peak_flops_per_core, 1000e9);
  EXPECT_DOUBLE_EQ(r.mfu, 20923392.0 * 2000 / 2000e9);
  EXPECT_DOUBLE_EQ(r.gemm_flops_per_token, 6.0 * 3211264);
  EXPECT_DOUBLE_EQ(r.gemm_mfu, 6.0 * 3211264 * 4096 / (0.5 * 2) / 1000e9);
  EXPECT_EQ(r.gemm_backend, "oneDNN (test)");
  EXPECT_EQ(MfuLine(r),
            "compute: 20.92 MFLOP per token (6N + 12LTh, N = 3225088 besides the embedding tables), "
            "41.8 GFLOP/s; MFU 0.021 of 2000.0 GFLOP/s bf16 peak measured (2 cores x 1000.0, AVX3, "
            "Test CPU; the backend's best product, above the instruction loop's; 0.209 of the f32 "
            "FMA peak); "
            "2 GEMM threads per rank\n"
            "GEMM share: 19.27 MFLOP per token (6 x 3211264 product parameters), MFU 0.079 of "
            "the same peak over the GEMMs' own time");
  // Below the instruction peak the backend changes nothing.
  gemm.backend_flops_per_rank = 2 * 50e9;
  const MfuReport f = ComputeMfu(model, 2000, peak, 2, 2, /*bf16_products=*/false, gemm);
  EXPECT_EQ(f.peak_source, "instructions");
  EXPECT_DOUBLE_EQ(f.peak_flops_per_core, 100e9);
  // Without the GEMM time there is no GEMM share.
  gemm.seconds_per_step = 0;
  EXPECT_EQ(ComputeMfu(model, 2000, peak, 2, 2, false, gemm).gemm_mfu, 0.0);
}

// The job's own products faster than both measurements (taken in a slow moment of a
// busy host): their rate is the peak, so neither ratio passes 1, and the line says so.
TEST(ComputeMfuTest, GemmsFasterThanTheMeasuredPeakBecomeThePeak) {
  const GptConfig model = IssueModel();
  FmaPeak peak;
  peak.cpu_model = "Test CPU";
  peak.vector_target = "AVX2";
  peak.flops_per_core = 100e9;
  GemmFigures gemm;
  gemm.backend = "OpenBLAS (test)";
  gemm.backend_flops_per_rank = 2 * 90e9;
  gemm.seconds_per_step = 0.25;  // 6 x 3211264 x 4096 FLOP on 2 threads: 157.8 GFLOP/s each
  gemm.tokens_per_step = 4096;
  const MfuReport r = ComputeMfu(model, 2000, peak, /*cores=*/2, /*threads_per_rank=*/2,
                                 /*bf16_products=*/false, gemm);
  const double per_core = 6.0 * 3211264 * 4096 / (0.25 * 2);
  EXPECT_EQ(r.peak_source, "gemms");
  EXPECT_DOUBLE_EQ(r.peak_flops_per_core, per_core);
  EXPECT_DOUBLE_EQ(r.gemm_mfu, 1.0);
  EXPECT_DOUBLE_EQ(r.mfu, 20923392.0 * 2000 / (2 * per_core));
  EXPECT_LE(r.mfu, 1.0);
  EXPECT_THAT(MfuLine(r), HasSubstr("this job's own products, above both measurements"));
  // Slower products leave the measured peak.
  gemm.seconds_per_step = 1.0;
  const MfuReport slow = ComputeMfu(model, 2000, peak, 2, 2, false, gemm);
  EXPECT_EQ(slow.peak_source, "instructions");
  EXPECT_DOUBLE_EQ(slow.peak_flops_per_core, 100e9);
  EXPECT_LT(slow.gemm_mfu, 1.0);
}

// The GPU job's MFU: the median step after the first (which warms up), over the
// H100's dense bf16 peak.
TEST(ComputeDeviceMfuTest, IsTheMedianSteadyStepOverTheH100Peak) {
  GptConfig model;
  TrainSummary summary;
  for (const double rate : {10.0, 300.0, 100.0, 200.0}) {
    StepReport step;
    step.tokens_per_second = rate;
    summary.steps.push_back(step);
  }
  const DeviceMfu mfu = ComputeDeviceMfu(model, summary);
  EXPECT_EQ(mfu.tokens_per_second, 200.0);  // median of 300, 100, 200
  EXPECT_EQ(mfu.flops_per_token, model.TrainingFlopsPerToken());
  EXPECT_DOUBLE_EQ(mfu.mfu, model.TrainingFlopsPerToken() * 200.0 / 989e12);
  EXPECT_THAT(DeviceMfuLine(model, summary), HasSubstr("median 200 tokens/s over the last 3 steps"));
  // One step: it is all there is.
  summary.steps.resize(1);
  EXPECT_EQ(ComputeDeviceMfu(model, summary).tokens_per_second, 10.0);
  summary.steps.clear();
  EXPECT_EQ(ComputeDeviceMfu(model, summary).mfu, 0.0);
}

}  // namespace
}  // namespace loom
