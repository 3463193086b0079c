// The MFU the job reports lies in (0, 1] for every dtype on the host the test runs
// on, for the whole step and for its GEMM share: the peak it divides by is the
// larger of the instruction loop's and the GEMM backend's best product, so a unit
// the loop does not measure (AMX tiles) cannot push it past 1. Nothing here names
// an ISA or a speed.
#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/gemm.h"
#include "tools/training/compute_report.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

TEST(MfuBoundsTest, TheWholeStepAndItsGemmShareAreInZeroOneForEveryDtype) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    TrainJobOptions options;
    options.dp = 1;
    options.tp = 1;
    options.pp = 1;
    options.zero = 1;  // bf16 needs zero 1-3; the same for f32 keeps the runs alike
    options.dtype = dtype;
    options.threads_per_rank = 1;
    options.model.vocab = 256;
    options.model.hidden = 128;
    options.model.heads = 4;
    options.model.layers = 2;
    options.model.seq_len = 64;
    options.steps = 4;
    SCOPED_TRACE(DTypeName(dtype));
    const GemmPrecision precision =
        dtype == DType::kBF16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
    LOOM_ASSERT_OK_AND_ASSIGN(const MeasuredPeaks peaks,
                              MeasurePeaks(precision, /*products_on_cpu=*/true));
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
    const MfuReport mfu = JobMfu(options, summary, peaks, /*cores=*/1, /*threads_per_rank=*/1);
    std::printf("%s: MFU %.3f, GEMM share %.3f, of %.1f GFLOP/s per core (%s peak from the %s); "
                "backend %s at %.1f GFLOP/s\n",
                std::string(DTypeName(dtype)).c_str(), mfu.mfu, mfu.gemm_mfu,
                mfu.peak_flops_per_core / 1e9, mfu.peak_kind.c_str(), mfu.peak_source.c_str(),
                mfu.gemm_backend.c_str(), peaks.gemm.backend_flops_per_rank / 1e9);
    EXPECT_GT(mfu.mfu, 0.0);
    EXPECT_LE(mfu.mfu, 1.0);
    EXPECT_GT(mfu.gemm_mfu, 0.0);
    EXPECT_LE(mfu.gemm_mfu, 1.0);
    EXPECT_GE(mfu.peak_flops_per_core, peaks.gemm.backend_flops_per_rank);
  }
}

}  // namespace
}  // namespace loom
