#include "models/gpt/markov_data.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "models/gpt/gpt_init.h"

namespace loom {

namespace {

constexpr char kName[] = "MarkovData";

// A counter-based stream: the i-th draw of stream `key`.
class Stream {
 public:
  explicit Stream(uint64_t key) : key_(key) {}
  uint64_t Next() { return SplitMix64(key_ + counter_++ * 0xd1b54a32d192ed03ULL); }
  // Uniform in [0, 1) with 53 bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  int64_t Below(int64_t n) {
    return static_cast<int64_t>(Uniform() * static_cast<double>(n)) % n;
  }

 private:
  uint64_t key_;
  uint64_t counter_ = 0;
};

}  // namespace

absl::StatusOr<MarkovData> MarkovData::Create(const MarkovOptions& options) {
  if (options.vocab < 2 || options.seq_len < 1 || options.branching < 1 ||
      options.branching > options.vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": vocab ", options.vocab, " (>= 2), seq_len ", options.seq_len,
                     " (>= 1) and branching ", options.branching, " (in [1, vocab]) out of range"));
  }
  MarkovData data;
  data.options_ = options;
  data.successors_.resize(static_cast<size_t>(options.vocab));
  for (int64_t v = 0; v < options.vocab; ++v) {
    Stream stream(SplitMix64(options.seed ^ HashName("successors")) + static_cast<uint64_t>(v));
    std::vector<int64_t>& next = data.successors_[static_cast<size_t>(v)];
    while (static_cast<int64_t>(next.size()) < options.branching) {
      const int64_t candidate = stream.Below(options.vocab);
      if (std::find(next.begin(), next.end(), candidate) == next.end()) next.push_back(candidate);
    }
  }
  double total = 0.0, weight = 1.0;
  for (int64_t k = 0; k < options.branching; ++k, weight /= 2.0) total += weight;
  double sum = 0.0;
  weight = 1.0;
  for (int64_t k = 0; k < options.branching; ++k, weight /= 2.0) {
    sum += weight / total;
    data.cumulative_.push_back(sum);
  }
  data.cumulative_.back() = 1.0;
  return data;
}

absl::StatusOr<GptBatch> MarkovData::Sequences(int64_t first, int64_t count) const {
  if (first < 0 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": sequences [", first, ", +", count, ") must not be negative"));
  }
  const int64_t s = options_.seq_len;
  GptBatch batch;
  batch.batch = count;
  batch.seq_len = s;
  batch.tokens.reserve(static_cast<size_t>(count * s));
  batch.targets.reserve(static_cast<size_t>(count * s));
  for (int64_t k = first; k < first + count; ++k) {
    Stream stream(SplitMix64(options_.seed ^ HashName("sequences")) ^
                  SplitMix64(static_cast<uint64_t>(k)));
    int64_t token = stream.Below(options_.vocab);
    for (int64_t i = 0; i < s; ++i) {
      const double u = stream.Uniform();
      const size_t rank = static_cast<size_t>(
          std::upper_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
      const std::vector<int64_t>& next = successors_[static_cast<size_t>(token)];
      const int64_t following = next[std::min(rank, next.size() - 1)];
      batch.tokens.push_back(token);
      batch.targets.push_back(following);
      token = following;
    }
  }
  return batch;
}

absl::StatusOr<GptBatch> MarkovData::Microbatch(const BatchLayout& layout, int64_t step,
                                                int64_t microbatch, int64_t dp_rank) const {
  absl::StatusOr<int64_t> first = FirstSequenceOf(kName, layout, step, microbatch, dp_rank);
  if (!first.ok()) return first.status();
  return Sequences(*first, layout.micro_batch);
}

double MarkovData::EntropyRate() const {
  double h = 0.0, previous = 0.0;
  for (const double c : cumulative_) {
    const double p = c - previous;
    previous = c;
    if (p > 0.0) h -= p * std::log(p);
  }
  return h;
}

}  // namespace loom
