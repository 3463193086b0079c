#include "core/tensor.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_join.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr int kMaxRank = 8;

// Rows, the extent of `dim` and the contiguous elements after it: a tensor viewed
// as [outer, extent, inner], which Slice and Concat copy block by block.
struct Split3 {
  int64_t outer = 1;
  int64_t extent = 0;
  int64_t inner = 1;
};

Split3 SplitAt(absl::Span<const int64_t> shape, int dim) {
  Split3 s;
  for (int d = 0; d < dim; ++d) s.outer *= shape[static_cast<size_t>(d)];
  s.extent = shape[static_cast<size_t>(dim)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

absl::Status CheckDim(const char* what, absl::Span<const int64_t> shape, int dim) {
  if (dim < 0 || dim >= static_cast<int>(shape.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": dim ", dim, " is out of range for shape ",
                                                   ShapeString(shape)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> Tensor::Create(std::vector<int64_t> shape, DType dtype) {
  return Allocate(std::move(shape), dtype, /*zero=*/true);
}

absl::StatusOr<Tensor> Tensor::Allocate(std::vector<int64_t> shape, DType dtype, bool zero) {
  if (!SupportsDType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor: dtype ", DTypeName(dtype),
                     " is not supported (f32, bf16, i32 or i64)"));
  }
  if (shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor: shape ", ShapeString(shape), " has ",
                                                   shape.size(), " dimensions, at most ", kMaxRank));
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Tensor: shape ", ShapeString(shape), " has a negative dimension"));
    }
  }
  const size_t size = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  LOOM_ASSIGN_OR_RETURN(AlignedBuffer<std::byte> bytes,
                        zero ? AlignedBuffer<std::byte>::Create(size)
                             : AlignedBuffer<std::byte>::CreateUninitialized(size));
  return Tensor(std::move(shape), dtype, std::move(bytes));
}

absl::StatusOr<Tensor> Tensor::CreateUninitialized(std::vector<int64_t> shape, DType dtype) {
  return Allocate(std::move(shape), dtype, /*zero=*/false);
}

absl::StatusOr<Tensor> Tensor::FromValues(std::vector<int64_t> shape,
                                          absl::Span<const float> values) {
  const int64_t n = NumElements(shape);
  if (n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::FromValues: shape ", ShapeString(shape),
                                                   " has ", n, " elements, got ", values.size(),
                                                   " values"));
  }
  // Every byte is copied in, so no zero fill first.
  LOOM_ASSIGN_OR_RETURN(Tensor t, Allocate(std::move(shape), DType::kF32, /*zero=*/false));
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), values.size() * sizeof(float));
  return t;
}

