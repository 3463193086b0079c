// Element-wise and row-wise operations of the GPT blocks that the tensor-parallel
// layers do not provide: layer normalization over the last dimension and GELU
// (tanh approximation), forward and backward, in f32. Every tensor-parallel rank
// runs them on the same replicated activations, so they need no communication.
//
// LayerNorm of a row x of width n:  mean = sum(x) / n,  var = sum((x - mean)^2) / n,
//   rstd = 1 / sqrt(var + eps),  xhat = (x - mean) * rstd,  y = xhat * gamma + beta.
// Its backward, with g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dgamma = sum over rows of dy * xhat,  dbeta = sum over rows of dy.
// Row sums are accumulated in double (vectorized, core/vector_math.h), so the result
// does not depend on the width's rounding more than one f32 rounding per output.
//
// GELU (tanh): y = 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2 / pi), vectorized
// through core/vector_math (its accuracy bounds are stated there).
//
// Example:
//   std::vector<float> x = {1, 2, 3, 4, 5, 6};               // 2 rows of width 3
//   LOOM_ASSIGN_OR_RETURN(LayerNormOutput ln,
//                         LayerNormForward(x, /*gamma=*/ones3, /*beta=*/zeros3, 1e-5f));
//   // ln.y ~ {-1.2247, 0, 1.2247, -1.2247, 0, 1.2247}; ln.mean = {2, 5}
//   LOOM_ASSIGN_OR_RETURN(LayerNormGrads g, LayerNormBackward(x, ones3, ln.mean, ln.rstd, dy));
//   std::vector<float> y = GeluForward({0.0f, 1.0f});        // {0, 0.84119}
//   LayerNormForward(x, /*gamma=*/{1, 1, 1, 1}, /*beta=*/{0, 0, 0, 0}, 1e-5f);
//   // InvalidArgument: "LayerNormForward: 6 values are not rows of gamma's width 4"
#ifndef LOOM_MODELS_GPT_OPS_H_
#define LOOM_MODELS_GPT_OPS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

struct LayerNormOutput {
  std::vector<float> y;     // [rows, n]
  std::vector<float> mean;  // [rows]
  std::vector<float> rstd;  // [rows]
};

struct LayerNormGrads {
  std::vector<float> dx;      // [rows, n]
  std::vector<float> dgamma;  // [n]
  std::vector<float> dbeta;   // [n]
};

// LayerNormForward normalizes each row of x (rows of gamma.size() values).
// InvalidArgument naming the sizes when gamma is empty, beta's size differs from
// gamma's, or x's size is not a multiple of it; or when eps is not positive.
absl::StatusOr<LayerNormOutput> LayerNormForward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> beta, float eps);

// LayerNormForward, writing y, mean and rstd into the caller's memory (a layer's
// output tensor: no copy). The same errors, and InvalidArgument naming the sizes
// when y is not x's size or mean and rstd not one per row.
absl::Status LayerNormForward(absl::Span<const float> x, absl::Span<const float> gamma,
                              absl::Span<const float> beta, float eps, absl::Span<float> y,
                              absl::Span<float> mean, absl::Span<float> rstd);

// LayerNormBackward returns the gradients for output gradient dy, from the input x
// and the mean and rstd LayerNormForward returned. InvalidArgument naming the
// sizes when they do not fit together.
absl::StatusOr<LayerNormGrads> LayerNormBackward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> mean,
                                                 absl::Span<const float> rstd,
                                                 absl::Span<const float> dy);

// LayerNormBackward, writing dx, dgamma and dbeta into the caller's memory (a layer's
// activation arena: nothing allocated a step). The same errors, and InvalidArgument
// naming the sizes when dx is not x's size or dgamma and dbeta not gamma's.
absl::Status LayerNormBackward(absl::Span<const float> x, absl::Span<const float> gamma,
                               absl::Span<const float> mean, absl::Span<const float> rstd,
                               absl::Span<const float> dy, absl::Span<float> dx,
                               absl::Span<float> dgamma, absl::Span<float> dbeta);

// GeluForward returns GELU (tanh approximation) of every element.
std::vector<float> GeluForward(absl::Span<const float> x);

// GeluForward writing into y; InvalidArgument naming both sizes when they differ.
absl::Status GeluForward(absl::Span<const float> x, absl::Span<float> y);

// GeluBackward returns dy * GELU'(x). InvalidArgument naming both sizes when they
// differ.
absl::StatusOr<std::vector<float>> GeluBackward(absl::Span<const float> x,
                                                absl::Span<const float> dy);

// GeluBackward writing into dx (which may be dy). InvalidArgument naming the sizes
// when they differ.
absl::Status GeluBackward(absl::Span<const float> x, absl::Span<const float> dy,
                          absl::Span<float> dx);

}  // namespace loom

#endif  // LOOM_MODELS_GPT_OPS_H_
