// Batches of the GPT's training data, whatever their source (MarkovData's chain,
// ByteCorpus's text): how a step's global batch of sequences is cut into
// microbatches and data-parallel ranks, and the tokens/targets a stage consumes.
//
// A step's global batch is dp_size * num_microbatches * micro_batch consecutive
// sequence indices; data-parallel rank r's microbatch m of step t holds
//   t * global + (r * num_microbatches + m) * micro_batch + [0, micro_batch),
// so the ranks see different data and together exactly the single-rank batch (dp rank
// 0 of a layout with dp_size * num_microbatches microbatches). A data source maps a
// sequence index to its tokens as a function of its seed and the index only, so a
// mesh of any shape with the same global batch sees the same data at every step,
// and a resumed run sees what the uninterrupted one saw.
//
// Example:
//   BatchLayout layout{.micro_batch = 4, .num_microbatches = 2, .dp_size = 2};
//   FirstSequenceOf("MarkovData", layout, /*step=*/3, /*microbatch=*/1, /*dp_rank=*/1)
//   // == 3 * 16 + (1 * 2 + 1) * 4 == 60
//   FirstSequenceOf("MarkovData", layout, 0, 2, 0)
//   // InvalidArgument: "MarkovData: microbatch 2 is outside [0, 2)"
#ifndef LOOM_MODELS_GPT_BATCH_H_
#define LOOM_MODELS_GPT_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// How a step's sequences are cut into microbatches and data-parallel ranks.
struct BatchLayout {
  int64_t micro_batch = 1;  // sequences per microbatch
  int64_t num_microbatches = 1;
  int64_t dp_size = 1;
};

// A batch of `batch` sequences: tokens and next-token targets, [batch, seq_len]
// row-major.
struct GptBatch {
  int64_t batch = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> tokens;
  std::vector<int64_t> targets;
};

// FirstSequenceOf: the index of the first sequence of (step, microbatch, dp_rank), as
// above. InvalidArgument starting with `source` for a layout field below 1, a
// negative step, a microbatch or rank outside the layout, or an index past int64.
absl::StatusOr<int64_t> FirstSequenceOf(absl::string_view source, const BatchLayout& layout,
                                        int64_t step, int64_t microbatch, int64_t dp_rank);

}  // namespace loom

#endif  // LOOM_MODELS_GPT_BATCH_H_
