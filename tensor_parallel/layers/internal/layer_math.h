// Small element-wise helpers of the parallel layers (private). Matrix products go
// through Gemm (BLAS); these are the O(rows * cols) passes around them.
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_LAYER_MATH_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_LAYER_MATH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/half.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "core/tensor.h"

namespace loom {
namespace tp_layers_internal {

// F32Values returns `t`'s values as f32: a view for an f32 tensor, otherwise the
// widened copy kept in `scratch` (bf16 storage is widened for every product, so the
// layer never holds an f32 copy of its weights).
absl::Span<const float> F32Values(const Tensor& t, std::vector<float>& scratch);

// BorrowedWeights: the f32 views a layer computes with instead of its own weight
// and bias while it borrows them (the layers' BorrowWeights), the weight's bf16
// compute copy when the lender keeps one (empty otherwise), and whether the layer
// dropped its own storage for good (DropOwnedWeights).
struct BorrowedWeights {
  bool active = false;
  bool owned_dropped = false;
  absl::Span<const float> weight, bias;
  absl::Span<const BFloat16> weight_bf16;
};

// Borrow checks views of `weight_numel` and `bias_numel` elements (bias_numel 0:
// the layer has no bias; the view must then be empty; weight_bf16 empty or of
// weight_numel; `weight` may be empty when weight_bf16 is given, for a layer that
// multiplies in bf16 only) and starts borrowing them. InvalidArgument naming `who`
// and the counts otherwise.
absl::Status Borrow(BorrowedWeights& borrowed, absl::Span<const float> weight,
                    absl::Span<const float> bias, absl::Span<const BFloat16> weight_bf16,
                    int64_t weight_numel, int64_t bias_numel, const std::string& who);

// LinearOperand: a matrix a linear layer keeps for a later product (its forward
// input, for the weight gradient): the f32 values in kF32; in kBf16 only their bf16
// rounding, rounded once (what every product of them would round them to, in half
// the memory).
struct LinearOperand {
  // An AlignedBuffer: filled by a copy on the rank's threads, from the job's block
  // cache (a std::vector would zero it first, or copy on one thread).
  AlignedBuffer<float> f32;
  std::vector<BFloat16> bf16;
  bool is_bf16 = false;

