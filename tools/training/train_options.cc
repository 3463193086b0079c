#include "tools/training/train_options.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom {

std::string StepReport::ToString() const {
  const std::string extra =
      (eval_loss.has_value() ? absl::StrFormat("  eval %.4f", *eval_loss) : std::string()) +
      (grad_norm > 0 ? absl::StrFormat("  grad norm %.3g", grad_norm) : std::string());
  const std::string saved = checkpoint_seconds > 0
                                ? absl::StrFormat("  checkpoint %.1f ms", checkpoint_seconds * 1e3)
                                : std::string();
  return absl::StrCat(
      absl::StrFormat(
          "step %4d  loss %.4f  %7.1f ms  %9.0f tokens/s  model state %s/rank  sent %s/rank", step,
          loss, seconds * 1e3, tokens_per_second,
          absl::StrFormat("%.2f MiB", static_cast<double>(model_state_bytes) / (1 << 20)),
          absl::StrFormat("%.2f MiB", static_cast<double>(comm_bytes) / (1 << 20))),
      extra, saved);
}

void StepBreakdown::Add(const StepBreakdown& more, double weight) {
  compute += weight * more.compute;
  dp_comm += weight * more.dp_comm;
  pp_comm += weight * more.pp_comm;
  optimizer += weight * more.optimizer;
  other += weight * more.other;
  param_wait += weight * more.param_wait;
  gemm += weight * more.gemm;
  attention += weight * more.attention;
  cp_hops += weight * more.cp_hops;
  cp_exposed += weight * more.cp_exposed;
}

const char* OffloadName(OffloadKind kind) {
  switch (kind) {
    case OffloadKind::kNone: return "none";
    case OffloadKind::kCpu: return "cpu";
    case OffloadKind::kNvme: return "nvme";
    case OffloadKind::kGpu: return "gpu";
  }
  return "unknown";
}

const char* ComputeDeviceName(ComputeDevice device) {
  return device == ComputeDevice::kCuda ? "cuda" : "cpu";
}

const char* RankTransportName(RankTransport transport) {
  switch (transport) {
    case RankTransport::kThreads: return "threads";
    case RankTransport::kShm: return "shm";
    case RankTransport::kMpi: return "mpi";
  }
  return "unknown";
}

int JobWorldSize(const TrainJobOptions& options) {
  return options.dp * options.pp * options.cp * options.tp;
}

int ParameterGroupSize(const TrainJobOptions& options) { return options.dp * options.cp; }

bool UsesDisk(const TrainJobOptions& options) {
  return options.offload == OffloadKind::kNvme || options.offload_params == OffloadKind::kNvme ||
         options.offload_grads == OffloadKind::kNvme;
}

Reshard EffectiveReshard(const TrainJobOptions& options) {
  if (options.reshard != Reshard::kAuto) return options.reshard;
  return options.zero == 3 ? Reshard::kBlock : Reshard::kStep;
}

const char* ReshardName(Reshard reshard) {
  switch (reshard) {
    case Reshard::kAuto: return "auto";
    case Reshard::kStep: return "step";
    case Reshard::kBlock: return "block";
  }
  return "unknown";
}

absl::StatusOr<std::optional<CostModel>> LoadJobCostModel(const TrainJobOptions& options) {
  if (options.cost_model.empty()) return std::nullopt;
  absl::StatusOr<CostModel> model = CostModel::Load(options.cost_model);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cost_model ", options.cost_model, ": ", model.status().message()));
  }
  return *std::move(model);
}

}  // namespace loom
