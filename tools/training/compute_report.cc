#include "tools/training/compute_report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/gemm_throughput.h"

namespace loom {

absl::StatusOr<int> ResolveThreadsPerRank(int requested, int ranks_on_host, int usable_cpus) {
  if (requested < 0 || requested > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads_per_rank ", requested, " is not in [0, 1024] (0: automatic)"));
  }
  if (ranks_on_host < 1 || usable_cpus < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ResolveThreadsPerRank: ", ranks_on_host,
                                                   " ranks on ", usable_cpus,
                                                   " CPUs; need at least 1 of each"));
  }
  if (requested == 0) return std::max(1, usable_cpus / ranks_on_host);
  if (requested > 1 && static_cast<int64_t>(requested) * ranks_on_host > usable_cpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads_per_rank ", requested, " with ", ranks_on_host, " rank",
        ranks_on_host == 1 ? "" : "s", " on this host needs ",
        static_cast<int64_t>(requested) * ranks_on_host, " CPUs; it has ", usable_cpus,
        " (the default, 0, fits them)"));
  }
  return requested;
}

int CoresUsed(int ranks_on_host, int threads_per_rank, int usable_cpus, int hosts) {
  const int64_t wanted = static_cast<int64_t>(ranks_on_host) * std::max(1, threads_per_rank);
  return static_cast<int>(std::min<int64_t>(usable_cpus, wanted)) * std::max(1, hosts);
}

MfuReport ComputeMfu(const GptConfig& model, double tokens_per_second, const FmaPeak& peak,
                     int cores, int threads_per_rank, bool bf16_products,
                     const GemmFigures& gemm) {
  MfuReport r;
  r.parameters = model.ParameterCount() - model.EmbeddingTableParameterCount();
  r.flops_per_token = model.TrainingFlopsPerToken();
  r.achieved_flops = r.flops_per_token * tokens_per_second;
  const bool bf16 = bf16_products && peak.bf16_flops_per_core > 0;
  r.peak_kind = bf16 ? "bf16" : "f32";
  r.peak_flops_per_core = bf16 ? peak.bf16_flops_per_core : peak.flops_per_core;
  const double backend_per_core =
      gemm.backend_flops_per_rank / static_cast<double>(std::max(1, threads_per_rank));
  if (backend_per_core > r.peak_flops_per_core) {
    r.peak_flops_per_core = backend_per_core;
    r.peak_source = "backend";
  }
  r.gemm_backend = gemm.backend;
  r.gemm_flops_per_token = 6.0 * static_cast<double>(model.ProductParameterCount());
  const double gemm_core_seconds =
      gemm.seconds_per_step * static_cast<double>(std::max(1, threads_per_rank));
  if (gemm_core_seconds > 0 && r.peak_flops_per_core > 0) {
    // The job's own products faster than both measurements: those were taken in a
    // slow moment (a busy or throttled host; 250 ms before the ranks start), and a
    // ratio above 1 would say nothing true. The products' own rate is the peak.
    const double gemm_per_core =
        r.gemm_flops_per_token * gemm.tokens_per_step / gemm_core_seconds;
    if (gemm_per_core > r.peak_flops_per_core) {
      r.peak_flops_per_core = gemm_per_core;
      r.peak_source = "gemms";
    }
    r.gemm_mfu = gemm_per_core / r.peak_flops_per_core;
  }
  r.cores = cores;
  r.peak_flops = r.peak_flops_per_core * cores;
  r.mfu = r.peak_flops > 0 ? r.achieved_flops / r.peak_flops : 0.0;
  const double f32_peak = peak.flops_per_core * cores;
  r.mfu_f32_peak = f32_peak > 0 ? r.achieved_flops / f32_peak : 0.0;
  r.threads_per_rank = threads_per_rank;
  r.cpu_model = peak.cpu_model;
  r.vector_target = peak.vector_target;
  return r;
}

