// plan: which dp x tp x pp x cp, ZeRO stage, pipeline schedule, microbatch size and
// recompute to train a GPT-style model with, on a cluster of GPUs or on this CPU.
// Prints a ranked table (tools/planner/report.h); --explain the breakdown of the
// best two; --json the ranked list. See tools/docs/plan.md.
//
//   plan --layers=48 --hidden=8192 --heads=64 --seq_len=2048 --vocab=51200
//        --global_batch=1536 --gpus=512 --device=a100-80gb
//   plan --device=this-cpu --ranks=2 --layers=4 --hidden=256 --heads=8 --seq_len=128
//        --vocab=256 --global_batch=16 --calibration=run.json
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <cmath>
#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/planner/device.h"
#include "tools/planner/report.h"
#include "tools/planner/search.h"
#include "tools/planner/this_cpu.h"

ABSL_FLAG(int64_t, layers, 0, "Transformer layers.");
ABSL_FLAG(int64_t, hidden, 0, "Hidden size.");
ABSL_FLAG(int64_t, heads, 0, "Attention heads (divide --hidden).");
ABSL_FLAG(int64_t, seq_len, 2048, "Tokens per sequence.");
ABSL_FLAG(int64_t, vocab, 51200, "Vocabulary size.");
ABSL_FLAG(int64_t, ffn, 0, "MLP width; 0: 4 x hidden.");
ABSL_FLAG(int64_t, kv_heads, 0, "Key-value heads (grouped-query attention); 0: --heads.");
ABSL_FLAG(std::string, mlp, "gelu", "gelu (two h x ffn matrices) or swiglu (three).");
ABSL_FLAG(bool, tie_embeddings, true, "The head reuses the token embedding.");
ABSL_FLAG(int64_t, global_batch, 0, "Sequences per optimizer step.");
ABSL_FLAG(int64_t, gpus, 0, "Devices in the cluster (GPUs).");
ABSL_FLAG(int64_t, ranks, 0, "The same as --gpus, for --device=this-cpu: ranks of the job.");
ABSL_FLAG(int64_t, gpus_per_node, 8, "GPUs per node (NVLink inside, the network between).");
ABSL_FLAG(int64_t, ranks_per_host, 0,
          "With --device=this-cpu: the job's ranks on each host, every host like this one "
          "(0: all on this host). Fewer than the job's ranks put groups across hosts, on the "
          "link --inter_node_gbs (needed then) and --inter_node_latency_us give.");
ABSL_FLAG(std::string, device, "a100-80gb", "a100-80gb, h100-80gb, h200 or this-cpu (measured).");
ABSL_FLAG(double, peak_tflops, 0, "Override: dense bf16 peak, TFLOP/s per device.");
ABSL_FLAG(double, peak_f32_tflops, 0, "Override: f32 peak, TFLOP/s per device.");
ABSL_FLAG(double, memory_gb, 0, "Override: device memory, GB.");
ABSL_FLAG(double, memory_bandwidth_gbs, 0, "Override: device memory bandwidth, GB/s.");
ABSL_FLAG(double, intra_node_gbs, 0, "Override: link inside a node, GB/s per device each way.");
ABSL_FLAG(double, intra_node_latency_us, -1, "Override: latency inside a node, us.");
ABSL_FLAG(double, inter_node_gbs, 0, "Override: network between nodes, GB/s per device.");
ABSL_FLAG(double, inter_node_latency_us, -1, "Override: latency between nodes, us.");
ABSL_FLAG(double, gemm_max_efficiency, 0, "Override: the GEMM model's efficiency at wide shards.");
ABSL_FLAG(double, dp_overlap, -1, "Override: share of data-parallel traffic hidden, 0..1.");
ABSL_FLAG(std::string, flash_attention, "",
          "Override: true or false, whether the attention scores are never stored "
          "(the device's default: false on a100-80gb, as in 2021; true on h100-80gb, h200).");
ABSL_FLAG(std::string, sequence_parallel, "",
          "Override: true or false, whether activations split over tp (the device's "
          "default: false on a100-80gb, true on h100-80gb, h200).");
