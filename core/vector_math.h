// Vector math for the model's element-wise and row-wise passes: GELU (tanh form) and its
// derivative, the pieces of a numerically stable softmax (row maximum, exp of the
// shifted row with its sum, scaling), and layer normalization's passes (its row sums in
// double). Each kernel is written once with Google Highway and dispatched at run time
// to the widest vector unit this CPU has (AVX-512, AVX2, SSE4 or scalar); Highway's
// Tanh and Exp come from its contrib/math.
//
// Accuracy against the scalar double-precision reference, asserted by
// vector_math_test over the ranges that matter (|x| <= 12 for GELU, the softmax's
// shifted row in [-104, 0]):
//   ExpShiftInPlace  at most 1 ulp (Highway's bound) from exp of the f32 difference
//                    x - shift (rounded once, as scalar f32 code rounds it).
//   GeluTanh         absolute error at most 2e-7 * (1 + |x|) (measured 8.2e-8; Highway's
//                    Tanh is within 4 ulp).
//   GeluTanhBackward absolute error at most 5e-7 * |dy| * (1 + |x|) (measured 2.3e-7).
// Bits depend on the vector width, so two CPUs of different levels may differ in the
// last place; one process always uses one level.
//
// Example:
//   std::vector<float> x = {-1.0f, 0.0f, 1.0f}, y(3);
//   LOOM_RETURN_IF_ERROR(GeluTanh(x, absl::MakeSpan(y)));   // y ~ {-0.15881, 0, 0.84119}
//   std::vector<float> row = {1.0f, 2.0f, 3.0f};
//   SoftmaxInPlace(absl::MakeSpan(row));                     // ~ {0.09003, 0.24473, 0.66524}
//   GeluTanh(x, absl::MakeSpan(y).first(2));
//   // InvalidArgument: "GeluTanh: x has 3 values, y 2"
#ifndef LOOM_CORE_VECTOR_MATH_H_
#define LOOM_CORE_VECTOR_MATH_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// GeluTanh writes 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of every x into y
// (y may be x itself). InvalidArgument naming both sizes when they differ.
absl::Status GeluTanh(absl::Span<const float> x, absl::Span<float> y);

// GeluTanhBackward writes dy * GELU'(x) into dx (dx may alias dy). InvalidArgument
// naming the sizes when they differ.
absl::Status GeluTanhBackward(absl::Span<const float> x, absl::Span<const float> dy,
                              absl::Span<float> dx);

// MaxValue returns the largest value of x (-infinity when x is empty; NaN when any
// value is NaN).
float MaxValue(absl::Span<const float> x);

// ExpShiftInPlace replaces every value v of x by exp(v - shift) and returns their sum
// (accumulated in f32 lanes, then across lanes). With shift = MaxValue(x) no value
// overflows and the sum is at least 1.
float ExpShiftInPlace(absl::Span<float> x, float shift);

// ScaleInPlace multiplies every value of x by factor.
void ScaleInPlace(absl::Span<float> x, float factor);

// SoftmaxInPlace replaces a row by its softmax: exp(x - max) / sum. An empty row is
// left alone.
void SoftmaxInPlace(absl::Span<float> row);

// Row sums in double for layer normalization (models/gpt/ops.h): the values are
// promoted to f64 lanes and summed in several accumulators, then across lanes in lane
// order, then the scalar tail, so the bits depend on the length and the vector width
// only (not on threads). Against a sequential double sum they differ by a few double
// roundings, far below the one f32 rounding of the results built from them.
//
// SumAsDouble returns the sum of x.
double SumAsDouble(absl::Span<const float> x);

// SquaredDeviationSum returns the sum of (x_i - mean)^2, each difference rounded to f32
// (as f32 code computes it) and squared in double.
double SquaredDeviationSum(absl::Span<const float> x, float mean);

// LayerNormGradientSums returns, with g_i = dy_i * gamma_i and xhat_i = (x_i - mean) *
// rstd computed in f32, the sums of g_i and of g_i * xhat_i in double.
// InvalidArgument naming the sizes when dy or gamma is not x's size.
struct NormGradientSums {
  double g = 0.0;
  double g_xhat = 0.0;
};
absl::StatusOr<NormGradientSums> LayerNormGradientSums(absl::Span<const float> x,
                                                       absl::Span<const float> dy,
                                                       absl::Span<const float> gamma,
                                                       float mean, float rstd);

// The element passes of a layer norm row, in f32 lanes: each operation rounds to f32
// as in the formula's order (where the target has fused multiply-add the compiler may
// fuse a multiply with the add after it, one rounding fewer). InvalidArgument naming
// the sizes when the spans differ in size.
//
// NormalizeRow: y_i = (x_i - mean) * rstd * gamma_i + beta_i.
absl::Status NormalizeRow(absl::Span<const float> x, float mean, float rstd,
                          absl::Span<const float> gamma, absl::Span<const float> beta,
                          absl::Span<float> y);
// NormRowBackward: dx_i = rstd * (dy_i * gamma_i - mean_g - xhat_i * mean_g_xhat),
// xhat_i = (x_i - mean) * rstd.
absl::Status NormRowBackward(absl::Span<const float> x, absl::Span<const float> dy,
                             absl::Span<const float> gamma, float mean, float rstd, float mean_g,
                             float mean_g_xhat, absl::Span<float> dx);
// AccumulateNormParamGrads: dgamma_i += dy_i * xhat_i and dbeta_i += dy_i, in double.
absl::Status AccumulateNormParamGrads(absl::Span<const float> x, absl::Span<const float> dy,
                                      float mean, float rstd, absl::Span<double> dgamma,
                                      absl::Span<double> dbeta);

// AddRowsInto adds columns column .. column + out.size() of every row of g (rows of
// `stride` values) into out: out[j] += g[r * stride + column + j], the rows in order,
// so the bits equal the plain loop's on every target. It is the bias gradient (the
// column sums of an output gradient), a part of the columns per thread.
// InvalidArgument naming the sizes when g is not whole rows or the columns are not
// within a row.
absl::Status AddRowsInto(absl::Span<const float> g, size_t stride, size_t column,
                         absl::Span<float> out);

// VectorMathTarget names the instruction set the kernels dispatch to on this CPU
// ("AVX3_ZEN4", "AVX3", "AVX2", "SSE4", "EMU128", ...), for reports.
absl::string_view VectorMathTarget();

}  // namespace loom

#endif  // LOOM_CORE_VECTOR_MATH_H_
