#include "models/gpt/internal/train_testing.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/match.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_init.h"
#include "core/tensor.h"

namespace loom {
namespace train_testing {

absl::Status RandomizeParameters(absl::Span<GptParameter> params, uint64_t seed, float scale,
                                 int tp_size, int tp_rank) {
  for (GptParameter& p : params) {
    const float mean = absl::EndsWith(p.name, "gamma") ? 1.0f : 0.0f;
    const std::vector<float> full =
        SeededValues(seed, p.name, NumElements(p.full_shape), scale / std::sqrt(3.0f), mean);
    absl::StatusOr<std::vector<float>> shard = ShardOf(p, full, tp_size, tp_rank);
    if (!shard.ok()) return shard.status();
    if (shard->size() != p.values.size()) {
      return absl::InternalError(p.name + ": shard size differs from the parameter's");
    }
    std::copy(shard->begin(), shard->end(), p.values.begin());
  }
  return absl::OkStatus();
}

GptConfig TinyConfig() {
  GptConfig config;
  config.vocab = 13;
  config.seq_len = 5;
  config.hidden = 8;
  config.heads = 2;
  config.layers = 2;
  config.ffn = 12;
  config.seed = 3;
  return config;
}

std::vector<int64_t> SeededIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = static_cast<int64_t>(SplitMix64(seed * 0x9e3779b97f4a7c15ULL + i) %
                                  static_cast<uint64_t>(vocab));
  }
  return ids;
}

void ExpectClose(absl::Span<const float> actual, absl::Span<const float> expected,
                 const std::string& what, double rel, double floor) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = floor;
  for (const float e : expected) scale = std::max(scale, std::fabs(static_cast<double>(e)));
  const double bound = rel * scale;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - static_cast<double>(expected[i]));
    if (!(diff <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", expected " << expected[i]
                    << " (|diff| " << diff << " > bound " << bound << ")";
    }
  }
}

}  // namespace train_testing
}  // namespace loom