ABSL_FLAG(std::string, calibration, "",
          "With --device=this-cpu: `train --summary_json` files (comma-separated) of "
          "data-parallel runs of this model; the first with the threads each rank gets here "
          "fits the GEMM, attention and element-wise constants, and the later ones like it "
          "(same dp, width, sequence, dtype) at other microbatch sizes fit how the products "
          "slow at fewer rows and what each microbatch's gradient accumulation costs.");
ABSL_FLAG(std::vector<std::string>, compare, {},
          "With --device=this-cpu: `train --summary_json` files of runs to predict and compare "
          "with: each run's model, batch and configuration are taken from its file, its "
          "device is this CPU split over its ranks, fitted to the --calibration file with "
          "the same threads per rank. Prints predicted against measured step time.");
ABSL_FLAG(double, tolerance, 0,
          "With --compare: exit 1 when a prediction is off by more than this fraction, or "
          "the predicted best is more than tolerance / 4 slower than the measured best "
          "(0: report only).");
ABSL_FLAG(int64_t, dp, 0, "Fix dp (0: search).");
ABSL_FLAG(int64_t, tp, 0, "Fix tp (0: search).");
ABSL_FLAG(int64_t, pp, 0, "Fix pp (0: search).");
ABSL_FLAG(int64_t, cp, 0, "Fix cp (0: search).");
ABSL_FLAG(int, zero, -1, "Fix the ZeRO stage, 0..3 (-1: search).");
ABSL_FLAG(std::string, schedule, "",
          "Fix the schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1 or zb-v (empty: search).");
ABSL_FLAG(int64_t, virtual_stages, 0, "Fix interleaved-1f1b's stages per rank (0: search).");
ABSL_FLAG(int64_t, microbatch_size, 0, "Fix sequences per microbatch (0: search).");
ABSL_FLAG(std::string, recompute, "", "Fix recompute: none, selective or full (empty: search).");
ABSL_FLAG(std::string, dtype, "", "bf16 or f32 (empty: bf16 on GPUs, f32 on this-cpu).");
ABSL_FLAG(int64_t, top, 10, "Rows of the table.");
ABSL_FLAG(bool, explain, false, "Print the breakdown of the best and the runner-up.");
ABSL_FLAG(std::string, json, "", "Write the ranked list as JSON to FILE, best first.");

namespace loom {
namespace {

using planner::PlanRequest;

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status Positive(const char* flag, double value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " is ", value, "; it must be positive"));
}

// ApplyOverrides replaces the device's figures by the flags given.
absl::Status ApplyOverrides(planner::DeviceSpec& d) {
  struct Rate {
    const char* flag;
    double value;
    double scale;
    double* field;
  };
  const Rate rates[] = {
      {"peak_tflops", absl::GetFlag(FLAGS_peak_tflops), 1e12, &d.peak_bf16_flops},
      {"peak_f32_tflops", absl::GetFlag(FLAGS_peak_f32_tflops), 1e12, &d.peak_f32_flops},
      {"memory_gb", absl::GetFlag(FLAGS_memory_gb), 1e9, &d.memory_bytes},
      {"memory_bandwidth_gbs", absl::GetFlag(FLAGS_memory_bandwidth_gbs), 1e9, &d.memory_bandwidth},
      {"intra_node_gbs", absl::GetFlag(FLAGS_intra_node_gbs), 1e9, &d.intra_node_bandwidth},
      {"inter_node_gbs", absl::GetFlag(FLAGS_inter_node_gbs), 1e9, &d.inter_node_bandwidth},
      {"gemm_max_efficiency", absl::GetFlag(FLAGS_gemm_max_efficiency), 1, &d.gemm_max_efficiency},
  };
  for (const Rate& r : rates) {
    if (r.value == 0) continue;
    LOOM_RETURN_IF_ERROR(Positive(r.flag, r.value));
    *r.field = r.value * r.scale;
  }
  if (const double us = absl::GetFlag(FLAGS_intra_node_latency_us); us != -1) {
    if (us < 0) return absl::InvalidArgumentError(absl::StrCat("--intra_node_latency_us is ", us));
    d.intra_node_latency = us * 1e-6;
  }
  if (const double us = absl::GetFlag(FLAGS_inter_node_latency_us); us != -1) {
    if (us < 0) return absl::InvalidArgumentError(absl::StrCat("--inter_node_latency_us is ", us));
    d.inter_node_latency = us * 1e-6;
  }
  const std::pair<const char*, bool*> switches[] = {
      {"flash_attention", &d.flash_attention}, {"sequence_parallel", &d.sequence_parallel}};
  const std::string values[] = {absl::GetFlag(FLAGS_flash_attention),
                                absl::GetFlag(FLAGS_sequence_parallel)};
  for (int i = 0; i < 2; ++i) {
    if (values[i].empty()) continue;
    if (values[i] != "true" && values[i] != "false") {
      return absl::InvalidArgumentError(
          absl::StrCat("--", switches[i].first, " \"", values[i], "\" is not true or false"));
    }
    *switches[i].second = values[i] == "true";
  }
  if (const double o = absl::GetFlag(FLAGS_dp_overlap); o != -1) {
    if (o < 0 || o > 1) {
      return absl::InvalidArgumentError(absl::StrCat("--dp_overlap is ", o, "; it must be in [0, 1]"));
    }
    d.dp_overlap = o;
    d.dp_overlaps_last_backward = false;
  }
  return absl::OkStatus();
}

