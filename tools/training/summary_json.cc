#include "tools/training/summary_json.h"

#include <cstdint>
#include <string>

#include "core/build_info.h"
#include "core/dtype.h"
#include "nlohmann/json.hpp"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "topology/recompute.h"

namespace loom {
namespace {

using Json = nlohmann::ordered_json;

template <typename T>
Json OrNull(const std::optional<T>& value) {
  return value.has_value() ? Json(*value) : Json(nullptr);
}

Json BreakdownJson(const StepBreakdown& b) {
  return Json{{"compute", b.compute},       {"dp_comm", b.dp_comm},
              {"pp_comm", b.pp_comm},       {"optimizer", b.optimizer},
              {"other", b.other},           {"param_wait", b.param_wait},
              {"gemm", b.gemm},             {"attention", b.attention},
              {"cp_hops", b.cp_hops},       {"cp_exposed", b.cp_exposed}};
}

// OneLine: `value` on one line with a space after each ':' and ',' (the form the
// README's examples and scripts' greps read: "steps": 4, ...); strings and numbers
// as the library writes them (invalid UTF-8, from /proc, replaced, never a throw).
std::string OneLine(const Json& value) {
  if (!value.is_object()) return value.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out = "{";
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (it != value.begin()) out += ", ";
    out += Json(it.key()).dump() + ": " + OneLine(it.value());
  }
  return out + "}";
}

}  // namespace

std::string TrainSummaryJson(const TrainCommand& command, const TrainSummary& s,
                             const MfuReport& mfu,
                             const std::optional<ReferenceComparison>& reference) {
  const TrainJobOptions& o = command.options;
  const bool on_cpu = o.device == ComputeDevice::kCpu;
  Json j;
  j["final_loss"] = s.final_loss;
  j["final_eval_loss"] = OrNull(s.final_eval_loss);
  j["reference_final_loss"] =
      reference.has_value() ? Json(reference->reference_final_loss) : Json(nullptr);
  j["max_abs_param_diff"] =
      reference.has_value() ? Json(reference->max_abs_param_diff) : Json(nullptr);
  j["peak_model_state_bytes_per_rank"] = s.peak_model_state_bytes_per_rank;
  j["model_state_disk_bytes_per_rank"] = s.disk_state_bytes_per_rank;
  j["estimated_model_state_bytes_per_rank"] = s.estimated_model_state_bytes_per_rank;
  j["comm_bytes_per_rank_per_step"] = s.comm_bytes_per_rank_per_step;
  j["peak_activation_bytes_per_rank"] = s.peak_activation_bytes_per_rank;
  j["estimated_activation_bytes_per_rank"] = s.estimated_activation_bytes_per_rank;
  j["dp"] = o.dp;
  j["tp"] = o.tp;
  j["pp"] = o.pp;
  j["cp"] = o.cp;
  j["cp_comm"] = std::string(CpCommName(o.cp_comm));
  j["zero"] = o.zero;
  j["overlap_grad_reduce"] = o.overlap_grad_reduce;
  j["schedule"] = std::string(PipelineScheduleName(o.schedule));
  j["microbatches"] = o.microbatches;
  j["micro_batch"] = o.micro_batch;
  j["global_batch"] = int64_t{o.dp} * o.microbatches * o.micro_batch;
  j["recompute"] = RecomputeName(o.recompute);
  j["dtype"] = std::string(DTypeName(o.dtype));
  j["layers"] = o.model.layers;
  j["hidden"] = o.model.hidden;
  j["heads"] = o.model.heads;
  j["seq_len"] = o.model.seq_len;
  j["vocab"] = o.model.vocab;
  j["ffn"] = o.model.ffn_size();
  j["steps"] = o.steps;
  j["tokens_per_second"] = s.tokens_per_second;
  j["build"] = BuildMode();
  j["device"] = ComputeDeviceName(o.device);
  j["device_gemm_products"] = s.device_gemm_products;
  if (!s.cost_model_source.empty()) j["cost_model_source"] = s.cost_model_source;
  if (!s.hosts.empty()) j["hosts"] = s.hosts;
  if (!s.device_description.empty()) {
    const DeviceMfu device = ComputeDeviceMfu(o.model, s);
    j["device_description"] = s.device_description;
    j["device_tokens_per_second"] = device.tokens_per_second;
    j["device_tflops"] = device.achieved_flops / 1e12;
    j["device_mfu_h100_bf16"] = device.mfu;
  }
  j["host_cpu_busy"] = s.host_cpu_busy >= 0 ? Json(s.host_cpu_busy) : Json(nullptr);
  j["page_faults_per_step"] =
      s.page_faults_per_step >= 0 ? Json(s.page_faults_per_step) : Json(nullptr);
  // Forwards run twice in the last step (0: every microbatch kept its context).
  j["recomputed_forwards"] = s.dp_traffic.recomputed_forwards;
  j["model_flops_per_token"] = mfu.flops_per_token;
  j["achieved_gflops"] = mfu.achieved_flops / 1e9;
  j["peak_gflops"] = mfu.peak_flops / 1e9;
  j["peak_gflops_per_core"] = mfu.peak_flops_per_core / 1e9;
  j["cores_used"] = mfu.cores;
  // The products run on the GPU with --device cuda: the CPU's peak is no denominator.
  j["mfu"] = on_cpu ? Json(mfu.mfu) : Json(nullptr);
  j["peak_kind"] = mfu.peak_kind;
  j["peak_source"] = mfu.peak_source;
  j["gemm_backend"] = mfu.gemm_backend;
  j["gemm_mfu"] = on_cpu && mfu.gemm_mfu > 0 ? Json(mfu.gemm_mfu) : Json(nullptr);
  j["mfu_f32_peak"] = on_cpu ? Json(mfu.mfu_f32_peak) : Json(nullptr);
  j["threads_per_rank"] = mfu.threads_per_rank;
  j["cpu_model"] = mfu.cpu_model;
  j["vector_target"] = mfu.vector_target;
  j["step_breakdown_s"] = BreakdownJson(s.step_breakdown_s);
  return OneLine(j) + "\n";
}

}  // namespace loom
