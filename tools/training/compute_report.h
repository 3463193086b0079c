// How much of the CPU the job uses: --threads_per_rank resolved against the host's
// cores, and the MFU (model FLOP utilization) line of the closing report: the
// model's training FLOPs per token (GptConfig::TrainingFlopsPerToken, 6 N + 12 L T h)
// times the tokens per second, over the measured peak of one core (core/fma_peak.h)
// times the cores the ranks use: the f32 FMA peak, or for a job whose products are
// bf16 on hardware bf16 dot products (--dtype=bf16 where the CPU has AVX512_BF16) the
// bf16 peak, with the MFU against the f32 peak beside it.
//
// Example (one rank on a 2-core host):
//   LOOM_ASSIGN_OR_RETURN(int threads, ResolveThreadsPerRank(/*requested=*/0,
//                                                            /*ranks_on_host=*/1, 2));  // 2
//   const int cores = CoresUsed(/*ranks_on_host=*/1, threads, /*usable_cpus=*/2, 1);  // 2
//   MfuReport mfu = ComputeMfu(model, /*tokens_per_second=*/4000, peak, cores, threads);
//   MfuLine(mfu);
//   // "compute: 20.92 MFLOP per token (6N + 12LTh, N = 3225088 besides the embedding
//   //  tables), 83.7 GFLOP/s; MFU 0.357 of 234.5 GFLOP/s measured (2 cores x 117.2, AVX3,
//   //  AMD EPYC); 2 GEMM threads per rank"
//   MfuLine(ComputeMfu(model, 6000, peak, cores, threads, /*bf16_products=*/true));
//   // "compute: 20.92 MFLOP per token (...), 125.5 GFLOP/s; MFU 0.268 of 469.0 GFLOP/s bf16
//   //  peak measured (2 cores x 234.5, AVX3, AMD EPYC; 0.535 of the f32 FMA peak); 2 GEMM
//   //  threads per rank"
//   ResolveThreadsPerRank(2, /*ranks_on_host=*/2, /*usable_cpus=*/2);
//   // InvalidArgument: "--threads_per_rank 2 with 2 ranks on this host needs 4 CPUs; it
//   //  has 2 (the default, 0, fits them)"
#ifndef LOOM_TOOLS_TRAINING_COMPUTE_REPORT_H_
#define LOOM_TOOLS_TRAINING_COMPUTE_REPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/fma_peak.h"
#include "models/gpt/gpt_config.h"
#include "tensor_parallel/layers/gemm.h"
#include "tools/training/train_options.h"

