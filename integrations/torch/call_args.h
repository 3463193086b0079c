// Call arguments: what a process-group call gets (tensors, roots, peers, ops), checked,
// and its tensors seen as the BufferViews Loom's Communicator takes. The backend works on dense, contiguous CPU
// tensors in place (no hidden copies); anything else is refused with a message
// naming the call, the tensor and what is wrong with it.
//
// Example:
//   at::Tensor t = at::ones({4, 6});
//   CheckDenseCpu(t, "all_reduce", "tensor");              // OK
//   CheckDenseCpu(t.t(), "all_reduce", "tensor");
//   // InvalidArgument: loom all_reduce: tensor is not contiguous (sizes [6, 4],
//   //   strides [1, 6]); pass tensor.contiguous() ...
//   ReductionView(t, "all_reduce");                        // f32 view of 24 elements
//   ReductionView(t.to(at::kBool), "all_reduce");
//   // InvalidArgument: loom all_reduce: dtype Bool cannot be reduced; ...
//   MovementView(t.to(at::kBool));                         // u8 view of 24 bytes
#ifndef LOOM_INTEGRATIONS_TORCH_CALL_ARGS_H_
#define LOOM_INTEGRATIONS_TORCH_CALL_ARGS_H_

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {
namespace pytorch {

// LoomDTypeOf returns Loom's DType for a torch scalar type that Loom reduces
// (float32, float64, float16, bfloat16, int8, uint8, int32, int64); nullopt otherwise.
std::optional<DType> LoomDTypeOf(at::ScalarType type);

// CheckDenseCpu: InvalidArgument naming `call` and `what` (e.g. "output tensor 2")
// unless `tensor` is a defined, dense (strided), contiguous tensor on the CPU.
absl::Status CheckDenseCpu(const at::Tensor& tensor, absl::string_view call, absl::string_view what);

// CheckAllDenseCpu: CheckDenseCpu for each tensor of a list ("<what> i"), and that they
// all have `dtype`.
absl::Status CheckAllDenseCpu(const std::vector<at::Tensor>& tensors, at::ScalarType dtype,
                              absl::string_view call, absl::string_view what);

// CheckCount: InvalidArgument naming the call, the list and both counts unless the
// list holds `expected` tensors.
absl::Status CheckCount(size_t count, size_t expected, absl::string_view call, absl::string_view what);

// CheckAllNumel: InvalidArgument naming the call and the tensor unless every tensor of
// the list has `numel` elements.
absl::Status CheckAllNumel(const std::vector<at::Tensor>& tensors, int64_t numel,
                           absl::string_view call, absl::string_view what);

// CheckSameDType: InvalidArgument naming both dtypes unless input and output share one.
absl::Status CheckSameDType(const at::Tensor& input, const at::Tensor& output,
                            absl::string_view call);

// CheckRank: InvalidArgument naming the call, `what` ("root", "destination") and the
// value unless 0 <= rank < size.
absl::Status CheckRank(int64_t rank, int size, absl::string_view call, absl::string_view what);

// ReductionView returns `tensor` (checked by CheckDenseCpu) as a typed view;
// InvalidArgument naming the dtype and the ones Loom reduces otherwise.
absl::StatusOr<BufferView> ReductionView(const at::Tensor& tensor, absl::string_view call);

// MovementView returns `tensor` as a view for calls that only move data: typed when
// Loom knows its dtype, else its bytes (u8), so any dtype travels (bool, int16,
// complex, ...).
BufferView MovementView(const at::Tensor& tensor);

// MovementUnits returns how many units of MovementView(tensor) `elements` elements
// of it are: elements when Loom knows its dtype, bytes otherwise.
size_t MovementUnits(const at::Tensor& tensor, int64_t elements);

// SplitCounts returns the per-rank counts (in MovementView's units) of `tensor` cut
// along its first dimension by `splits` (rows per rank; empty: `size` equal parts), as
// all_to_all_single's input and output are. InvalidArgument naming the call, `what`
// ("input", "output") and the numbers when the splits are not `size` non-negative
// row counts adding up to the rows, or an equal split does not divide them.
absl::StatusOr<std::vector<size_t>> SplitCounts(const at::Tensor& tensor,
                                                const std::vector<int64_t>& splits, int size,
                                                absl::string_view call, absl::string_view what);

// DescribeTensor names a tensor's dtype and element count for call names:
// "f32, 1000 elements" (Loom's dtype names; torch's for the others, "Bool, 3 elements").
std::string DescribeTensor(const at::Tensor& tensor);

// LoomReduceOp maps c10d's reduce op (SUM, AVG, PRODUCT, MIN, MAX); InvalidArgument
// naming the call and the op (BAND, BOR, BXOR, PREMUL_SUM) otherwise.
absl::StatusOr<ReduceOp> LoomReduceOp(const c10d::ReduceOp& op, absl::string_view call);

// Flatten: a new contiguous tensor holding `tensors` (one dtype) end to end, in order.
at::Tensor Flatten(const std::vector<at::Tensor>& tensors);

// Unflatten copies consecutive pieces of `flat` back into `tensors` (Flatten's inverse).
void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_CALL_ARGS_H_
