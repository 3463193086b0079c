// MarkovData: seeded token sequences with learnable structure, the training data of
// //tools:train. Each token v of a vocabulary of V has `branching` distinct
// successors, drawn from the seed, taken with probabilities proportional to 1, 1/2,
// 1/4, ...; a sequence starts at a uniform token and follows the chain. A model that
// learns the successor table predicts the next token with a cross-entropy of
// EntropyRate() nats (0.956 for branching 3), far below the log(V) of a uniform
// guess (4.16 for V = 64).
//
// Sequence k is a function of (seed, k) only; a step's sequences are cut into
// microbatches and data-parallel ranks as batch.h says.
//
// Example:
//   MarkovOptions options;                 // V=64, seq=32, branching 3, seed 7
//   LOOM_ASSIGN_OR_RETURN(MarkovData data, MarkovData::Create(options));
//   BatchLayout layout;
//   layout.micro_batch = 4;
//   layout.num_microbatches = 2;
//   layout.dp_size = 2;
//   LOOM_ASSIGN_OR_RETURN(GptBatch b, data.Microbatch(layout, /*step=*/3, /*microbatch=*/1,
//                                                     /*dp_rank=*/1));
//   b.tokens.size();                        // 4 * 32; sequences 3*16 + 12 .. + 15
//   b.targets[0] == b.tokens[1];            // true: targets are the next tokens
//   data.Microbatch(layout, 0, 2, 0);
//   // InvalidArgument: "MarkovData: microbatch 2 is outside [0, 2)"
#ifndef LOOM_MODELS_GPT_MARKOV_DATA_H_
#define LOOM_MODELS_GPT_MARKOV_DATA_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "models/gpt/batch.h"

namespace loom {

struct MarkovOptions {
  int64_t vocab = 64;
  int64_t seq_len = 32;
  int64_t branching = 3;  // successors per token, in [1, vocab]
  uint64_t seed = 7;
};

class MarkovData {
 public:
  // Create draws the successor table. InvalidArgument naming the values for vocab
  // < 2, seq_len < 1 or branching outside [1, vocab].
  static absl::StatusOr<MarkovData> Create(const MarkovOptions& options);

  // Sequences returns sequences [first, first + count). InvalidArgument for a
  // negative first or count.
  absl::StatusOr<GptBatch> Sequences(int64_t first, int64_t count) const;

  // Microbatch returns the sequences of (step, microbatch, dp_rank) as above.
  // InvalidArgument naming the value for a layout field below 1, a negative step,
  // or a microbatch or rank outside the layout.
  absl::StatusOr<GptBatch> Microbatch(const BatchLayout& layout, int64_t step,
                                      int64_t microbatch, int64_t dp_rank) const;

  // EntropyRate returns the chain's next-token entropy in nats: the lowest
  // expected cross-entropy any model can reach.
  double EntropyRate() const;

  // Successors returns token v's successors, most likely first.
  const std::vector<int64_t>& Successors(int64_t v) const {
    return successors_[static_cast<size_t>(v)];
  }
  const MarkovOptions& options() const { return options_; }

 private:
  MarkovData() = default;

  MarkovOptions options_;
  std::vector<std::vector<int64_t>> successors_;
  std::vector<double> cumulative_;  // cumulative probabilities of successor ranks
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_MARKOV_DATA_H_
