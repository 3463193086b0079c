#include "tools/planner/this_cpu.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/calibration.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/cpu_features.h"
#include "nlohmann/json.hpp"
#include "core/fma_peak.h"
#include "core/status_macros.h"
#include "topology/memory_estimate.h"

namespace loom {
namespace planner {
namespace {

// Copies `bytes` per thread on every core at once, best of five rounds; a copy
// reads and writes each byte (2 bytes of traffic per byte).
double MeasureCopyBandwidth(int threads, size_t bytes) {
  std::vector<std::unique_ptr<char[]>> from, to;
  for (int t = 0; t < threads; ++t) {
    from.push_back(std::make_unique<char[]>(bytes));
    to.push_back(std::make_unique<char[]>(bytes));
    std::memset(from.back().get(), t + 1, bytes);
    std::memset(to.back().get(), 0, bytes);
  }
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { std::memcpy(to[t].get(), from[t].get(), bytes); });
    }
    for (std::thread& w : workers) w.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(bytes) * threads / seconds);
  }
  return best;
}

// Alpha and beta of two thread ranks over the inproc transport.
absl::StatusOr<CostModel::Constants> MeasureInprocLink() {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(2));
  absl::StatusOr<CostModel> models[2] = {absl::UnknownError("not run"),
                                         absl::UnknownError("not run")};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(*group->Endpoint(r));
      if (!comm.ok()) {
        models[r] = comm.status();
        return;
      }
      CalibrationOptions options;
      options.latency_round_trips = 100;
      options.bandwidth_round_trips = 5;
      models[r] = Calibrate(**comm, options);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (const auto& m : models) {
    if (!m.ok()) return m.status();
  }
  return models[0]->constants();
}

// Number: `object[key]` as a number; InvalidArgument naming the key otherwise.
absl::StatusOr<double> Number(const nlohmann::json& object, absl::string_view key) {
  const auto it = object.find(std::string(key));
  if (it == object.end()) {
    return absl::InvalidArgumentError(absl::StrCat("job summary: no \"", key, "\""));
  }
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job summary: \"", key, "\" is not a number: ", it->dump()));
  }
  return it->get<double>();
}

// Text: `object[key]` as a string; InvalidArgument naming the key otherwise.
absl::StatusOr<std::string> Text(const nlohmann::json& object, absl::string_view key) {
  const auto it = object.find(std::string(key));
  if (it == object.end() || !it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("job summary: no text \"", key, "\""));
  }
  return it->get<std::string>();
}

}  // namespace

DeviceSpec CpuDeviceDefaults() {
  DeviceSpec d;
  d.name = "this-cpu";
  d.gemm_max_efficiency = 0.8;
  d.gemm_half_width = 32;
  d.elementwise_passes = 4;
  d.attention_efficiency = 0.5;
  d.fused_attention = true;
  // Loom's train (--overlap_grad_reduce) all-reduces each unit beside the last backward.
  d.dp_overlap = 0;
  d.dp_overlaps_last_backward = true;
  return d;
}