namespace loom {

// ResolveThreadsPerRank returns the threads each rank's matrix products get:
// `requested`, or with 0 this host's usable CPUs divided by its ranks (at least 1).
// One thread per rank is always allowed (more ranks than CPUs time-share, as before);
// more than one must fit: ranks_on_host x requested <= usable_cpus. InvalidArgument
// naming the values otherwise, or for requested outside [0, 1024] or a count below 1.
absl::StatusOr<int> ResolveThreadsPerRank(int requested, int ranks_on_host, int usable_cpus);

// CoresUsed returns the cores the job's ranks compute on: per host the smaller of
// its usable CPUs and its ranks times their threads, times the hosts.
int CoresUsed(int ranks_on_host, int threads_per_rank, int usable_cpus, int hosts);

// What the job measured of its products: where they ran, the backend's best square
// product on one rank's threads (tensor_parallel/layers/gemm_throughput.h), and the
// step's GEMM time, for the peak of the unit the products run on and the GEMM
// share's MFU.
struct GemmFigures {
  std::string backend;                // GemmBackendName of the job's precision
  double backend_flops_per_rank = 0;  // MeasureGemmThroughput; 0: not measured
  double seconds_per_step = 0;        // the step's GEMM time summed over ranks; 0: unknown
  double tokens_per_step = 0;         // the global batch's tokens
};

struct MfuReport {
  int64_t parameters = 0;           // N, the embedding tables left out
  double flops_per_token = 0;       // 6 N + 12 L T h
  double achieved_flops = 0;        // flops_per_token x tokens per second
  double peak_flops_per_core = 0;   // measured
  int cores = 0;
  double peak_flops = 0;            // peak_flops_per_core x cores
  double mfu = 0;                   // achieved_flops / peak_flops (0 without a peak)
  std::string peak_kind = "f32";    // "f32" (FMA) or "bf16" (dot products)
  double mfu_f32_peak = 0;          // achieved over the f32 peak (= mfu for "f32")
  // Where the peak per core came from: the instruction loop of peak_kind
  // (core/fma_peak.h), or, where it was higher, the backend's best product per
  // GEMM thread (a unit the loop does not measure, e.g. AMX tiles: "backend"), or,
  // where the job's own GEMMs ran faster than both (measured in a slow moment of a
  // busy or throttled host), their rate ("gemms"): MFU never passes 1 for it.
  std::string peak_source = "instructions";
  std::string gemm_backend;
  double gemm_flops_per_token = 0;  // 6 x GptConfig::ProductParameterCount
  // The GEMM share: its FLOPs over its time on the ranks' GEMM threads at the peak
  // (0 where the GEMM time is unknown).
  double gemm_mfu = 0;
  int threads_per_rank = 1;
  std::string cpu_model, vector_target;
};

// ComputeMfu fills an MfuReport from the run's figures. With bf16_products (the
// job's products are bf16) and a measured bf16 peak, that peak is the instruction
// peak; otherwise the f32 one. The peak per core is the larger of it and the
// backend's best product per GEMM thread (gemm.backend_flops_per_rank over
// threads_per_rank), so an MFU cannot pass 1 through a unit the instruction loop
// does not measure.
MfuReport ComputeMfu(const GptConfig& model, double tokens_per_second, const FmaPeak& peak,
                     int cores, int threads_per_rank, bool bf16_products = false,
                     const GemmFigures& gemm = {});

// MfuLine formats the report as the job prints it (see the example).
std::string MfuLine(const MfuReport& report);

// The denominators a job measures before it starts, on an idle CPU: the
// instruction peaks (core/fma_peak.h) and, where its products run on the CPU, the
// backend's best square product of its precision on the calling thread's
// GemmThreads() (tensor_parallel/layers/gemm_throughput.h).
struct MeasuredPeaks {
  FmaPeak instructions;
  GemmFigures gemm;  // backend and backend_flops_per_rank
};
// MeasurePeaks: the measurement's errors.
absl::StatusOr<MeasuredPeaks> MeasurePeaks(GemmPrecision precision, bool products_on_cpu);

// JobMfu: the MFU report of a finished job of `options` from its summary (tokens/s,
// the step's GEMM time) over `peaks`, its ranks computing on `cores` cores.
MfuReport JobMfu(const TrainJobOptions& options, const TrainSummary& summary,
                 const MeasuredPeaks& peaks, int cores, int threads_per_rank);

// A job that trained on the GPU (TrainSummary::device_description set): its steady
// throughput (the median step's tokens/s, the first step, which warms up, left out
// when there are more) and the MFU against the H100 SXM's dense bf16 peak, the
// datasheet's 989 TFLOP/s (the H200's is the same). The model FLOPs are
// GptConfig::TrainingFlopsPerToken, as for the CPU.
inline constexpr double kH100Bf16DenseFlops = 989e12;
struct DeviceMfu {
  double tokens_per_second = 0;
  double flops_per_token = 0;
  double achieved_flops = 0;
  double mfu = 0;  // achieved over kH100Bf16DenseFlops
};
DeviceMfu ComputeDeviceMfu(const GptConfig& model, const TrainSummary& summary);
// "GPU: 1.06 GFLOP per token (6N + 12LTh, N = ... besides the embedding tables), median 123,456 tokens/s over
// steps 2-20, 131.2 TFLOP/s; MFU 0.133 of 989 TFLOP/s (H100 SXM dense bf16 peak)"
std::string DeviceMfuLine(const GptConfig& model, const TrainSummary& summary);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_COMPUTE_REPORT_H_
