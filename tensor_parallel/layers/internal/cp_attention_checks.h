// Argument checks and buffer helpers shared by the context-parallel attention calls
// (ring_attention.h, ulysses_attention.h): each takes this rank's rows of every head
// and checks them the same way, so their errors read alike.
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_CHECKS_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace cp_attention_internal {

// The call being checked, for its messages: "RingAttention: k (head 1) is [5,2] but
// rank 0 of 2 holds [5,4]".
struct CpCall {
  const char* op = "";
  int rank = 0;
  int cp = 1;
  size_t heads = 0;  // a call of more than one head names the head in its messages
};

// CheckHeads returns InvalidArgument naming the head and the shapes unless every
// head's views are rows x d (views checked with CheckMatrixLayout too, because the
// callers slice them before flash attention sees them) and its lse has rows values.
absl::Status CheckHeads(absl::Span<const RingAttentionHead> heads, int64_t rows, int64_t d,
                        const CpCall& call);
absl::Status CheckHeads(absl::Span<const RingAttentionHeadGrad> heads, int64_t rows, int64_t d,
                        const CpCall& call);

// FlashOptionsOf returns the flash attention options of a context-parallel call.
FlashAttentionOptions FlashOptionsOf(const RingAttentionOptions& options);

// Fit grows a buffer to n values; a buffer already large enough is left alone, so
// steady-state calls allocate nothing.
std::vector<float>& Fit(std::vector<float>& buffer, size_t n);

// PackRows copies a view's rows into dense storage.
void PackRows(ConstMatrixView m, float* dst);

}  // namespace cp_attention_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_CP_ATTENTION_CHECKS_H_
