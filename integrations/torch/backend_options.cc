#include "integrations/torch/backend_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {
namespace pytorch {

absl::StatusOr<TransportChoice> ParseTransportChoice(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "auto") return TransportChoice::kAuto;
  if (lower == "shm") return TransportChoice::kShm;
  if (lower == "gloo") return TransportChoice::kGloo;
  if (lower == "mpi") return TransportChoice::kMpi;
  return absl::InvalidArgumentError(
      absl::StrCat("loom: unknown transport \"", text, "\"; expected auto, shm, gloo or mpi"));
}

absl::string_view TransportChoiceName(TransportChoice choice) {
  switch (choice) {
    case TransportChoice::kAuto: return "auto";
    case TransportChoice::kShm: return "shm";
    case TransportChoice::kGloo: return "gloo";
    case TransportChoice::kMpi: return "mpi";
  }
  return "?";
}

absl::StatusOr<ShmOptions::CopyMode> ParseShmCopy(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "staged_or_mapped") return ShmOptions::CopyMode::kStagedOrMapped;
  if (lower == "auto") return ShmOptions::CopyMode::kAuto;
  if (lower == "cma") return ShmOptions::CopyMode::kCma;
  if (lower == "staged") return ShmOptions::CopyMode::kStaged;
  return absl::InvalidArgumentError(absl::StrCat(
      "loom: unknown shm_copy \"", text, "\"; expected staged_or_mapped, auto, cma or staged"));
}

absl::Status ValidateBackendOptions(const BackendOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateHeartbeatTimeout(options.heartbeat_timeout, "loom: heartbeat_timeout"));
  for (const char c : options.host_id) {
    if (c == '\n' || c == '\t') {
      return absl::InvalidArgumentError(absl::StrCat(
          "loom: host_id \"", absl::CEscape(options.host_id), "\" contains a tab or newline"));
    }
  }
  if (options.cost_model_calibrations < 1) {
    return absl::InvalidArgumentError(absl::StrCat("loom: cost_model_calibrations ",
                                                   options.cost_model_calibrations,
                                                   " must be 1 or more"));
  }
  return absl::OkStatus();
}

}  // namespace pytorch
}  // namespace loom
