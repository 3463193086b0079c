// The FLOPs of a GPT-style transformer step, counted as the field counts them, so that
// a prediction compares with published tables:
//  - MegatronFlopsPerIteration: the Megatron-LM paper's count (Narayanan et al., 2021,
//    equation 3), which includes the recomputed forward under full recompute:
//      96 B s l h^2 (1 + s / (6h) + V / (16 l h))      (ffn = 4h, full recompute)
//    generalized here to any ffn width and to no recompute (72 instead of 96). Its
//    "achieved TFLOP/s per GPU" is this count over the step time and the GPUs.
//  - ModelFlopsPerToken: 6N + 12 l h s (PaLM, Chowdhery et al., 2022, appendix B): the
//    model FLOPs utilization (MFU) numerator, which does not count recomputation.
//
// Example (the Megatron paper's 1.7B row: 24 layers, hidden 2304, 24 heads, seq 2048,
// vocab 51200, batch 512):
//   TransformerShape shape;
//   shape.layers = 24; shape.hidden = 2304; shape.heads = 24;
//   shape.seq_len = 2048; shape.vocab = 51200;
//   MegatronFlopsPerIteration(shape, 512, Recompute::kFull);   // 1.5466e16
//   ParameterCount(shape);                                      // 1.647e9
#ifndef LOOM_TOOLS_PLANNER_MODEL_FLOPS_H_
#define LOOM_TOOLS_PLANNER_MODEL_FLOPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "topology/recompute.h"

namespace loom {
namespace planner {

// TransformerShape: a GPT (pre-LN blocks of attention and an MLP, tied embedding).
struct TransformerShape {
  int64_t layers = 0;
  int64_t hidden = 0;   // h
  int64_t heads = 0;    // a; divides hidden
  int64_t seq_len = 0;  // s
  int64_t vocab = 0;    // V
  int64_t ffn = 0;      // the MLP's inner width; 0 means 4 * hidden
  // Grouped-query attention (Llama 2 70B, Llama 3): heads sharing each key and value
  // head; 0 means heads (multi-head attention). Divides heads.
  int64_t kv_heads = 0;
  bool gated_mlp = false;       // SwiGLU: three h x ffn matrices instead of two
  bool tied_embeddings = true;  // the head reuses the token embedding (GPT-2; not Loom's GptModel)
};

// ValidateShape returns InvalidArgument naming the first field out of range: a size
// below 1 (ffn or kv_heads below 0), heads not dividing hidden, or kv_heads not
// dividing heads.
absl::Status ValidateShape(const TransformerShape& shape);

// FfnWidth returns shape.ffn, or 4 * hidden when it is 0.
int64_t FfnWidth(const TransformerShape& shape);

// KvHeads returns shape.kv_heads, or heads when it is 0.
int64_t KvHeads(const TransformerShape& shape);

// LayerMatrixParameters returns the weights of one layer's matrix products: the
// query and output projections 2h^2, the keys and values 2h^2 kv_heads / heads, the
// MLP 2 h ffn (3 h ffn gated). A token's forward through the layer's products is
// twice this in FLOPs.
double LayerMatrixParameters(const TransformerShape& shape);

// ParameterCount returns the parameters: per layer the matrices above, the
// attention's 4h and the MLP's ffn + h biases and two layer norms (4h), plus the token
// and position embeddings (V h + s h; another V h untied) and the final layer norm
// (2h).
double ParameterCount(const TransformerShape& shape);

// MegatronFlopsPerIteration returns the FLOPs of one iteration over `global_batch`
// sequences as the Megatron-LM paper counts them: matrix products only, forward 2 FLOPs
// per multiply-add, backward twice the forward, and (kFull) the forward once more.
// Per token and layer the forward is 2 LayerMatrixParameters (8h^2 + 4 h ffn for a
// GPT) + 4 s h (scores and context); the logits add 2 h V per token, not recomputed. kSelective
// recomputes the attention scores and context only (4 s h per token and layer).
double MegatronFlopsPerIteration(const TransformerShape& shape, int64_t global_batch,
                                 Recompute recompute);

// EmbeddingTableParameters returns the parameters a token looks up rather than
// multiplies: the position table (s h) and, untied, the token table (V h; tied, the
// table is also the head, a product).
double EmbeddingTableParameters(const TransformerShape& shape);

// ModelFlopsPerToken returns 6 N + 12 l h s with N = ParameterCount less
// EmbeddingTableParameters (as Megatron's count, whose V / (12 h l) term is the head
// alone): the FLOPs a step needs per token, with no recomputation counted (the MFU
// numerator; //tools:train's is the same, GptConfig::TrainingFlopsPerToken).
double ModelFlopsPerToken(const TransformerShape& shape);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_MODEL_FLOPS_H_