std::string MfuLine(const MfuReport& r) {
  const bool bf16 = r.peak_kind == "bf16";
  std::string line = absl::StrFormat(
      "compute: %.2f MFLOP per token (6N + 12LTh, N = %d besides the embedding tables), "
      "%.1f GFLOP/s; MFU %.3f of %.1f "
      "GFLOP/s %smeasured (%d core%s x %.1f, %s, %s%s%s); %d GEMM thread%s per rank",
      r.flops_per_token / 1e6, r.parameters, r.achieved_flops / 1e9, r.mfu, r.peak_flops / 1e9,
      bf16 ? "bf16 peak " : "", r.cores, r.cores == 1 ? "" : "s", r.peak_flops_per_core / 1e9,
      r.vector_target, r.cpu_model,
      r.peak_source == "backend"  ? "; the backend's best product, above the instruction loop's"
      : r.peak_source == "gemms" ? "; this job's own products, above both measurements"
                                 : "",
      bf16 ? absl::StrFormat("; %.3f of the f32 FMA peak", r.mfu_f32_peak) : "",
      r.threads_per_rank, r.threads_per_rank == 1 ? "" : "s");
  if (r.gemm_mfu > 0) {
    absl::StrAppendFormat(&line,
                          "\nGEMM share: %.2f MFLOP per token (6 x %d product parameters), MFU "
                          "%.3f of the same peak over the GEMMs' own time",
                          r.gemm_flops_per_token / 1e6,
                          static_cast<int64_t>(r.gemm_flops_per_token / 6), r.gemm_mfu);
  }
  return line;
}

absl::StatusOr<MeasuredPeaks> MeasurePeaks(GemmPrecision precision, bool products_on_cpu) {
  MeasuredPeaks peaks;
  LOOM_ASSIGN_OR_RETURN(peaks.instructions, MeasureFmaPeak(absl::Milliseconds(250)));
  if (products_on_cpu) {
    LOOM_ASSIGN_OR_RETURN(peaks.gemm.backend_flops_per_rank,
                          MeasureGemmThroughput(precision, absl::Milliseconds(40)));
    peaks.gemm.backend = GemmBackendName(precision);
  }
  return peaks;
}

MfuReport JobMfu(const TrainJobOptions& options, const TrainSummary& summary,
                 const MeasuredPeaks& peaks, int cores, int threads_per_rank) {
  GemmFigures gemm = peaks.gemm;
  // The breakdown is a mean over ranks: its sum is the job's GEMM time.
  gemm.seconds_per_step =
      summary.step_breakdown_s.gemm * static_cast<double>(JobWorldSize(options));
  gemm.tokens_per_step = static_cast<double>(options.dp * options.microbatches *
                                             options.micro_batch * options.model.seq_len);
  return ComputeMfu(options.model, summary.tokens_per_second, peaks.instructions, cores,
                    threads_per_rank, /*bf16_products=*/options.dtype == DType::kBF16, gemm);
}

DeviceMfu ComputeDeviceMfu(const GptConfig& model, const TrainSummary& summary) {
  DeviceMfu out;
  std::vector<double> rates;
  const size_t first = summary.steps.size() > 1 ? 1 : 0;
  for (size_t i = first; i < summary.steps.size(); ++i) {
    rates.push_back(summary.steps[i].tokens_per_second);
  }
  if (rates.empty()) return out;
  std::sort(rates.begin(), rates.end());
  const size_t n = rates.size();
  out.tokens_per_second = n % 2 == 1 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  out.flops_per_token = model.TrainingFlopsPerToken();
  out.achieved_flops = out.flops_per_token * out.tokens_per_second;
  out.mfu = out.achieved_flops / kH100Bf16DenseFlops;
  return out;
}

std::string DeviceMfuLine(const GptConfig& model, const TrainSummary& summary) {
  const DeviceMfu m = ComputeDeviceMfu(model, summary);
  const size_t steps = summary.steps.size();
  return absl::StrFormat(
      "GPU: %.4g GFLOP per token (6N + 12LTh, N = %d besides the embedding tables), median "
      "%.0f tokens/s over the last %d "
      "steps, %.1f TFLOP/s; MFU %.3f of 989 TFLOP/s (H100 SXM dense bf16 peak)",
      m.flops_per_token / 1e9,
      model.ParameterCount() - model.EmbeddingTableParameterCount(), m.tokens_per_second,
      steps > 1 ? steps - 1 : steps, m.achieved_flops / 1e12, m.mfu);
}

}  // namespace loom