absl::Status ReadFixedChoices(PlanRequest& req) {
  planner::FixedChoices& f = req.fixed;
  const std::pair<const char*, std::optional<int64_t>*> degrees[] = {
      {"dp", &f.dp}, {"tp", &f.tp}, {"pp", &f.pp}, {"cp", &f.cp}};
  const int64_t values[] = {absl::GetFlag(FLAGS_dp), absl::GetFlag(FLAGS_tp),
                            absl::GetFlag(FLAGS_pp), absl::GetFlag(FLAGS_cp)};
  for (int i = 0; i < 4; ++i) {
    if (values[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", degrees[i].first, " is ", values[i], "; 0 searches, or at least 1"));
    }
    if (values[i] > 0) *degrees[i].second = values[i];
  }
  if (const int zero = absl::GetFlag(FLAGS_zero); zero != -1) {
    if (zero < 0 || zero > 3) {
      return absl::InvalidArgumentError(absl::StrCat("--zero is ", zero, "; it must be 0..3 (-1 searches)"));
    }
    f.zero = zero;
  }
  if (const std::string s = absl::GetFlag(FLAGS_schedule); !s.empty()) {
    LOOM_ASSIGN_OR_RETURN(f.schedule, ParsePipelineSchedule(s));
  }
  if (const int64_t v = absl::GetFlag(FLAGS_virtual_stages); v != 0) {
    if (v < 1) return absl::InvalidArgumentError(absl::StrCat("--virtual_stages is ", v));
    f.virtual_stages = v;
  }
  if (const int64_t b = absl::GetFlag(FLAGS_microbatch_size); b != 0) {
    if (b < 1) return absl::InvalidArgumentError(absl::StrCat("--microbatch_size is ", b));
    f.microbatch_size = b;
  }
  if (const std::string r = absl::GetFlag(FLAGS_recompute); !r.empty()) {
    if (r == "none") {
      f.recompute = Recompute::kNone;
    } else if (r == "selective") {
      f.recompute = Recompute::kSelective;
    } else if (r == "full") {
      f.recompute = Recompute::kFull;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--recompute \"", r, "\" is not none, selective or full"));
    }
  }
  return absl::OkStatus();
}

// RanksPerHost: --ranks_per_host for a this-cpu job of `ranks` ranks (all of them
// when the flag is 0 or above them). InvalidArgument when it does not divide the
// ranks, or the ranks span hosts and --inter_node_gbs does not say the link.
absl::StatusOr<int64_t> RanksPerHost(int64_t ranks) {
  const int64_t per_host = absl::GetFlag(FLAGS_ranks_per_host);
  if (per_host < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks_per_host is ", per_host, "; 0 (all on this host) or at least 1"));
  }
  if (per_host == 0 || per_host >= ranks) return ranks;
  if (ranks % per_host != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--ranks_per_host=", per_host,
                                                   " does not divide the job's ", ranks, " ranks"));
  }
  if (absl::GetFlag(FLAGS_inter_node_gbs) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ranks_per_host=", per_host, " puts the job's ", ranks, " ranks on ", ranks / per_host,
        " hosts: give the link between them, --inter_node_gbs (GB/s each way: 0.25 for 2 "
        "Gbit/s) and --inter_node_latency_us"));
  }
  return per_host;
}

