#include "models/gpt/gpt_config.h"

#include "absl/strings/str_cat.h"

namespace loom {

namespace {

absl::Status Invalid(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("GptConfig: ", what));
}

}  // namespace

absl::Status GptConfig::Validate(int tp_size) const {
  if (vocab < 2) return Invalid(absl::StrCat("vocab ", vocab, " must be >= 2"));
  if (seq_len < 1) return Invalid(absl::StrCat("seq_len ", seq_len, " must be >= 1"));
  if (hidden < 1) return Invalid(absl::StrCat("hidden ", hidden, " must be >= 1"));
  if (heads < 1) return Invalid(absl::StrCat("heads ", heads, " must be >= 1"));
  if (layers < 0) return Invalid(absl::StrCat("layers ", layers, " must be >= 0"));
  if (ffn < 0) return Invalid(absl::StrCat("ffn ", ffn, " must be >= 0 (0 means 4 * hidden)"));
  if (!(layer_norm_eps > 0.0f)) {
    return Invalid(absl::StrCat("layer_norm_eps ", layer_norm_eps, " must be > 0"));
  }
  if (hidden % heads != 0) {
    return Invalid(absl::StrCat("heads ", heads, " must divide hidden ", hidden));
  }
  if (tp_size < 1) return Invalid(absl::StrCat("tp ", tp_size, " must be >= 1"));
  if (heads % tp_size != 0) {
    return Invalid(absl::StrCat("heads ", heads, " must be a multiple of tp ", tp_size,
                                " (every rank holds the same number of whole heads)"));
  }
  if (vocab < tp_size) {
    return Invalid(absl::StrCat("vocab ", vocab, " is smaller than tp ", tp_size));
  }
  if (ffn_size() < tp_size) {
    return Invalid(absl::StrCat("ffn ", ffn_size(), " is smaller than tp ", tp_size));
  }
  return absl::OkStatus();
}

int64_t GptConfig::ParameterCount() const {
  const int64_t h = hidden, f = ffn_size();
  const int64_t block = 2 * h                 // ln1 gamma, beta
                        + 3 * h * h + 3 * h  // qkv
                        + h * h + h          // attention output projection
                        + 2 * h              // ln2
                        + h * f + f          // fc1
                        + f * h + h;         // fc2
  return vocab * h + seq_len * h + layers * block + 2 * h + vocab * h;
}

int64_t GptConfig::ProductParameterCount() const {
  const int64_t h = hidden, f = ffn_size();
  return layers * (4 * h * h + 2 * h * f) + vocab * h;
}

int64_t GptConfig::EmbeddingTableParameterCount() const { return (vocab + seq_len) * hidden; }

double GptConfig::TrainingFlopsPerToken() const {
  return 6.0 * static_cast<double>(ParameterCount() - EmbeddingTableParameterCount()) +
         12.0 * static_cast<double>(layers) * static_cast<double>(seq_len) *
             static_cast<double>(hidden);
}

std::string GptConfig::ToString() const {
  return absl::StrCat("V=", vocab, " seq=", seq_len, " hidden=", hidden, " heads=", heads,
                      " layers=", layers, " ffn=", ffn_size(), " seed=", seed);
}

}  // namespace loom
