// Test helpers of the parallel layers (testonly): tensor-parallel ranks as threads
// over inproc, seeded values, and the comparison against an unsharded reference.
//
// Bound: ExpectClose accepts |actual - expected| <= rel * max(1, max |expected|).
// References are computed in double; the layers accumulate in f32 in another
// order (BLAS blocking, the ranks' partial sums), so the difference is a few f32
// roundings per accumulated term: about k * 2^-24 relative for k-term sums. The
// tests use k <= 64 terms of magnitude <= 1, so rel = 1e-5 (~170 ulps) holds with
// margin and still catches any wrong element, shard offset or missing reduction.
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_TP_TESTING_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_TP_TESTING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {
namespace tp_layers_testing {

inline constexpr double kRelBound = 1e-5;

// RunTp runs body(rank's tp communicator) on `tp` threads over a fresh inproc group
// and returns every rank's status.
std::vector<absl::Status> RunTp(int tp, const std::function<absl::Status(Communicator&)>& body);

// A rank of a tp x cp grid (tp fastest: world rank = cp_rank * tp + tp_rank) with its
// two groups' communicators.
struct TpCpRank {
  int world_rank = 0, tp_rank = 0, cp_rank = 0;
  Communicator* tp = nullptr;
  Communicator* cp = nullptr;
};

// RunTpCp runs body on tp * cp threads, each with its tp group (the ranks of its cp
// coordinate) and its cp group (the ranks of its tp coordinate), split from one
// inproc world; returns every world rank's status.
std::vector<absl::Status> RunTpCp(int tp, int cp,
                                  const std::function<absl::Status(const TpCpRank&)>& body);

// TpCpCase: one parameter of a tp x cp test (a layer or a model under context
// parallelism against cp = 1), and its GoogleTest name ("tp2_cp3_zigzag_s37").
struct TpCpCase {
  int tp;
  int cp;
  CpLayout layout;
  int64_t seq;
};
std::string TpCpCaseName(const TpCpCase& c);

// ExpectAllOk expects every status OK, naming the rank.
void ExpectAllOk(const std::vector<absl::Status>& results);

// RandomValues returns n values uniform in [-1, 1) from std::mt19937(seed).
std::vector<float> RandomValues(int64_t n, uint32_t seed);

// RandomTensor returns an f32 tensor of `shape` filled by RandomValues.
Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed);

// RoundedToStorage returns t's values as stored in `dtype` and widened back
// (bf16 rounds; f32 is unchanged): what a layer with that storage computes with.
std::vector<double> RoundedToStorage(const Tensor& t, DType dtype);

// Values returns t's values widened to double.
std::vector<double> Values(const Tensor& t);

// ExpectClose checks actual against expected elementwise within the bound above.
void ExpectClose(absl::Span<const float> actual, absl::Span<const double> expected,
                 const std::string& what, double rel = kRelBound);
void ExpectClose(const Tensor& actual, absl::Span<const double> expected, const std::string& what,
                 double rel = kRelBound);

// SliceRows returns rows [offset, offset + length) of a [rows, width] matrix.
std::vector<double> SliceRows(absl::Span<const double> m, int64_t width, int64_t offset,
                              int64_t length);
// SliceCols returns columns [offset, offset + length) of a [rows, width] matrix.
std::vector<double> SliceCols(absl::Span<const double> m, int64_t width, int64_t offset,
                              int64_t length);

// MatMulNT returns a [m,k] x b[n,k]^T in double (plain loops: the tests' reference).
std::vector<double> MatMulNT(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k);
// MatMulNN returns a [m,k] x b[k,n]; MatMulTN returns a[k,m]^T x b[k,n].
std::vector<double> MatMulNN(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k);
std::vector<double> MatMulTN(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k);

// LinearReference: an unsharded linear layer y = x W^T + b in double, and its
// gradients for output gradient dy: dx = dy W, dW = dy^T x, db = column sums of dy.
// W [out, in] and b [out] are rounded to `weight_dtype` first, as the layers store
// them; with bf16, x and dy are too where they enter a product (a bf16 layer's
// products round their inputs, gemm.h's kBf16), so the layers stay within the f32
// bound above. x is [..., in] and dy [..., out], flattened to rows.
struct LinearReference {
  std::vector<double> y, dx, dw, db;
};
LinearReference DenseLinearReference(const Tensor& w, const Tensor& b, const Tensor& x,
                                     const Tensor& dy, DType weight_dtype);

// RuleName returns "chunk" or "balanced" for test names.
std::string RuleName(ShardRule rule);

}  // namespace tp_layers_testing
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_TP_TESTING_H_
