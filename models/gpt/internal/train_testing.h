// Test helpers of models/gpt (testonly): tensor-parallel ranks as threads over
// inproc, seeded parameter values that are the same at every tp size, and the
// relative comparison bound.
#ifndef LOOM_MODELS_GPT_INTERNAL_TRAIN_TESTING_H_
#define LOOM_MODELS_GPT_INTERNAL_TRAIN_TESTING_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "tensor_parallel/layers/internal/tp_testing.h"

namespace loom {
namespace train_testing {

// The layers' harness: tp ranks as threads over inproc, and every status OK.
using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::RunTp;

// RandomizeParameters overwrites every parameter with seeded values uniform in
// [-scale, scale) (layer-norm gains around 1): this rank's shard of a full tensor
// that depends on (seed, name) only, so models of any tp size agree.
absl::Status RandomizeParameters(absl::Span<GptParameter> params, uint64_t seed, float scale,
                                 int tp_size, int tp_rank);

// TinyConfig: the small model the unit tests share (V=13, seq 5, hidden 8, 2
// heads, 2 layers, ffn 12, seed 3): every code path, milliseconds per step.
GptConfig TinyConfig();

// SeededIds returns n ids in [0, vocab) from (seed).
std::vector<int64_t> SeededIds(int64_t n, int64_t vocab, uint64_t seed);

// ExpectClose checks |actual - expected| <= rel * max |expected| (at least `floor`)
// elementwise, naming `what` and the first few offenders.
void ExpectClose(absl::Span<const float> actual, absl::Span<const float> expected,
                 const std::string& what, double rel, double floor = 0.0);

}  // namespace train_testing
}  // namespace loom

#endif  // LOOM_MODELS_GPT_INTERNAL_TRAIN_TESTING_H_