// PrintHosts says which link joins the hosts of a this-cpu job, when it has several.
void PrintHosts(int64_t ranks, int64_t per_host, const planner::DeviceSpec& d) {
  if (per_host >= ranks) return;
  std::cout << "across " << ranks / per_host << " hosts of " << per_host
            << " ranks: link " << d.inter_node_latency * 1e6 << " us, "
            << d.inter_node_bandwidth / 1e9 << " GB/s\n";
}

// CpuDeviceFor: this CPU split over `ranks` of `threads_per_rank` (0: the job's
// default), fitted to the calibration run among
// `calibrations` with the threads each of those ranks gets.
absl::StatusOr<planner::DeviceSpec> CpuDeviceFor(int64_t ranks, int threads_per_rank,
                                                 const std::vector<planner::JobRun>& calibrations,
                                                 bool print) {
  LOOM_ASSIGN_OR_RETURN(const planner::FittedCpu fit,
                        planner::MeasureAndFit(ranks, threads_per_rank, calibrations));
  const planner::DeviceSpec& device = fit.cpu.device;
  if (!calibrations.empty() && !fit.fitted) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no --calibration run has ", fit.cpu.threads_per_rank, " threads per rank, which each of ",
        ranks, " ranks gets here"));
  }
  if (print) {
    std::cout << "this-cpu: " << fit.cpu.cpu_model << ", " << fit.cpu.cores << " cores, " << ranks
              << " ranks x " << fit.cpu.threads_per_rank << " threads; per rank "
              << device.peak_f32_flops / 1e9 << " GFLOP/s f32 peak, "
              << device.memory_bandwidth / 1e9 << " GB/s memory; inproc link "
              << device.intra_node_latency * 1e6 << " us, " << device.intra_node_bandwidth / 1e9
              << " GB/s\n";
    if (fit.fitted) {
      std::cout << "calibrated (" << fit.cpu.threads_per_rank << " threads): GEMM efficiency up to "
                << device.gemm_max_efficiency << ", attention at " << device.attention_efficiency
                << " of it, " << device.elementwise_passes << " element-wise passes, "
                << device.step_overhead_seconds * 1e3 << " ms overhead a step\n";
      if (fit.runs_fitted > 1) {
        std::cout << "  from " << fit.runs_fitted << " runs: GEMM efficiency half at "
                  << device.gemm_half_rows << " rows, weight gradients "
                  << device.grad_accumulate_passes << " passes a microbatch\n";
      }
    }
  }
  return device;
}

absl::StatusOr<std::vector<planner::JobRun>> ReadRuns(const std::string& flag,
                                                      const std::vector<std::string>& paths) {
  std::vector<planner::JobRun> runs;
  for (const std::string& path : paths) {
    LOOM_ASSIGN_OR_RETURN(const std::string text, ReadFile(flag, path));
    absl::StatusOr<planner::JobRun> run = planner::ParseJobSummary(text);
    if (!run.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": ", run.status().message()));
    }
    runs.push_back(*run);
  }
  return runs;
}

