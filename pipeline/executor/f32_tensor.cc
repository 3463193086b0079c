#include "pipeline/executor/f32_tensor.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {

absl::StatusOr<F32Tensor> F32Tensor::Create(std::vector<int64_t> shape,
                                            std::vector<float> values) {
  F32Tensor tensor{std::move(shape), std::move(values)};
  absl::Status status = tensor.Validate();
  if (!status.ok()) return status;
  return tensor;
}

F32Tensor F32Tensor::Zeros(std::vector<int64_t> shape) {
  const int64_t count = CheckedNumElements(shape);
  F32Tensor tensor;
  tensor.shape = std::move(shape);
  tensor.values.assign(count > 0 ? static_cast<size_t>(count) : 0, 0.0f);
  return tensor;
}

int64_t F32Tensor::NumElements() const { return CheckedNumElements(shape); }

absl::Status F32Tensor::Validate() const {
  const int64_t count = NumElements();
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeString(shape), " has a negative dimension or too many elements"));
  }
  if (static_cast<uint64_t>(count) != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeString(shape), " has ", count,
                                                   " elements, ", values.size(), " values given"));
  }
  return absl::OkStatus();
}

}  // namespace loom
