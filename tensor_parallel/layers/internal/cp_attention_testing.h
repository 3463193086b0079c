// Test helpers of the context-parallel attention ops (ring_attention_test,
// ulysses_attention_test; testonly): a double-precision attention of the whole
// sequence, a rank's rows of a sequence-major matrix by its CpChunks and back, and the
// bounds the ops are held to.
//
// Bounds: relative to max(1, the reference's largest magnitude), through
// tp_testing.h's ExpectClose. Flash attention's online softmax rescales partial sums,
// so f32 results differ from the reference in the last places; flash_attention_test
// holds the kernel itself to the same 2e-5 (out, lse) and 5e-5 (gradients, sums of
// twice as many rounded products), and a cp op adds a merge or a copy at most.
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_TESTING_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_TESTING_H_

#include <cstdint>
#include <vector>

#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace tp_layers_testing {

// Bounds on |ring or a2a - the double-precision whole-sequence attention|, relative to
// the largest magnitude of the quantity: 1e-6, the bound, for the output, the
// log-sum-exp and the gradients alike. Measured at most 4.1e-7 (ulysses_attention_test's
// gradients; the ring's stay under 2e-7), so the bound has a 2.4x margin for another
// vector width's summation order.
inline constexpr double kOutputBound = 1e-6;
inline constexpr double kGradBound = 1e-6;

// One head's attention of a whole sequence and its gradients, in double.
struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};

// DenseAttention computes softmax(Q K^T / sqrt(d) + mask) V of q, k, v [s, d] with
// every score and the whole softmax written out, and the usual backward for
// dL/d(out) = dout [s, d].
AttentionReference DenseAttention(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<float>& dout,
                                  int64_t s, int64_t d, bool causal);

// GatherChunks returns the rows of a [s, width] matrix at a rank's positions, in the
// rank's row order (chunk after chunk).
std::vector<float> GatherChunks(const std::vector<float>& m,
                                const std::vector<PositionRange>& chunks, int64_t width);

// ScatterChunks writes a rank's rows back to their positions in a [s, width] matrix.
void ScatterChunks(const std::vector<float>& rows, const std::vector<PositionRange>& chunks,
                   int64_t width, std::vector<float>& m);

// ChunkRows returns the rows a rank's chunks hold.
int64_t ChunkRows(const std::vector<PositionRange>& chunks);

}  // namespace tp_layers_testing
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_TESTING_H_
