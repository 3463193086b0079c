#include "tools/planner/model_flops.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "topology/recompute.h"

namespace loom {
namespace planner {
namespace {

absl::Status BelowOne(const char* field, int64_t value) {
  return absl::InvalidArgumentError(
      absl::StrCat("model: ", field, " is ", value, "; it must be at least 1"));
}

}  // namespace

absl::Status ValidateShape(const TransformerShape& s) {
  if (s.layers < 1) return BelowOne("layers", s.layers);
  if (s.hidden < 1) return BelowOne("hidden", s.hidden);
  if (s.heads < 1) return BelowOne("heads", s.heads);
  if (s.seq_len < 1) return BelowOne("seq_len", s.seq_len);
  if (s.vocab < 1) return BelowOne("vocab", s.vocab);
  if (s.ffn < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: ffn is ", s.ffn, "; it must be at least 1 (or 0 for 4 * hidden)"));
  }
  if (s.hidden % s.heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model: heads ", s.heads,
                                                   " do not divide hidden ", s.hidden));
  }
  if (s.kv_heads < 0 || (s.kv_heads > 0 && s.heads % s.kv_heads != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("model: kv_heads ", s.kv_heads,
                                                   " do not divide the ", s.heads, " heads"));
  }
  return absl::OkStatus();
}

int64_t FfnWidth(const TransformerShape& s) { return s.ffn > 0 ? s.ffn : 4 * s.hidden; }

int64_t KvHeads(const TransformerShape& s) { return s.kv_heads > 0 ? s.kv_heads : s.heads; }

double LayerMatrixParameters(const TransformerShape& s) {
  const double h = static_cast<double>(s.hidden);
  const double f = static_cast<double>(FfnWidth(s));
  const double kv_share = static_cast<double>(KvHeads(s)) / static_cast<double>(s.heads);
  return 2 * h * h + 2 * h * h * kv_share + (s.gated_mlp ? 3 : 2) * h * f;
}

double ParameterCount(const TransformerShape& s) {
  const double h = static_cast<double>(s.hidden);
  const double f = static_cast<double>(FfnWidth(s));
  const double per_layer = LayerMatrixParameters(s) + 4 * h + f + h + 4 * h;
  const double embeddings = (static_cast<double>(s.vocab) * (s.tied_embeddings ? 1 : 2) +
                             static_cast<double>(s.seq_len)) * h;
  return static_cast<double>(s.layers) * per_layer + embeddings + 2 * h;
}

double MegatronFlopsPerIteration(const TransformerShape& s, int64_t global_batch,
                                 Recompute recompute) {
  const double h = static_cast<double>(s.hidden);
  const double seq = static_cast<double>(s.seq_len);
  const double tokens = static_cast<double>(global_batch) * seq;
  const double dense = 2 * LayerMatrixParameters(s);  // per token and layer, forward
  const double attention = 4 * seq * h;
  double passes_dense = 3;  // forward, and backward at twice the forward
  double passes_attention = 3;
  if (recompute == Recompute::kFull) {
    passes_dense = 4;
    passes_attention = 4;
  } else if (recompute == Recompute::kSelective) {
    passes_attention = 4;
  }
  const double layers = static_cast<double>(s.layers);
  const double logits = 3 * 2 * h * static_cast<double>(s.vocab);
  return tokens * (layers * (passes_dense * dense + passes_attention * attention) + logits);
}

double EmbeddingTableParameters(const TransformerShape& s) {
  // A tied table is the head as well, a product: only the positions are left out.
  const double tables = static_cast<double>(s.seq_len) +
                        (s.tied_embeddings ? 0.0 : static_cast<double>(s.vocab));
  return tables * static_cast<double>(s.hidden);
}

double ModelFlopsPerToken(const TransformerShape& s) {
  return 6 * (ParameterCount(s) - EmbeddingTableParameters(s)) +
         12 * static_cast<double>(s.layers) *
                                      static_cast<double>(s.hidden) *
                                      static_cast<double>(s.seq_len);
}

}  // namespace planner
}  // namespace loom
