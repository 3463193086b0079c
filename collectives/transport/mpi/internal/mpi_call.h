// MPI calls made safe to share: one process-wide lock that every MPI call of the
// transport is made under (so MPI_THREAD_SERIALIZED suffices, and Abort may come
// from any thread), and MPI error codes turned into Status.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_MPI_CALL_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_MPI_CALL_H_

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/mutex.h"

namespace loom {
namespace mpi_internal {

// MpiLock is held around every MPI call of Loom's MPI code. State that only MPI calls
// touch is ABSL_GUARDED_BY(MpiLock()).
Mutex& MpiLock();

// MpiStatus: OK for MPI_SUCCESS; otherwise Internal naming `call` and carrying
// MPI_Error_string's text and the error class.
absl::Status MpiStatus(int code, absl::string_view call);

}  // namespace mpi_internal
}  // namespace loom

// LOOM_MPI_RETURN_IF_ERROR(MPI_Isend(...), "MPI_Isend") returns MpiStatus from the
// enclosing function when the MPI call does not return MPI_SUCCESS.
#define LOOM_MPI_RETURN_IF_ERROR(expr, call)                             \
  do {                                                                   \
    const int loom_mpi_code_ = (expr);                                   \
    if (loom_mpi_code_ != MPI_SUCCESS) {                                 \
      return ::loom::mpi_internal::MpiStatus(loom_mpi_code_, call);      \
    }                                                                    \
  } while (false)

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_MPI_CALL_H_