  // View is the dense rows x cols matrix as a product input.
  GemmBf16Input View(int64_t rows, int64_t cols) const;
  size_t bytes() const {
    return f32.size_bytes() + bf16.capacity() * sizeof(BFloat16);
  }
};

// LinearForwardState: what a linear layer's Forward keeps for its Backward (the
// column- and row-parallel layers' ForwardState): its input as an operand, the
// shapes it checks the output gradient and shapes the input gradient by, and the
// rows of the full-sequence input.
struct LinearForwardState {
  LinearOperand input;
  std::vector<int64_t> input_shape, output_shape;
  int64_t rows = 0;          // rows of the full-sequence input
  int64_t per_position = 1;  // row-parallel: rows per sequence position (the batch)
  bool valid = false;
  size_t bytes() const { return input.bytes(); }
};

// KeepOperand returns `values` (moved) as an operand of `precision`: kept for kF32,
// rounded to bf16 (on the rank's threads; the f32 values freed) for kBf16.
absl::StatusOr<LinearOperand> KeepOperand(AlignedBuffer<float> values, GemmPrecision precision);
// The same from a view: copied for kF32 (OwnedValues), rounded for kBf16 (no f32 copy).
absl::StatusOr<LinearOperand> KeepOperand(absl::Span<const float> values,
                                          GemmPrecision precision);

// RoundedOperand returns `values` as a dense rows x cols product input: the view
// itself for kF32, or for kBf16 its rounding into `rounded` (on the rank's threads),
// so that the products that share it round it once.
absl::StatusOr<GemmBf16Input> RoundedOperand(absl::Span<const float> values, int64_t rows,
                                             int64_t cols, GemmPrecision precision,
                                             std::vector<BFloat16>& rounded);

// WeightInput returns the weight `w` as a product input: in kBf16, the borrowed
// bf16 copy in its place when the lender gave one (the same values, not rounded
// again for every product); otherwise `w`.
GemmBf16Input WeightInput(GemmPrecision precision, const BorrowedWeights& borrowed,
                          const ConstMatrixView& w);

// ProductWithBias is Product followed by AddBias(c, bias), bitwise: a bf16 product
// adds the bias in its own epilogue (GemmBf16WithBias: no second pass over C), an f32
// one after it. An empty bias adds nothing.
absl::Status ProductWithBias(GemmPrecision precision, const GemmBf16Input& a, Transpose trans_a,
                             const GemmBf16Input& b, Transpose trans_b, MatrixView c,
                             absl::Span<const float> bias);

// Product computes C = op(A) op(B) (alpha 1, beta 0): Gemm in `precision` when both
// inputs are f32, otherwise GemmBf16 (an input already rounded is a bf16 product's).
absl::Status Product(GemmPrecision precision, const GemmBf16Input& a, Transpose trans_a,
                     const GemmBf16Input& b, Transpose trans_b, MatrixView c);

// ComputeValues returns what the layer computes with: the borrowed view while it
// borrows, else F32Values(own, scratch). FailedPrecondition naming `who` when it
// dropped its own weights and borrows none.
absl::StatusOr<absl::Span<const float>> ComputeValues(const BorrowedWeights& borrowed, bool bias,
                                                      const Tensor& own,
                                                      std::vector<float>& scratch,
                                                      const std::string& who);

// AddBias adds bias (cols) to every row of y (rows x cols).
void AddBias(absl::Span<float> y, absl::Span<const float> bias);

// SumRows returns the column sums of g (rows x cols).
std::vector<float> SumRows(absl::Span<const float> g, int64_t cols);

// StoreSlice returns full.Slice(dim, offset, length) converted to `dtype`.
absl::StatusOr<Tensor> StoreSlice(const Tensor& full, int dim, int64_t offset, int64_t length,
                                  DType dtype);

// ToTensor returns an f32 tensor of `shape` holding `values`.
absl::StatusOr<Tensor> ToTensor(std::vector<int64_t> shape, absl::Span<const float> values);

// NewOutput returns an uninitialized f32 tensor of `shape` and its values, for a
// layer to write its output into (a product with beta = 0 writes every element).
struct Output {
  Tensor tensor;
  absl::Span<float> values;
};
absl::StatusOr<Output> NewOutput(std::vector<int64_t> shape);
// WeightGradOutput returns where a weight gradient of rows x cols is written:
// `into` when given (a caller's place for it, e.g. ParameterSource::GradientSlot;
// the tensor is then empty), else a new tensor. InvalidArgument naming `who` and
// the sizes when `into` holds another count.
absl::StatusOr<Output> WeightGradOutput(absl::Span<float> into, int64_t rows, int64_t cols,
                                        const std::string& who);

// CheckActivation returns the rows (all dimensions but the last) of activation
// `x` of layer `who`, or InvalidArgument naming the shape unless x is f32 of rank
// >= 2 with last dimension `features` and, when expected_dim0 >= 0, dimension 0 of
// that size (the local sequence piece under sequence parallelism).
absl::StatusOr<int64_t> CheckActivation(const Tensor& x, int64_t features, int64_t expected_dim0,
                                        const std::string& who);

// CheckStorage returns InvalidArgument unless dtype is f32 or bf16 (`who` names the layer).
absl::Status CheckStorage(DType dtype, const std::string& who);

// CheckPrecision returns InvalidArgument naming `who` and the value unless `precision`
// is kF32 or kBf16.
absl::Status CheckPrecision(GemmPrecision precision, const std::string& who);

// LayerPrecision returns the precision of a linear layer's products: kBf16 for bf16
// weight storage, otherwise the one the layer was asked for.
inline GemmPrecision LayerPrecision(DType weight_dtype, GemmPrecision requested) {
  return weight_dtype == DType::kBF16 ? GemmPrecision::kBf16 : requested;
}

// CheckSequenceParallel returns InvalidArgument unless sequence parallelism, when
// on, comes with the full sequence length (> 0) that its pieces divide.
absl::Status CheckSequenceParallel(bool sequence_parallel, int64_t sequence_length,
                                   const std::string& who);

// CheckLinearOptions checks what the column- and row-parallel linear layers share:
// CheckStorage(weight_dtype), CheckPrecision(precision) and CheckSequenceParallel.
absl::Status CheckLinearOptions(DType weight_dtype, GemmPrecision precision,
                                bool sequence_parallel, int64_t sequence_length,
                                const std::string& who);

// CheckGradient checks a Backward argument of layer `who`: FailedPrecondition before
// any Forward, InvalidArgument naming both unless `grad` (called `name`) is f32 of
// the shape Forward returned.
absl::Status CheckGradient(const std::string& who, bool has_forward, const Tensor& grad,
                           const std::vector<int64_t>& forward_shape,
                           const std::string& name = "grad_output");

// OwnedValues returns a copy of `view` a work can keep. The gradient helpers
// return a view of the caller's tensor when they need no copy (or of `storage`,
// gathered), so a plain Backward copies nothing, and a split backward copies only
// what its work must keep, into an AlignedBuffer (large ones reused step after step
// where core/large_block_cache.h is on). Where view is storage's data (a gathered
// gradient) the copy is one more than a move was; `storage` is left as it was.
absl::StatusOr<AlignedBuffer<float>> OwnedValues(absl::Span<const float> view);

// LinearWork returns the work a linear layer's BackwardInput leaves: its saved
// input (moved in), and the output gradient `g` [rows, bias_cols-wide or not] as its
// products used it: f32, owned (OwnedValues), or, when `g16` holds g's bf16
// rounding (non-empty), that, with the bias gradient (bias_cols wide; 0: no bias)
// summed from the f32 g now. ResourceExhausted when the copy cannot be allocated.
absl::StatusOr<WeightGradWork> LinearWork(LinearOperand input, absl::Span<const float> g,
                                          std::vector<BFloat16> g16, int64_t bias_cols,
                                          int64_t rows);

// WorkBiasGradient returns a work's bias gradient (bias_cols wide; 0: none): summed
// already with a bf16 gradient, from the f32 gradient otherwise.
std::vector<float> WorkBiasGradient(const WeightGradWork& work, int64_t bias_cols);

// WorkInput and WorkGradient are a work's input [rows, in] and output gradient
// [rows, out] as product inputs (bf16 where the work keeps them so).
GemmBf16Input WorkInput(const WeightGradWork& work, int64_t in);
GemmBf16Input WorkGradient(const WeightGradWork& work, int64_t out);

// CheckWeightGradWork checks a linear layer's BackwardWeight argument: InvalidArgument
// naming the sizes unless `work` holds an input of rows x in values and an output
// gradient of rows x out (each f32 or bf16) and, with a bf16 gradient, its bias
// gradient of bias_numel (an f32 gradient's is summed from it in BackwardWeight).
absl::Status CheckWeightGradWork(const std::string& who, const WeightGradWork& work, int64_t in,
                                 int64_t out, int64_t bias_numel);

}  // namespace tp_layers_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_LAYER_MATH_H_
