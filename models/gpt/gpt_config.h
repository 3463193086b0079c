// GptConfig: the shape of the small GPT-style decoder of //tools:train (gpt_model.h):
// vocabulary, sequence length, width, heads, blocks, MLP width and the seed of its
// initial parameters. Validate checks it against a tensor-parallel group size.
//
// Example:
//   GptConfig config;                 // V=64, seq=32, hidden=64, heads=4, layers=4
//   config.ffn_size();                // 256: ffn = 0 means 4 * hidden
//   config.Validate(/*tp_size=*/2);   // OK
//   config.heads = 3;
//   config.Validate(1);
//   // InvalidArgument: "GptConfig: heads 3 must divide hidden 64"
//   config.heads = 2;
//   config.Validate(4);
//   // InvalidArgument: "GptConfig: heads 2 must be a multiple of tp 4 ..."
#ifndef LOOM_MODELS_GPT_GPT_CONFIG_H_
#define LOOM_MODELS_GPT_GPT_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace loom {

struct GptConfig {
  int64_t vocab = 64;
  int64_t seq_len = 32;
  int64_t hidden = 64;
  int64_t heads = 4;
  int64_t layers = 4;
  // Width of each block's MLP; 0 means 4 * hidden.
  int64_t ffn = 0;
  // Seeds the initial parameters (gpt_init.h): the same seed gives the same model
  // at every tensor- and pipeline-parallel size.
  uint64_t seed = 1;
  float layer_norm_eps = 1e-5f;

  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * hidden; }
  int64_t head_dim() const { return heads > 0 ? hidden / heads : 0; }

  // Validate returns InvalidArgument naming the values when a size is out of range
  // (vocab < 2, seq_len, hidden or heads < 1, layers or ffn < 0, eps not positive),
  // heads does not divide hidden, tp_size < 1, heads is not a multiple of tp_size
  // (each rank holds whole heads, the same number on every rank), or the vocabulary
  // or the MLP width is smaller than tp_size (every rank holds a piece).
  absl::Status Validate(int tp_size = 1) const;

  // ParameterCount returns N, every parameter of the whole model (all tp shards
  // together): token and position embeddings, per block two layer norms, the QKV and
  // output projections and the MLP (weights and biases), the final layer norm and
  // the head (no bias). 3,323,392 for V=256 seq=128 hidden=256 layers=4.
  int64_t ParameterCount() const;

  // EmbeddingTableParameterCount returns the token and position tables' parameters
  // (V h + T h): looked up, not multiplied. 98,304 for the model above.
  int64_t EmbeddingTableParameterCount() const;

  // TrainingFlopsPerToken returns the model FLOPs of one trained token, the figure
  // MFU is computed from (PaLM's appendix B): 6 N for the matrix products of forward
  // (2 N) and backward (4 N), plus 12 L T h for attention's scores and weighted sums
  // (QK^T and PV, forward and backward, T = seq_len). N leaves out the embedding
  // tables, as Megatron's count does (its V / (12 h L) term is the head alone): a
  // lookup is no arithmetic, and counting it let a large vocabulary push MFU past 1
  // (1.02 at V = 32768, hidden 512, 2 layers on 2 AVX2 cores). Recomputation is not
  // counted: it is work the hardware does, not the model. 20,923,392 for the model
  // above.
  double TrainingFlopsPerToken() const;

  // ProductParameterCount returns the parameters that multiply activations in a
  // matrix product (every block's four weight matrices and the LM head): 6 times it
  // is the GEMM share of TrainingFlopsPerToken (the rest: the attention scores'
  // 12 L T h, and the embeddings, norms and biases, which are not products).
  int64_t ProductParameterCount() const;

  // ToString returns e.g. "V=64 seq=32 hidden=64 heads=4 layers=4 ffn=256 seed=1".
  std::string ToString() const;
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_CONFIG_H_