// Compare predicts each run's step on this CPU and prints it beside the measurement.
absl::Status Compare(const std::vector<std::string>& paths,
                     const std::vector<planner::JobRun>& calibrations) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<planner::JobRun> runs, ReadRuns("--compare", paths));
  std::map<std::pair<int64_t, int>, planner::DeviceSpec> devices;
  std::cout << absl::StrFormat("%-62s %12s %12s %7s\n", "run (configuration)", "predicted s",
                               "measured s", "ratio");
  double worst = 0;
  size_t predicted_best = 0, measured_best = 0;
  std::vector<double> predicted(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    const planner::JobRun& run = runs[i];
    const int64_t ranks = run.config.dp * run.config.tp * run.config.pp * run.config.cp;
    LOOM_ASSIGN_OR_RETURN(const int64_t per_host, RanksPerHost(ranks));
    const std::pair<int64_t, int> key(per_host, run.threads_per_rank);
    if (devices.find(key) == devices.end()) {
      LOOM_ASSIGN_OR_RETURN(devices[key], CpuDeviceFor(per_host, run.threads_per_rank,
                                                       calibrations, /*print=*/true));
      LOOM_RETURN_IF_ERROR(ApplyOverrides(devices[key]));
      PrintHosts(ranks, per_host, devices[key]);
    }
    planner::StepInput in;
    in.shape = run.shape;
    in.global_batch = run.global_batch;
    in.device = devices[key];
    // The job hides ZeRO 0's all-reduce beside its last backward only with overlap on.
    in.device.dp_overlaps_last_backward =
        in.device.dp_overlaps_last_backward && run.overlap_grad_reduce;
    in.gpus_per_node = per_host;
    in.config = run.config;
    in.even_layers_only = true;
    absl::StatusOr<planner::StepPrediction> p = planner::PredictStep(in);
    if (!p.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--compare ", paths[i], ": ", p.status().message()));
    }
    predicted[i] = p->step_seconds;
    const double ratio = p->step_seconds / run.step_seconds;
    worst = std::max(worst, std::abs(ratio - 1));
    std::cout << absl::StrFormat("%-62s %12.4f %12.4f %7.3f\n", run.config.ToString(),
                                 p->step_seconds, run.step_seconds, ratio);
    // Tokens per step differ between runs only through the batch: compare tokens/s.
    const auto tokens = [&](size_t k) {
      return static_cast<double>(runs[k].global_batch * runs[k].shape.seq_len);
    };
    if (tokens(i) / predicted[i] > tokens(predicted_best) / predicted[predicted_best]) predicted_best = i;
    if (tokens(i) / run.step_seconds > tokens(measured_best) / runs[measured_best].step_seconds) {
      measured_best = i;
    }
  }
  const double best_rate = runs[measured_best].step_seconds;
  const double chosen_rate = runs[predicted_best].step_seconds;
  const double shortfall = chosen_rate / best_rate - 1;
  std::cout << absl::StrFormat(
      "worst prediction off by %.1f%%; predicted best: %s, measured best: %s (the predicted best "
      "measured %.1f%% slower)\n",
      100 * worst, runs[predicted_best].config.ToString(), runs[measured_best].config.ToString(),
      100 * shortfall);
  const double tolerance = absl::GetFlag(FLAGS_tolerance);
  if (tolerance > 0 && (worst > tolerance || shortfall > tolerance / 4)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "predictions outside --tolerance %.2f (worst %.3f, best's shortfall %.3f)", tolerance,
        worst, shortfall));
  }
  return absl::OkStatus();
}

