// The boundary where Loom's Status becomes a C++ exception: what a process-group call
// refuses on the caller's thread reaches Python as a RuntimeError (pybind11 turns
// std::runtime_error into one) carrying Loom's message.
//
// Example:
//   RaiseIfError(CheckDenseCpu(t, "all_reduce", "tensor"));
//   BufferView view = ValueOrRaise(ReductionView(t, "all_reduce"));
#ifndef LOOM_INTEGRATIONS_TORCH_INTERNAL_RAISE_H_
#define LOOM_INTEGRATIONS_TORCH_INTERNAL_RAISE_H_

#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {
namespace pytorch_internal {

// RaiseIfError throws std::runtime_error with the status's message unless it is OK.
inline void RaiseIfError(const absl::Status& status) {
  if (!status.ok()) throw std::runtime_error(std::string(status.message()));
}

// ValueOrRaise returns the value, or throws as RaiseIfError.
template <typename T>
T ValueOrRaise(absl::StatusOr<T> value) {
  RaiseIfError(value.status());
  return *std::move(value);
}

}  // namespace pytorch_internal
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_INTERNAL_RAISE_H_