absl::StatusOr<ThisCpu> MeasureThisCpu(int64_t ranks, int threads_per_rank) {
  if (ranks < 1 || threads_per_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("the job has ", ranks, " ranks of ",
                                                   threads_per_rank,
                                                   " threads; it needs at least 1 rank"));
  }
  ThisCpu cpu;
  // The CPUs this process may run on, as the job counts them.
  cpu.cores = std::max(1, UsableCpus());
  cpu.threads_per_rank = threads_per_rank > 0
                             ? threads_per_rank
                             : static_cast<int>(std::max<int64_t>(1, cpu.cores / ranks));
  LOOM_ASSIGN_OR_RETURN(const FmaPeak peak, MeasureFmaPeak(absl::Milliseconds(30)));
  cpu.cpu_model = peak.cpu_model;
  // 64 MiB per core, far past the caches, and 1 GiB at most in all.
  cpu.host_memory_bandwidth = MeasureCopyBandwidth(
      cpu.cores, std::min(size_t{64} << 20, (size_t{512} << 20) / static_cast<size_t>(cpu.cores)));
  LOOM_ASSIGN_OR_RETURN(const CostModel::Constants link, MeasureInprocLink());
  // Ranks beyond the cores time-share them.
  const double share =
      std::min(1.0, static_cast<double>(cpu.cores) / static_cast<double>(ranks * cpu.threads_per_rank));
  DeviceSpec& d = cpu.device;
  d = CpuDeviceDefaults();
  d.peak_f32_flops = peak.flops_per_core * cpu.threads_per_rank * share;
  // Without AVX512_BF16, bf16 products run at the f32 rate at best.
  d.peak_bf16_flops = (peak.bf16_flops_per_core > 0 ? peak.bf16_flops_per_core : peak.flops_per_core) *
                      cpu.threads_per_rank * share;
  d.memory_bandwidth = cpu.host_memory_bandwidth /
                       static_cast<double>(std::min<int64_t>(ranks * cpu.threads_per_rank, cpu.cores)) *
                       cpu.threads_per_rank;
  const double host_memory =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  d.memory_bytes = host_memory / static_cast<double>(ranks);
  d.intra_node_latency = link.alpha;
  d.intra_node_bandwidth = 1.0 / link.beta;
  d.inter_node_latency = link.alpha;
  d.inter_node_bandwidth = 1.0 / link.beta;
  return cpu;
}

absl::StatusOr<JobRun> ParseJobSummary(absl::string_view text) {
  const nlohmann::json json =
      nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("job summary: not a JSON object (train --summary_json)");
  }
  const auto breakdown_at = json.find("step_breakdown_s");
  if (breakdown_at == json.end() || !breakdown_at->is_object()) {
    return absl::InvalidArgumentError("job summary: no \"step_breakdown_s\" object");
  }
  const nlohmann::json& breakdown = *breakdown_at;
  JobRun run;
  auto integer = [&](absl::string_view key, int64_t& out) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(const double v, Number(json, key));
    out = static_cast<int64_t>(v);
    return absl::OkStatus();
  };
  LOOM_RETURN_IF_ERROR(integer("layers", run.shape.layers));
  LOOM_RETURN_IF_ERROR(integer("hidden", run.shape.hidden));
  LOOM_RETURN_IF_ERROR(integer("heads", run.shape.heads));
  LOOM_RETURN_IF_ERROR(integer("seq_len", run.shape.seq_len));
  LOOM_RETURN_IF_ERROR(integer("vocab", run.shape.vocab));
  LOOM_RETURN_IF_ERROR(integer("ffn", run.shape.ffn));
  run.shape.tied_embeddings = false;  // the job's GptModel: its head is its own matrix
  LOOM_RETURN_IF_ERROR(integer("dp", run.config.dp));
  LOOM_RETURN_IF_ERROR(integer("tp", run.config.tp));
  LOOM_RETURN_IF_ERROR(integer("pp", run.config.pp));
  LOOM_RETURN_IF_ERROR(integer("cp", run.config.cp));
  int64_t zero = 0, threads = 0;
  LOOM_RETURN_IF_ERROR(integer("zero", zero));
  run.config.zero = static_cast<int>(zero);
  LOOM_RETURN_IF_ERROR(integer("micro_batch", run.config.microbatch_size));
  LOOM_RETURN_IF_ERROR(integer("global_batch", run.global_batch));
  LOOM_RETURN_IF_ERROR(integer("threads_per_rank", threads));
  run.threads_per_rank = static_cast<int>(threads);
  if (const auto overlap = json.find("overlap_grad_reduce"); overlap != json.end()) {
    if (!overlap->is_boolean()) {
      return absl::InvalidArgumentError("job summary: \"overlap_grad_reduce\" is not true or false");
    }
    run.overlap_grad_reduce = overlap->get<bool>();
  }
  LOOM_ASSIGN_OR_RETURN(const std::string schedule, Text(json, "schedule"));
  LOOM_ASSIGN_OR_RETURN(run.config.schedule, ParsePipelineSchedule(schedule));
  if (run.config.schedule == PipelineScheduleKind::kInterleaved1F1B ||
      run.config.schedule == PipelineScheduleKind::kZeroBubbleV) {
    run.config.virtual_stages = 2;
  }
  LOOM_ASSIGN_OR_RETURN(const std::string recompute, Text(json, "recompute"));
  run.config.recompute = recompute == "full" ? Recompute::kFull : Recompute::kNone;
  LOOM_ASSIGN_OR_RETURN(const std::string dtype, Text(json, "dtype"));
  run.config.dtype = dtype == "bf16" ? ComputeDtype::kBf16 : ComputeDtype::kF32;
  LOOM_ASSIGN_OR_RETURN(const double tokens_per_second, Number(json, "tokens_per_second"));
  if (!(tokens_per_second > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job summary: tokens_per_second is ", tokens_per_second));
  }
  run.step_seconds =
      static_cast<double>(run.global_batch * run.shape.seq_len) / tokens_per_second;
  LOOM_ASSIGN_OR_RETURN(run.compute_seconds, Number(breakdown, "compute"));
  LOOM_ASSIGN_OR_RETURN(run.gemm_seconds, Number(breakdown, "gemm"));
  LOOM_ASSIGN_OR_RETURN(run.attention_seconds, Number(breakdown, "attention"));
  LOOM_ASSIGN_OR_RETURN(run.optimizer_seconds, Number(breakdown, "optimizer"));
  LOOM_ASSIGN_OR_RETURN(run.dp_comm_seconds, Number(breakdown, "dp_comm"));
  LOOM_ASSIGN_OR_RETURN(run.pp_comm_seconds, Number(breakdown, "pp_comm"));
  return run;
}