absl::Status Run() {
  const std::vector<std::string> compare = absl::GetFlag(FLAGS_compare);
  if (!compare.empty()) {
    if (absl::GetFlag(FLAGS_device) != "this-cpu") {
      return absl::InvalidArgumentError("--compare goes with --device=this-cpu");
    }
    std::vector<std::string> calibration_paths;
    if (const std::string c = absl::GetFlag(FLAGS_calibration); !c.empty()) {
      calibration_paths = absl::StrSplit(c, ',');
    }
    LOOM_ASSIGN_OR_RETURN(const std::vector<planner::JobRun> calibrations,
                          ReadRuns("--calibration", calibration_paths));
    return Compare(compare, calibrations);
  }
  PlanRequest req;
  req.shape.layers = absl::GetFlag(FLAGS_layers);
  req.shape.hidden = absl::GetFlag(FLAGS_hidden);
  req.shape.heads = absl::GetFlag(FLAGS_heads);
  req.shape.seq_len = absl::GetFlag(FLAGS_seq_len);
  req.shape.vocab = absl::GetFlag(FLAGS_vocab);
  req.shape.ffn = absl::GetFlag(FLAGS_ffn);
  req.shape.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  req.shape.tied_embeddings = absl::GetFlag(FLAGS_tie_embeddings);
  if (const std::string mlp = absl::GetFlag(FLAGS_mlp); mlp == "swiglu") {
    req.shape.gated_mlp = true;
  } else if (mlp != "gelu") {
    return absl::InvalidArgumentError(absl::StrCat("--mlp \"", mlp, "\" is not gelu or swiglu"));
  }
  LOOM_RETURN_IF_ERROR(planner::ValidateShape(req.shape));
  req.global_batch = absl::GetFlag(FLAGS_global_batch);
  if (req.global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global_batch is ", req.global_batch, "; it must be at least 1 sequence"));
  }
  const int64_t gpus = absl::GetFlag(FLAGS_gpus), ranks = absl::GetFlag(FLAGS_ranks);
  if (gpus != 0 && ranks != 0) {
    return absl::InvalidArgumentError("give --gpus or --ranks, not both");
  }
  req.world = gpus != 0 ? gpus : ranks;
  if (req.world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus (or --ranks) is ", req.world, "; the cluster needs at least 1 device"));
  }
  req.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  if (req.gpus_per_node < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus_per_node is ", req.gpus_per_node));
  }
  LOOM_RETURN_IF_ERROR(ReadFixedChoices(req));
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::string calibration = absl::GetFlag(FLAGS_calibration);
  std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (device == "this-cpu") {
    std::vector<std::string> calibration_paths;
    if (!calibration.empty()) calibration_paths = absl::StrSplit(calibration, ',');
    LOOM_ASSIGN_OR_RETURN(const std::vector<planner::JobRun> calibrations,
                          ReadRuns("--calibration", calibration_paths));
    LOOM_ASSIGN_OR_RETURN(const int64_t per_host, RanksPerHost(req.world));
    LOOM_ASSIGN_OR_RETURN(req.device,
                          CpuDeviceFor(per_host, /*threads_per_rank=*/0, calibrations, /*print=*/true));
    req.gpus_per_node = per_host;  // hosts like this one
    req.even_layers_only = true;    // Loom's job splits layers evenly
    if (dtype.empty()) dtype = "f32";
  } else {
    if (!calibration.empty()) {
      return absl::InvalidArgumentError("--calibration goes with --device=this-cpu");
    }
    if (absl::GetFlag(FLAGS_ranks_per_host) != 0) {
      return absl::InvalidArgumentError(
          "--ranks_per_host goes with --device=this-cpu (GPUs: --gpus_per_node)");
    }
    LOOM_ASSIGN_OR_RETURN(req.device, planner::FindDevice(device));
    if (dtype.empty()) dtype = "bf16";
  }
  LOOM_RETURN_IF_ERROR(ApplyOverrides(req.device));
  if (device == "this-cpu") PrintHosts(req.world, req.gpus_per_node, req.device);
  if (dtype == "bf16") {
    req.dtype = planner::ComputeDtype::kBf16;
  } else if (dtype == "f32") {
    req.dtype = planner::ComputeDtype::kF32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--dtype \"", dtype, "\" is not bf16 or f32"));
  }
  const int64_t top = absl::GetFlag(FLAGS_top);
  if (top < 1) return absl::InvalidArgumentError(absl::StrCat("--top is ", top));
  req.keep = top;
  LOOM_ASSIGN_OR_RETURN(const planner::PlanResult plan, planner::Plan(req));
  std::cout << "model: " << planner::ParameterCount(req.shape) / 1e9 << " B parameters, "
            << req.global_batch << " sequences of " << req.shape.seq_len << " per step on "
            << req.world << " x " << req.device.name << "\n";
  std::cout << planner::RankedTable(plan, top);
  if (absl::GetFlag(FLAGS_explain)) std::cout << planner::Explain(plan);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream out(path);
    out << planner::RankedJson(plan);
    out.close();
    if (!out) return absl::UnavailableError(absl::StrCat("--json ", path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::StatusOr<std::vector<char*>> args = loom::cli::ParseFlags(argc, argv);
  if (!args.ok()) return loom::cli::Fail("plan", args.status());
  if (absl::Status s = loom::cli::CheckNoArguments(*args); !s.ok()) return loom::cli::Fail("plan", s);
  if (absl::Status s = loom::cli::CheckOutputPath("--json", absl::GetFlag(FLAGS_json)); !s.ok()) {
    return loom::cli::Fail("plan", s);
  }
  const absl::Status s = loom::Run();
  if (!s.ok()) return loom::cli::Fail("plan", s);
  return 0;
}
