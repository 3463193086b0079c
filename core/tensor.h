// Tensor: Loom's one tensor type, a dense, row-major host tensor that owns its
// elements (64-byte aligned): a shape and a dtype (f32 for compute; bf16 as a
// storage option, widened to f32 for math; i32 and i64 for token ids and other
// integers). It is what a DistributedTensor holds as its local shard, what the
// parallel layers and the models take and return, and what a pipeline executor
// hands between stages. Copies are explicit (Clone), so a large activation is
// never duplicated by accident.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Tensor x, Tensor::FromValues({2, 3}, {0, 1, 2, 3, 4, 5}));
//   x.shape();                          // {2, 3}
//   x.numel();                          // 6
//   LOOM_ASSIGN_OR_RETURN(absl::Span<float> v, x.As<float>());   // row-major values
//   LOOM_ASSIGN_OR_RETURN(Tensor col, x.Slice(/*dim=*/1, /*offset=*/1, /*length=*/2));
//   // col: shape {2, 2}, values {1, 2, 4, 5}
//   LOOM_ASSIGN_OR_RETURN(Tensor back, Tensor::Concat({x0, x1}, /*dim=*/1));
//   LOOM_ASSIGN_OR_RETURN(Tensor half, x.ConvertTo(DType::kBF16));   // round to nearest even
//   LOOM_ASSIGN_OR_RETURN(Tensor ids, Tensor::FromInts({2, 3}, {5, 1, 9, 9, 0, 4}));  // i64
//   x.Slice(2, 0, 1);   // InvalidArgument: "Slice: dim 2 is out of range for shape [2,3]"
#ifndef LOOM_CORE_TENSOR_H_
#define LOOM_CORE_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/shape.h"

namespace loom {

// ShapeString and NumElements: core/shape.h.

class Tensor {
 public:
  // The dtypes a Tensor may hold: kF32 (compute), kBF16 (storage), kI32 and kI64
  // (integers: token ids, targets).
  static bool SupportsDType(DType dtype) {
    return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kI32 ||
           dtype == DType::kI64;
  }
  static bool IsFloating(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

  // Create returns a zero-filled tensor. InvalidArgument for a negative dimension,
  // more than 8 dimensions or an unsupported dtype; ResourceExhausted when the
  // memory cannot be allocated.
  static absl::StatusOr<Tensor> Create(std::vector<int64_t> shape, DType dtype = DType::kF32);

  // CreateUninitialized is Create without the zero fill, for a caller that writes
  // every element before it reads one (a layer's output written by a product): the
  // fill would only cost a pass over memory. Same errors as Create.
  static absl::StatusOr<Tensor> CreateUninitialized(std::vector<int64_t> shape,
                                                    DType dtype = DType::kF32);

  // FromValues returns an f32 tensor holding `values` (row-major). InvalidArgument
  // when their count differs from the shape's (both named).
  static absl::StatusOr<Tensor> FromValues(std::vector<int64_t> shape,
                                           absl::Span<const float> values);

  // FromInts returns an i64 tensor holding `values` (row-major), e.g. token ids.
  // InvalidArgument when their count differs from the shape's.
  static absl::StatusOr<Tensor> FromInts(std::vector<int64_t> shape,
                                         absl::Span<const int64_t> values);

  // Concat joins `parts` along `dim`; every other dimension and the dtype must agree
  // (InvalidArgument naming the first part that differs). Empty parts are fine.
  static absl::StatusOr<Tensor> Concat(absl::Span<const Tensor> parts, int dim);

  Tensor() = default;  // An empty f32 tensor of shape {0}.
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // Clone returns a deep copy.
  Tensor Clone() const;
  // Equals: the same shape, dtype and bytes (bitwise: -0 differs from 0, a NaN
  // equals the same NaN).
  bool Equals(const Tensor& other) const;

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int d) const { return shape_[static_cast<size_t>(d)]; }
  int64_t numel() const { return NumElements(shape_); }
  DType dtype() const { return dtype_; }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }

  // view views the elements for collectives and codecs.
  BufferView view() { return BufferView(bytes_.data(), static_cast<size_t>(numel()), dtype_); }
  ConstBufferView view() const {
    return ConstBufferView(bytes_.data(), static_cast<size_t>(numel()), dtype_);
  }

  // As<T>() returns the typed elements; InvalidArgument when T is not the dtype.
  template <typename T>
  absl::StatusOr<absl::Span<T>> As() {
    return view().As<T>();
  }
  template <typename T>
  absl::StatusOr<absl::Span<const T>> As() const {
    return view().As<T>();
  }

  // Slice copies elements [offset, offset + length) along `dim` into a new tensor.
  // InvalidArgument for a dim or range outside the shape (with the numbers).
  absl::StatusOr<Tensor> Slice(int dim, int64_t offset, int64_t length) const;

  // Reshape returns the same elements under another shape with the same element
  // count; InvalidArgument naming both shapes otherwise.
  absl::StatusOr<Tensor> Reshape(std::vector<int64_t> shape) &&;

  // ConvertTo returns a copy in `dtype` (f32 -> bf16 rounds to nearest even; bf16 ->
  // f32 is exact; the same dtype clones). InvalidArgument between an integer and a
  // floating dtype, or for an unsupported one.
  absl::StatusOr<Tensor> ConvertTo(DType dtype) const;

  // ToF32 returns the values as f32 (a copy for bf16, a clone for f32; integers
  // converted, exact below 2^24).
  std::vector<float> ToF32() const;

 private:
  // Allocate is Create, with the zero fill only when `zero` is set (callers that
  // write every byte skip it).
  static absl::StatusOr<Tensor> Allocate(std::vector<int64_t> shape, DType dtype, bool zero);

  Tensor(std::vector<int64_t> shape, DType dtype, AlignedBuffer<std::byte> bytes)
      : shape_(std::move(shape)), dtype_(dtype), bytes_(std::move(bytes)) {}

  std::vector<int64_t> shape_ = {0};
  DType dtype_ = DType::kF32;
  AlignedBuffer<std::byte> bytes_;
};

}  // namespace loom

#endif  // LOOM_CORE_TENSOR_H_
