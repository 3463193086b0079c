#include "tools/training/compute_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
                     int cores, int threads_per_rank, bool bf16_products) {
  MfuReport r;
  r.parameters = model.ParameterCount();
  r.flops_per_token = model.TrainingFlopsPerToken();
  r.achieved_flops = r.flops_per_token * tokens_per_second;
  const bool bf16 = bf16_products && peak.bf16_flops_per_core > 0;
  r.peak_kind = bf16 ? "bf16" : "f32";
  r.peak_flops_per_core = bf16 ? peak.bf16_flops_per_core : peak.flops_per_core;
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
  return absl::StrFormat(
      "compute: %.2f MFLOP per token (6N + 12LTh, N = %d), %.1f GFLOP/s; MFU %.3f of %.1f "
      "GFLOP/s %smeasured (%d core%s x %.1f, %s, %s%s); %d GEMM thread%s per rank",
      r.flops_per_token / 1e6, r.parameters, r.achieved_flops / 1e9, r.mfu, r.peak_flops / 1e9,
      bf16 ? "bf16 peak " : "", r.cores, r.cores == 1 ? "" : "s", r.peak_flops_per_core / 1e9,
      r.vector_target, r.cpu_model,
      bf16 ? absl::StrFormat("; %.3f of the f32 FMA peak", r.mfu_f32_peak) : "",
      r.threads_per_rank, r.threads_per_rank == 1 ? "" : "s");
}

}  // namespace loom
