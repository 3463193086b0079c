#include "pipeline/executor/f32_tensor.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {

int64_t NumElementsOf(absl::Span<const int64_t> shape) {
  int64_t count = 1;
  for (const int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / dim) return -1;
    count *= dim;
  }
  return count;
}

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::StatusOr<F32Tensor> F32Tensor::Create(std::vector<int64_t> shape,
                                            std::vector<float> values) {
  F32Tensor tensor{std::move(shape), std::move(values)};
  absl::Status status = tensor.Validate();
  if (!status.ok()) return status;
  return tensor;
}

F32Tensor F32Tensor::Zeros(std::vector<int64_t> shape) {
  const int64_t count = NumElementsOf(shape);
  F32Tensor tensor;
  tensor.shape = std::move(shape);
  tensor.values.assign(count > 0 ? static_cast<size_t>(count) : 0, 0.0f);
  return tensor;
}

int64_t F32Tensor::NumElements() const { return NumElementsOf(shape); }

absl::Status F32Tensor::Validate() const {
  const int64_t count = NumElements();
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", ShapeToString(shape), " has a negative dimension or too many elements"));
  }
  if (static_cast<uint64_t>(count) != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", ShapeToString(shape), " has ", count,
                                                   " elements, ", values.size(), " values given"));
  }
  return absl::OkStatus();
}

}  // namespace loom
