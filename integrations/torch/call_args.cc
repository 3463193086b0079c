#include "integrations/torch/call_args.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace pytorch {
namespace {

std::string Join(at::IntArrayRef values) {
  return absl::StrCat("[", absl::StrJoin(values.begin(), values.end(), ", "), "]");
}

}  // namespace

std::optional<DType> LoomDTypeOf(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::kF32;
    case at::kDouble: return DType::kF64;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kChar: return DType::kI8;
    case at::kByte: return DType::kU8;
    case at::kInt: return DType::kI32;
    case at::kLong: return DType::kI64;
    default: return std::nullopt;
  }
}

absl::Status CheckDenseCpu(const at::Tensor& tensor, absl::string_view call, absl::string_view what) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", what, " is undefined"));
  }
  if (tensor.layout() != at::kStrided) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom ", call, ": ", what, " has layout ", c10::str(tensor.layout()),
        "; Loom's backend takes dense (strided) tensors; pass tensor.to_dense()"));
  }
  if (!tensor.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom ", call, ": ", what, " is on device ", tensor.device().str(),
        "; Loom's backend takes CPU tensors (move it with tensor.cpu())"));
  }
  if (!tensor.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom ", call, ": ", what, " is not contiguous (sizes ", Join(tensor.sizes()),
        ", strides ", Join(tensor.strides()),
        "); pass tensor.contiguous() and copy the result back where the call writes it"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllDenseCpu(const std::vector<at::Tensor>& tensors, at::ScalarType dtype,
                              absl::string_view call, absl::string_view what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string name = absl::StrCat(what, " ", i);
    LOOM_RETURN_IF_ERROR(CheckDenseCpu(tensors[i], call, name));
    if (tensors[i].scalar_type() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", name, " has dtype ",
                                                     c10::toString(tensors[i].scalar_type()),
                                                     ", expected ", c10::toString(dtype)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCount(size_t count, size_t expected, absl::string_view call,
                        absl::string_view what) {
  if (count == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": expected ", expected, " ",
                                                 what, ", got ", count));
}

absl::Status CheckAllNumel(const std::vector<at::Tensor>& tensors, int64_t numel,
                           absl::string_view call, absl::string_view what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() != numel) {
      return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", what, " ", i, " has ",
                                                     tensors[i].numel(), " elements, expected ",
                                                     numel));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSameDType(const at::Tensor& input, const at::Tensor& output,
                            absl::string_view call) {
  if (input.scalar_type() == output.scalar_type()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "loom ", call, ": input has dtype ", c10::toString(input.scalar_type()),
      " but output has dtype ", c10::toString(output.scalar_type())));
}

absl::Status CheckRank(int64_t rank, int size, absl::string_view call, absl::string_view what) {
  if (rank >= 0 && rank < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", what, " ", rank,
                                                 " is outside the group's ranks [0, ", size, ")"));
}

absl::StatusOr<BufferView> ReductionView(const at::Tensor& tensor, absl::string_view call) {
  const std::optional<DType> dtype = LoomDTypeOf(tensor.scalar_type());
  if (!dtype.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom ", call, ": dtype ", c10::toString(tensor.scalar_type()),
        " cannot be reduced; Loom reduces float32, float64, float16, bfloat16, int8, uint8, "
        "int32 and int64"));
  }
  return BufferView(static_cast<std::byte*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()),
                    *dtype);
}

BufferView MovementView(const at::Tensor& tensor) {
  const std::optional<DType> dtype = LoomDTypeOf(tensor.scalar_type());
  if (dtype.has_value()) {
    return BufferView(static_cast<std::byte*>(tensor.data_ptr()),
                      static_cast<size_t>(tensor.numel()), *dtype);
  }
  return BufferView(static_cast<std::byte*>(tensor.data_ptr()), tensor.nbytes(), DType::kU8);
}

size_t MovementUnits(const at::Tensor& tensor, int64_t elements) {
  const size_t unit = LoomDTypeOf(tensor.scalar_type()).has_value() ? 1 : tensor.element_size();
  return static_cast<size_t>(elements) * unit;
}

absl::StatusOr<std::vector<size_t>> SplitCounts(const at::Tensor& tensor,
                                                const std::vector<int64_t>& splits, int size,
                                                absl::string_view call, absl::string_view what) {
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  int64_t row_elements = 1;
  for (int64_t d = 1; d < tensor.dim(); ++d) row_elements *= tensor.size(d);
  std::vector<size_t> counts;
  if (splits.empty()) {
    if (rows % size != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "loom ", call, ": ", what, " has ", rows, " rows (dimension 0), not divisible into ",
          size, " equal parts; pass split sizes"));
    }
    counts.assign(size, MovementUnits(tensor, rows / size * row_elements));
    return counts;
  }
  if (splits.size() != static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", splits.size(), " ", what,
                                                   " split sizes for ", size, " ranks"));
  }
  int64_t total = 0;
  for (const int64_t split : splits) {
    if (split < 0) {
      return absl::InvalidArgumentError(absl::StrCat("loom ", call, ": ", what,
                                                     " split sizes [", absl::StrJoin(splits, ", "),
                                                     "] hold a negative one"));
    }
    total += split;
    counts.push_back(MovementUnits(tensor, split * row_elements));
  }
  if (total != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom ", call, ": ", what, " split sizes [", absl::StrJoin(splits, ", "), "] add up to ",
        total, " rows, but the ", what, " has ", rows));
  }
  return counts;
}

std::string DescribeTensor(const at::Tensor& tensor) {
  if (!tensor.defined()) return "undefined";
  const std::optional<DType> dtype = LoomDTypeOf(tensor.scalar_type());
  return absl::StrCat(dtype.has_value() ? std::string(DTypeName(*dtype))
                                        : std::string(c10::toString(tensor.scalar_type())),
                      ", ", tensor.numel(), tensor.numel() == 1 ? " element" : " elements");
}

absl::StatusOr<ReduceOp> LoomReduceOp(const c10d::ReduceOp& op, absl::string_view call) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default: break;
  }
  static constexpr const char* kNames[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX",
                                           "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  const int code = static_cast<int>(op.op_);
  const std::string name = code < 9 ? std::string(kNames[code]) : absl::StrCat(code);
  return absl::InvalidArgumentError(absl::StrCat(
      "loom ", call, ": reduce op ", name,
      " is not supported; Loom reduces with SUM, AVG, PRODUCT, MIN and MAX"));
}

at::Tensor Flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    t.view({-1}).copy_(flat.narrow(0, offset, t.numel()));
    offset += t.numel();
  }
}

}  // namespace pytorch
}  // namespace loom
