#include "collectives/transport/nccl/internal/nccl_call.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace loom {
namespace nccl_internal {

std::string NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: break;
  }
  return absl::StrCat("ncclResult_t(", static_cast<int>(result), ")");
}

absl::Status NcclStatus(ncclResult_t result, absl::string_view call, ncclComm_t comm) {
  if (result == ncclSuccess || result == ncclInProgress) return absl::OkStatus();
  std::string message = absl::StrCat(call, " failed: ", NcclResultName(result), " (",
                                     static_cast<int>(result), "): ", ncclGetErrorString(result));
  // NCCL keeps the last error's text per thread (and per communicator); it names the
  // actual cause ("Duplicate GPU detected", "peer ... closed the connection").
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&message, "; NCCL says: ", last);
  switch (result) {
    case ncclInvalidArgument: return absl::InvalidArgumentError(message);
    case ncclInvalidUsage: return absl::FailedPreconditionError(message);
    case ncclRemoteError: return absl::UnavailableError(message);
    default: return absl::InternalError(message);
  }
}

}  // namespace nccl_internal
}  // namespace loom