namespace {

// RunTerms: what the fit reads of one calibration run, per rank.
struct RunTerms {
  double rows = 0;              // a microbatch's tokens: the products' rows
  double microbatches = 0;      // per rank, per step
  double gemm_efficiency = 0;   // the products' FLOPs over their seconds at peak
  double attention_flops = 0;
  double rest = 0;              // compute beyond the products and the attention, s
  double activation_bytes = 0;  // what the element-wise model moves per pass
  double gradient_bytes = 0;    // the layers' f32 weight gradients, once per microbatch
};

absl::StatusOr<RunTerms> TermsOf(const DeviceSpec& device, const JobRun& run) {
  const PlanConfig& c = run.config;
  if (c.dp < 1 || c.tp != 1 || c.pp != 1 || c.cp != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the calibration run must be data parallel only (tp = pp = cp = 1); it ran dp=", c.dp,
        " tp=", c.tp, " pp=", c.pp, " cp=", c.cp));
  }
  // A data-parallel run's ranks each compute global_batch / dp sequences (rank 0's
  // breakdown is what the summary holds), at the speed the host gives that many
  // ranks at once.
  if (c.microbatch_size < 1 || run.global_batch % (c.dp * c.microbatch_size) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the calibration run's global batch ", run.global_batch, " is not a multiple of dp ", c.dp,
        " x micro_batch ", c.microbatch_size));
  }
  const int64_t rank_batch = run.global_batch / c.dp;
  RunTerms t;
  t.rest = run.compute_seconds - run.gemm_seconds - run.attention_seconds;
  if (!(run.gemm_seconds > 0) || !(run.attention_seconds > 0) || !(t.rest > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the calibration run's compute does not split: gemm ", run.gemm_seconds, " s, attention ",
        run.attention_seconds, " s, the rest ", t.rest, " s"));
  }
  const TransformerShape& s = run.shape;
  const double h = static_cast<double>(s.hidden);
  const double seq = static_cast<double>(s.seq_len);
  const double layers = static_cast<double>(s.layers);
  const double tokens = static_cast<double>(rank_batch) * seq;
  const bool full = c.recompute == Recompute::kFull;
  const double passes = full ? 4 : 3;
  const double peak = c.dtype == ComputeDtype::kBf16 ? device.peak_bf16_flops : device.peak_f32_flops;
  const double gemm_flops =
      tokens * (layers * 2 * LayerMatrixParameters(s) * passes + 3 * 2 * h * static_cast<double>(s.vocab));
  t.gemm_efficiency = gemm_flops / (run.gemm_seconds * peak);
  t.attention_flops = tokens * layers * 4 * seq * h * passes;
  t.rows = static_cast<double>(c.microbatch_size) * seq;
  t.microbatches = static_cast<double>(rank_batch / c.microbatch_size);

  FusedAttentionActivationOptions o;
  o.hidden_size = s.hidden;
  o.num_heads = s.heads;
  o.vocab = s.vocab;
  o.seq_len = s.seq_len;
  o.micro_batch_size = c.microbatch_size;
  o.layers = 1;
  o.bf16_linear_inputs = c.dtype == ComputeDtype::kBf16;
  LOOM_ASSIGN_OR_RETURN(const int64_t layer_bytes, EstimateFusedAttentionActivationBytes(o));
  t.activation_bytes = t.microbatches * layers * static_cast<double>(layer_bytes) * (full ? 4.0 / 3 : 1);
  t.gradient_bytes = t.microbatches * layers * 4 * LayerMatrixParameters(s);
  return t;
}

