// Seeded initial values of the GPT parameters, the same on every machine and at
// every parallel size: a parameter's values depend only on the model seed and the
// parameter's name (a counter-based generator, splitmix64 of (seed, name, index)),
// so each tensor-parallel rank cuts its shard from the same full tensor and each
// pipeline stage builds its blocks exactly as the whole model does.
//
// Scheme (GPT-2's, uniform instead of normal): weights with standard deviation 0.02,
// the residual projections' (attention output, MLP output) scaled by
// 1 / sqrt(2 * layers), position embeddings 0.01; biases 0; layer-norm gain 1.
//
// Example:
//   Tensor w = SeededTensor(/*seed=*/1, "blocks.0.mlp.fc.weight", {256, 64}, 0.02f);
//   // uniform in +-0.02 * sqrt(3), mean 0, standard deviation 0.02
//   SeededTensor(1, "final_ln.gamma", {64}, /*stddev=*/0.0f, /*mean=*/1.0f);   // all 1
#ifndef LOOM_MODELS_GPT_GPT_INIT_H_
#define LOOM_MODELS_GPT_GPT_INIT_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/tensor.h"

namespace loom {

// SeededValues returns n values uniform with the given mean and standard
// deviation, a function of (seed, name, index) only.
std::vector<float> SeededValues(uint64_t seed, absl::string_view name, int64_t n, float stddev,
                                float mean = 0.0f);

// SeededTensor returns an f32 tensor of `shape` holding SeededValues.
Tensor SeededTensor(uint64_t seed, absl::string_view name, std::vector<int64_t> shape,
                    float stddev, float mean = 0.0f);

// SplitMix64 is the generator's mixing function (also used by the data).
uint64_t SplitMix64(uint64_t x);

// HashName returns the 64-bit FNV-1a hash of `name`.
uint64_t HashName(absl::string_view name);

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_INIT_H_
