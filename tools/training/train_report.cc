#include "tools/training/train_report.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/build_info.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "offload/offload_config.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tools/mesh_report.h"
#include "core/atomic_file.h"
#include "tools/training/job_mesh.h"
#include "tools/training/offload_mapping.h"
#include "tools/training/summary_json.h"
#include "topology/mesh.h"
#include "topology/node_layout.h"
#include "topology/recompute.h"

namespace loom {

absl::Status PrintTrainHeader(const TrainCommand& command, int world, std::ostream& out) {
  const TrainJobOptions& o = command.options;
  const RankTransport transport = command.launch.transport;
  out << absl::StrFormat(
      "train: dp=%d tp=%d pp=%d%s (%d %s), schedule %s, %d microbatches x %d "
      "sequences, zero %d%s, offload %s, %s, recompute %s\nmodel: %s\n",
      o.dp, o.tp, o.pp,
      o.cp > 1 ? absl::StrCat(" cp=", o.cp, " (", CpLayoutName(o.cp_layout), ")") : "", world,
      transport == RankTransport::kThreads
          ? std::string("thread ranks")
          : absl::StrCat("processes over ", RankTransportName(transport)),
      PipelineScheduleName(o.schedule), o.microbatches, o.micro_batch, o.zero,
      o.zero > 0 && o.zero < 3 && EffectiveReshard(o) == Reshard::kBlock
          ? absl::StrCat(" (weights borrowed from the engine",
                         o.defer_reduce_scatter ? ", deferred reduce-scatter" : "", ")")
      : o.zero == 3
          ? absl::StrCat(" (reshard ", ReshardName(EffectiveReshard(o)),
                         o.defer_reduce_scatter ? ", deferred reduce-scatter" : "",
                         o.offload_params == OffloadKind::kNvme ? ", parameters on nvme" : "",
                         o.offload_grads == OffloadKind::kNvme ? ", gradients on nvme" : "",
                         o.param_budget > 0 ? absl::StrCat(", parameter budget ",
                                                           o.param_budget, " bytes")
                                            : "",
                         ")")
          : std::string(),
      OffloadName(o.offload), DTypeName(o.dtype), RecomputeName(o.recompute),
      o.model.ToString());
  if (const std::string& spec = command.offload_config; !spec.empty()) {
    // What the job does, in the library's terms; the budgets are the user's
    // (checked against this machine; the job itself does not allocate by them).
    OffloadConfig done = JobOffloadConfig(o);
    if (absl::StatusOr<OffloadConfig> given = ParseOffloadConfig(spec); given.ok()) {
      done.host_budget_bytes = given->host_budget_bytes;
      done.nvme_budget_bytes = given->nvme_budget_bytes;
    }
    out << "offload config: " << FormatOffloadConfig(done) << "\n";
  }
  if (o.cp > 1) {
    // The causal attention work of the cp ranks (ring_attention.h's visible pairs).
    LOOM_ASSIGN_OR_RETURN(const double imbalance,
                          CpWorkImbalance(o.model.seq_len, o.cp, o.cp_layout));
    const CpLayout other =
        o.cp_layout == CpLayout::kZigzag ? CpLayout::kContiguous : CpLayout::kZigzag;
    LOOM_ASSIGN_OR_RETURN(const double other_imbalance,
                          CpWorkImbalance(o.model.seq_len, o.cp, other));
    out << absl::StrFormat(
        "cp: %s layout, attention work of the busiest cp rank over the mean %.3f (%s: "
        "%.3f); attention over cp: %s (%s)\n",
        CpLayoutName(o.cp_layout), imbalance, CpLayoutName(other), other_imbalance,
        CpCommName(o.cp_comm), command.cp_comm_why);
  }
  // The groups are topology's: //tools:mesh prints the same for these flags.
  out << "mesh: tp fastest, then cp, then pp, then dp (//tools:mesh " << JobMeshCommand(o)
            << ")\n";
  if (command.outputs.print_mesh) {
    LOOM_ASSIGN_OR_RETURN(const Mesh mesh, JobMeshOf(o));
    LOOM_ASSIGN_OR_RETURN(const NodeLayout nodes,
                          NodeLayout::Create(mesh.world_size(), mesh.world_size()));
    LOOM_ASSIGN_OR_RETURN(const std::string table, MeshReportTable(mesh, nodes, std::nullopt));
    out << table;
  }
  return absl::OkStatus();
}

void PrintTrainSummary(const TrainCommand& command, const TrainSummary& s, const MfuReport& mfu,
                       std::ostream& out) {
  const TrainJobOptions& o = command.options;
  const std::string floor =
      o.data.empty() ? absl::StrFormat(", the chain's entropy rate %.4f", s.entropy_rate)
                     : std::string();
  out << absl::StrFormat(
      "final loss %.4f (uniform guess log V = %.4f%s)\n"
      "model state per rank: %d bytes in memory (%d in the ZeRO engine) and %d on disk, peak "
      "activations per rank: %d bytes, sent per rank per step: %d bytes, %.0f tokens/s (%s "
      "build)\n",
      s.final_loss, s.uniform_loss, floor, s.peak_model_state_bytes_per_rank,
      s.sharded_state_bytes_per_rank, s.disk_state_bytes_per_rank,
      s.peak_activation_bytes_per_rank, s.comm_bytes_per_rank_per_step,
      s.tokens_per_second, BuildMode());
  // The estimate beside the measurement: memory and disk against
  // topology/memory_estimate's model (which holds both).
  const int64_t measured_state =
      s.peak_model_state_bytes_per_rank + s.disk_state_bytes_per_rank;
  const int64_t estimated_state = s.estimated_model_state_bytes_per_rank;
  out << absl::StrFormat(
      "model state per rank, estimated (topology/memory_estimate, zero %d): %d bytes; measured "
      "(memory and disk) %d bytes, %.2f times the estimate\n",
      o.zero, estimated_state, measured_state,
      estimated_state > 0 ? static_cast<double>(measured_state) / estimated_state : 0.0);
  // Activations against topology/memory_estimate's fused-attention formula.
  const int64_t estimated_activations = s.estimated_activation_bytes_per_rank;
  out << absl::StrFormat(
      "activations per rank, estimated (topology/memory_estimate, fused attention, %d of %d "
      "positions per sequence): %d bytes; measured %d bytes, %.2f times the estimate\n",
      (o.model.seq_len + o.cp - 1) / o.cp, o.model.seq_len, estimated_activations,
      s.peak_activation_bytes_per_rank,
      estimated_activations > 0
          ? static_cast<double>(s.peak_activation_bytes_per_rank) / estimated_activations
          : 0.0);
  if (!s.hosts.empty()) out << "hosts: " << s.hosts << "\n";
  if (!s.cost_model_source.empty()) out << "dp collectives: " << s.cost_model_source << "\n";
  if (o.device == ComputeDevice::kCuda && !s.device_description.empty()) {
    out << "device: " << s.device_description << "\n" << DeviceMfuLine(o.model, s) << "\n";
  } else if (o.device == ComputeDevice::kCuda) {
    out << absl::StrFormat(
        "device: cuda (cuBLAS f32 on device 0), %d matrix products on the GPU for rank 0\n",
        s.device_gemm_products);
  }
  const StepBreakdown& b = s.step_breakdown_s;
  out << absl::StrFormat(
      "time per step (mean over ranks): compute %.2f ms, parameter wait %.2f ms, dp comm %.2f ms, "
      "pp comm %.2f ms, optimizer %.2f ms, other %.2f ms\n",
      b.compute * 1e3, b.param_wait * 1e3, b.dp_comm * 1e3, b.pp_comm * 1e3, b.optimizer * 1e3,
      b.other * 1e3);
  // The rest of compute: element-wise passes and, with tp > 1, the layers' collectives.
  out << absl::StrFormat(
      "compute per step: GEMM %.2f ms, attention %.2f ms, element-wise and tp collectives "
      "%.2f ms\n",
      b.gemm * 1e3, b.attention * 1e3, std::max(0.0, b.compute - b.gemm - b.attention) * 1e3);
  if (o.cp > 1 && o.cp_comm == CpComm::kRing) {
    // The ring's hops run beside the attention compute; what they did not cover.
    out << absl::StrFormat(
        "cp ring per step: hops %.2f ms on the communication threads, %.2f ms of them "
        "exposed (%.0f%% hidden behind attention)\n",
        b.cp_hops * 1e3, b.cp_exposed * 1e3,
        b.cp_hops > 0 ? 100.0 * std::max(0.0, 1.0 - b.cp_exposed / b.cp_hops) : 0.0);
  }
  if (s.host_cpu_busy >= 0) {
    // Waits cost time only where CPUs sit idle: with more busy threads than CPUs,
    // a rank's wait is the other ranks' compute.
    out << absl::StrFormat(
        "host CPUs busy %.1f%% of the step (rank 0's host, %d CPUs, all processes)\n",
        s.host_cpu_busy * 100, std::thread::hardware_concurrency());
  }
  if (s.page_faults_per_step >= 0) {
    // Zero once the job's buffers are reused from step to step (STYLE 28).
    out << absl::StrFormat(
        "page faults per step: %.1f (the run's third step to the one before its last; rank "
        "0's process, getrusage)\n",
        s.page_faults_per_step);
  }
  // On a GPU the products run there, so the CPU's peak is not the denominator.
  const bool on_cpu = o.device == ComputeDevice::kCpu;
  if (on_cpu) {
    out << MfuLine(mfu) << "\n";
    // Where the blocks' and the head's products ran (the attention scores stay f32).
    const GemmPrecision precision =
        o.dtype == DType::kBF16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
    out << "GEMM: " << GemmPrecisionName(precision) << " products on "
              << GemmBackendName(precision) << "\n";
  }
  if (s.final_eval_loss.has_value()) {
    out << absl::StrFormat("eval loss %.4f (held out, after step %d)\n",
                                 *s.final_eval_loss, o.steps);
  }
  if (s.resumed_from_step > 0) {
    out << absl::StrFormat("resumed from the checkpoint of step %d in %s\n",
                                 s.resumed_from_step, o.resume_dir);
  }
  if (!o.checkpoint_dir.empty()) {
    out << absl::StrFormat("checkpoint: step %d in %s\n", o.steps, o.checkpoint_dir);
  }
}

void PrintReference(const ReferenceComparison& reference, std::ostream& out) {
  const double relative = reference.max_abs_param > 0
                              ? reference.max_abs_param_diff / reference.max_abs_param
                              : reference.max_abs_param_diff;
  out << absl::StrFormat(
      "reference (1 rank, same seed and batch): final loss %.4f, largest parameter "
      "difference %.3g (%.3g of the largest parameter)\n",
      reference.reference_final_loss, reference.max_abs_param_diff, relative);
}

absl::Status WriteTrainFiles(const TrainCommand& command, const TrainSummary& summary,
                             const MfuReport& mfu,
                             const std::optional<ReferenceComparison>& reference,
                             std::ostream& out) {
  const TrainOutputs& files = command.outputs;
  if (!files.trace.empty()) {
    if (absl::Status s = WriteFileAtomically(files.trace, summary.trace_json); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--trace: ", s.message()));
    }
    out << "trace: " << files.trace << "\n";
  }
  if (!files.summary_json.empty()) {
    const std::string json = TrainSummaryJson(command, summary, mfu, reference);
    if (absl::Status s = WriteFileAtomically(files.summary_json, json); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--summary_json: ", s.message()));
    }
    out << "summary: " << files.summary_json << "\n";
  }
  return absl::OkStatus();
}

}  // namespace loom
