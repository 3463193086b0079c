// F32Tensor: the activations and gradients a pipeline executor hands between stages:
// a shape and its float32 values in row-major order, owned by value.
//
// Owning by value keeps the executor's bookkeeping simple: a tensor moves from the
// stage that made it into the message that carries it (or straight into the next
// stage on the same rank) and nobody has to track a lifetime across ranks.
//
// Example:
//   F32Tensor x = F32Tensor::Zeros({4, 3});
//   x.NumElements();                       // 12
//   x.values.size();                       // 12
//   ShapeString(x.shape);                  // "[4,3]" (core/shape.h)
//   F32Tensor::Create({2, 2}, {1, 2, 3});
//   // InvalidArgument: shape [2,2] has 4 elements, 3 values given
#ifndef LOOM_PIPELINE_EXECUTOR_F32_TENSOR_H_
#define LOOM_PIPELINE_EXECUTOR_F32_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/shape.h"

namespace loom {

struct F32Tensor {
  std::vector<int64_t> shape;
  std::vector<float> values;

  // Create returns a tensor after Validate-ing it. InvalidArgument as Validate.
  static absl::StatusOr<F32Tensor> Create(std::vector<int64_t> shape, std::vector<float> values);

  // Zeros returns a tensor of `shape` filled with 0. A negative dimension counts
  // as 0 here; Validate reports it.
  static F32Tensor Zeros(std::vector<int64_t> shape);

  // NumElements returns the product of the dimensions (1 for a scalar, shape {}),
  // or -1 when a dimension is negative or the product overflows int64.
  int64_t NumElements() const;

  // Validate returns OK when every dimension is non-negative and `values` holds
  // exactly NumElements() floats; otherwise InvalidArgument naming the shape and
  // the number of values.
  absl::Status Validate() const;

  friend bool operator==(const F32Tensor& a, const F32Tensor& b) {
    return a.shape == b.shape && a.values == b.values;
  }
};

// ShapeString, NumElements and CheckedNumElements: core/shape.h.

}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_F32_TENSOR_H_