absl::StatusOr<Tensor> Tensor::FromInts(std::vector<int64_t> shape,
                                        absl::Span<const int64_t> values) {
  const int64_t n = NumElements(shape);
  if (n != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("Tensor::FromInts: shape ", ShapeString(shape),
                                                   " has ", n, " elements, got ", values.size(),
                                                   " values"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor t, Allocate(std::move(shape), DType::kI64, /*zero=*/false));
  if (!values.empty()) std::memcpy(t.bytes_.data(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

bool Tensor::Equals(const Tensor& other) const {
  return shape_ == other.shape_ && dtype_ == other.dtype_ &&
         (size_bytes() == 0 || std::memcmp(bytes_.data(), other.bytes_.data(), size_bytes()) == 0);
}

Tensor Tensor::Clone() const {
  Tensor copy = *Allocate(shape_, dtype_, /*zero=*/false);
  if (size_bytes() > 0) std::memcpy(copy.bytes_.data(), bytes_.data(), size_bytes());
  return copy;
}

absl::StatusOr<Tensor> Tensor::Slice(int dim, int64_t offset, int64_t length) const {
  LOOM_RETURN_IF_ERROR(CheckDim("Slice", shape_, dim));
  const Split3 s = SplitAt(shape_, dim);
  if (offset < 0 || length < 0 || offset > s.extent || length > s.extent - offset) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: [", offset, ", ", offset + length,
                                                   ") along dim ", dim, " is outside shape ",
                                                   ShapeString(shape_)));
  }
  std::vector<int64_t> shape = shape_;
  shape[static_cast<size_t>(dim)] = length;
  LOOM_ASSIGN_OR_RETURN(Tensor out, Create(std::move(shape), dtype_));
  const size_t elem = DTypeSize(dtype_);
  const size_t row = static_cast<size_t>(length * s.inner) * elem;
  for (int64_t o = 0; o < s.outer && row > 0; ++o) {
    std::memcpy(out.bytes_.data() + static_cast<size_t>(o) * row,
                bytes_.data() + static_cast<size_t>((o * s.extent + offset) * s.inner) * elem, row);
  }
  return out;
}

absl::StatusOr<Tensor> Tensor::Concat(absl::Span<const Tensor> parts, int dim) {
  if (parts.empty()) return absl::InvalidArgumentError("Concat: no parts");
  const Tensor& first = parts[0];
  LOOM_RETURN_IF_ERROR(CheckDim("Concat", first.shape_, dim));
  std::vector<int64_t> shape = first.shape_;
  shape[static_cast<size_t>(dim)] = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const Tensor& part = parts[p];
    bool same = part.dtype_ == first.dtype_ && part.rank() == first.rank();
    for (int d = 0; same && d < first.rank(); ++d) same = d == dim || part.dim(d) == first.dim(d);
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Concat along dim ", dim, ": part ", p, " is ", DTypeName(part.dtype_), " ",
          ShapeString(part.shape_), ", part 0 is ", DTypeName(first.dtype_), " ",
          ShapeString(first.shape_)));
    }
    shape[static_cast<size_t>(dim)] += part.dim(dim);
  }
  LOOM_ASSIGN_OR_RETURN(Tensor out, Create(shape, first.dtype_));
  const Split3 whole = SplitAt(shape, dim);
  const size_t elem = DTypeSize(first.dtype_);
  int64_t at = 0;
  for (const Tensor& part : parts) {
    const size_t row = static_cast<size_t>(part.dim(dim) * whole.inner) * elem;
    for (int64_t o = 0; o < whole.outer && row > 0; ++o) {
      std::memcpy(out.bytes_.data() + static_cast<size_t>((o * whole.extent + at) * whole.inner) * elem,
                  part.bytes_.data() + static_cast<size_t>(o) * row, row);
    }
    at += part.dim(dim);
  }
  return out;
}

absl::StatusOr<Tensor> Tensor::Reshape(std::vector<int64_t> shape) && {
  if (NumElements(shape) != numel() || shape.size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: ", ShapeString(shape_), " (", numel(),
                                                   " elements) cannot become ", ShapeString(shape)));
  }
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("Reshape: ", ShapeString(shape)));
  }
  return Tensor(std::move(shape), dtype_, std::move(bytes_));
}

absl::StatusOr<Tensor> Tensor::ConvertTo(DType dtype) const {
  if (dtype == dtype_) return Clone();
  if (!IsFloating(dtype_) || !IsFloating(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("ConvertTo: ", DTypeName(dtype_), " to ",
                                                   DTypeName(dtype),
                                                   " (only f32 and bf16 convert)"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor out, Create(shape_, dtype));
  if (dtype_ == DType::kF32) {
    LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(*As<float>(), *out.As<BFloat16>()));
  } else {
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(*As<BFloat16>(), *out.As<float>()));
  }
  return out;
}

std::vector<float> Tensor::ToF32() const {
  std::vector<float> values(static_cast<size_t>(numel()));
  switch (dtype_) {
    case DType::kF32:
      if (!values.empty()) std::memcpy(values.data(), bytes_.data(), size_bytes());
      break;
    case DType::kBF16:
      ConvertBF16ToF32(*As<BFloat16>(), absl::MakeSpan(values)).IgnoreError();  // Sizes match.
      break;
    case DType::kI32: {
      const absl::Span<const int32_t> ints = *As<int32_t>();
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(ints[i]);
      break;
    }
    case DType::kI64: {
      const absl::Span<const int64_t> ints = *As<int64_t>();
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(ints[i]);
      break;
    }
    default:
      break;
  }
  return values;
}

}  // namespace loom
