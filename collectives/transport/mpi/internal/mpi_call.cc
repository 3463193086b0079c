#include "collectives/transport/mpi/internal/mpi_call.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace loom {
namespace mpi_internal {

Mutex& MpiLock() {
  static Mutex* const lock = new Mutex;
  return *lock;
}

absl::Status MpiStatus(int code, absl::string_view call) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  std::string message = "unknown MPI error";
  if (MPI_Error_string(code, text, &length) == MPI_SUCCESS) message.assign(text, length);
  int error_class = code;
  MPI_Error_class(code, &error_class);
  return absl::InternalError(
      absl::StrCat("mpi: ", call, " failed: ", message, " (MPI error class ", error_class, ")"));
}

}  // namespace mpi_internal
}  // namespace loom
