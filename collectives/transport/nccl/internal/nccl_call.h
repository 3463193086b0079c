// NCCL results as absl::Status: every NCCL call of the nccl transport goes through
// NcclStatus (or LOOM_NCCL_RETURN_IF_ERROR), so a failure names the call as written
// and carries the result's name and number, ncclGetErrorString's text and NCCL's own
// last message (ncclGetLastError), with a status code a caller can act on.
//
// Example:
//   LOOM_NCCL_RETURN_IF_ERROR(ncclSend(buf, n, ncclUint8, peer, comm, stream), comm);
//   // on failure: InvalidArgument "ncclSend(buf, n, ncclUint8, peer, comm, stream) failed:
//   //             ncclInvalidArgument (4): invalid argument (...); NCCL says: ..."
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_CALL_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_CALL_H_

#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace nccl_internal {

// NcclResultName returns the enumerator's name ("ncclRemoteError"), or
// "ncclResult_t(N)" text for a value NCCL does not define.
std::string NcclResultName(ncclResult_t result);

// NcclStatus: OK for ncclSuccess and for ncclInProgress (a non-blocking communicator
// accepted the call and finishes it in the background; the caller polls
// ncclCommGetAsyncError). Otherwise a Status naming `call`, with the result's name,
// number and ncclGetErrorString text, and ncclGetLastError(comm)'s message where NCCL
// has one (`comm` may be null; it must not be an aborted communicator). Codes:
// InvalidArgument for ncclInvalidArgument, FailedPrecondition for ncclInvalidUsage,
// Unavailable for ncclRemoteError (a peer or the network failed), Internal otherwise.
absl::Status NcclStatus(ncclResult_t result, absl::string_view call, ncclComm_t comm = nullptr);

}  // namespace nccl_internal
}  // namespace loom

// LOOM_NCCL_RETURN_IF_ERROR(ncclSend(...), comm) returns NcclStatus from the
// enclosing function (which returns Status or StatusOr) when the call neither
// succeeds nor is in progress.
#define LOOM_NCCL_RETURN_IF_ERROR(expr, comm)                                      \
  do {                                                                             \
    const ncclResult_t loom_nccl_result_ = (expr);                                 \
    if (loom_nccl_result_ != ncclSuccess && loom_nccl_result_ != ncclInProgress) { \
      return ::loom::nccl_internal::NcclStatus(loom_nccl_result_, #expr, (comm));  \
    }                                                                              \
  } while (false)

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_CALL_H_