// FitLine returns (intercept, slope) of the least-squares line through (x, y); false
// when the x do not differ.
bool FitLine(const std::vector<double>& x, const std::vector<double>& y, double& a, double& b) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  if (!(std::abs(det) > 1e-12 * std::max(1.0, n * sxx))) return false;
  b = (n * sxy - sx * sy) / det;
  a = (sy - b * sx) / n;
  return true;
}

}  // namespace

absl::StatusOr<DeviceSpec> FitToJobRun(const DeviceSpec& device, const JobRun& run) {
  return FitToJobRuns(device, {run});
}

absl::StatusOr<DeviceSpec> FitToJobRuns(const DeviceSpec& device, const std::vector<JobRun>& runs) {
  if (runs.empty()) return absl::InvalidArgumentError("no calibration run to fit");
  std::vector<RunTerms> terms;
  for (const JobRun& run : runs) {
    if (run.config.dp != runs[0].config.dp || run.threads_per_rank != runs[0].threads_per_rank ||
        run.shape.hidden != runs[0].shape.hidden || run.shape.seq_len != runs[0].shape.seq_len ||
        run.config.dtype != runs[0].config.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration runs fitted together must share dp, threads per rank, hidden, sequence "
          "and dtype: dp ", runs[0].config.dp, " and ", run.config.dp, ", threads ",
          runs[0].threads_per_rank, " and ", run.threads_per_rank, ", hidden ",
          runs[0].shape.hidden, " and ", run.shape.hidden, ", sequence ", runs[0].shape.seq_len,
          " and ", run.shape.seq_len));
    }
    LOOM_ASSIGN_OR_RETURN(RunTerms t, TermsOf(device, run));
    terms.push_back(t);
  }
  const double h = static_cast<double>(runs[0].shape.hidden);
  const double width = h / (h + device.gemm_half_width);
  const double bandwidth = device.memory_bandwidth;
  DeviceSpec fitted = device;

  // The products: 1 / efficiency = 1 / E + (R / E) / rows over the runs' microbatch
  // sizes (E the wide-row efficiency, R the half rows), when they differ and the
  // line says efficiency grows with rows; else one efficiency, R kept.
  std::vector<double> inverse_rows, inverse_efficiency;
  for (const RunTerms& t : terms) {
    inverse_rows.push_back(1 / t.rows);
    inverse_efficiency.push_back(1 / t.gemm_efficiency);
  }
  double a = 0, b = 0;
  if (FitLine(inverse_rows, inverse_efficiency, a, b) && a > 0 && b >= 0) {
    fitted.gemm_half_rows = b / a;
    fitted.gemm_max_efficiency = 1 / a / width;
  } else {
    const RunTerms& t = terms[0];
    const double rows = fitted.gemm_half_rows > 0 ? t.rows / (t.rows + fitted.gemm_half_rows) : 1;
    fitted.gemm_max_efficiency = t.gemm_efficiency / width / rows;
  }
  // The attention at the first run's product efficiency, as the step model prices it.
  const RunTerms& first = terms[0];
  const double first_rows =
      fitted.gemm_half_rows > 0 ? first.rows / (first.rows + fitted.gemm_half_rows) : 1;
  const double first_efficiency = fitted.gemm_max_efficiency * width * first_rows;
  const double peak = runs[0].config.dtype == ComputeDtype::kBf16 ? device.peak_bf16_flops
                                                                  : device.peak_f32_flops;
  fitted.attention_efficiency =
      first.attention_flops / (runs[0].attention_seconds * peak * first_efficiency);

  // The rest of compute: element-wise passes over the activations, and (where the
  // runs' microbatch counts differ) passes over the weight gradients per microbatch:
  //   rest = P * activation_bytes / bw + G * gradient_bytes / bw.
  // The activations' bytes scale with the tokens, alike in runs of the same batch;
  // the gradients' with the microbatches: the line of rest / activations against
  // gradients / activations separates them.
  std::vector<double> ratio, rest_per_byte;
  for (const RunTerms& t : terms) {
    ratio.push_back(t.gradient_bytes / t.activation_bytes);
    rest_per_byte.push_back(t.rest * bandwidth / t.activation_bytes);
  }
  double p = 0, g = 0;
  if (FitLine(ratio, rest_per_byte, p, g) && p > 0 && g >= 0) {
    fitted.elementwise_passes = p;
    fitted.grad_accumulate_passes = g;
  } else {
    fitted.elementwise_passes = std::max(
        0.0, (first.rest * bandwidth - fitted.grad_accumulate_passes * first.gradient_bytes) /
                 first.activation_bytes);
  }
  // What the first run's step took beyond compute, the optimizer and (data parallel)
  // the gradient communication the backward did not hide, which the step model
  // prices on its own.
  const JobRun& run = runs[0];
  fitted.step_overhead_seconds = std::max(
      0.0, run.step_seconds - run.compute_seconds - run.optimizer_seconds - run.dp_comm_seconds);
  return fitted;
}

absl::StatusOr<FittedCpu> MeasureAndFit(int64_t ranks, int threads_per_rank,
                                        const std::vector<JobRun>& calibrations) {
  FittedCpu out;
  LOOM_ASSIGN_OR_RETURN(out.cpu, MeasureThisCpu(ranks, threads_per_rank));
  // The first run with the rank's threads, and every later one like it (the same dp,
  // width, sequence and dtype): several microbatch sizes fit the row and
  // per-microbatch terms too.
  std::vector<JobRun> alike;
  for (const JobRun& run : calibrations) {
    if (run.threads_per_rank != out.cpu.threads_per_rank) continue;
    if (!alike.empty() &&
        (run.config.dp != alike[0].config.dp || run.shape.hidden != alike[0].shape.hidden ||
         run.shape.seq_len != alike[0].shape.seq_len || run.config.dtype != alike[0].config.dtype)) {
      continue;
    }
    alike.push_back(run);
  }
  if (alike.empty()) return out;
  LOOM_ASSIGN_OR_RETURN(out.cpu.device, FitToJobRuns(out.cpu.device, alike));
  out.fitted = true;
  out.runs_fitted = static_cast<int>(alike.size());
  return out;
}

}  // namespace planner
}  // namespace loom
