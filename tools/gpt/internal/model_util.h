// Private helpers of the GPT model: gradient accumulation, parameter entries,
// tensors from value vectors.
#ifndef LOOM_TOOLS_GPT_INTERNAL_MODEL_UTIL_H_
#define LOOM_TOOLS_GPT_INTERNAL_MODEL_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor_parallel/tensor.h"
#include "tools/gpt/gpt_parameter.h"

namespace loom {
namespace train_internal {

// AddInto adds `grad` (f32, same element count) into `accum`, allocating it at
// the right size on first use. Internal when the counts differ.
absl::Status AddInto(std::vector<float>& accum, const Tensor& grad);
void AddInto(std::vector<float>& accum, absl::Span<const float> grad);

// ParameterOf returns the entry for a layer's f32 tensor and its accumulator
// (sized to the tensor, zero-filled, if still empty).
GptParameter ParameterOf(std::string name, Tensor& values, std::vector<float>& grad,
                         std::vector<int64_t> full_shape, TpSplit split, int64_t parts = 1);
// ParameterOf for a parameter the model holds as a vector, replicated on all ranks,
// of `shape` ({values.size()} when empty).
GptParameter ParameterOf(std::string name, std::vector<float>& values, std::vector<float>& grad,
                         std::vector<int64_t> shape = {});

// ToTensor returns an f32 tensor of `shape` holding `values`.
absl::StatusOr<Tensor> ToTensor(std::vector<int64_t> shape, absl::Span<const float> values);

// Values returns the f32 values of a tensor (Internal for another dtype).
absl::StatusOr<absl::Span<const float>> Values(const Tensor& t);

// Add returns a + b elementwise (equal sizes).
std::vector<float> Add(absl::Span<const float> a, absl::Span<const float> b);

// Bytes returns the bytes a vector holds.
template <typename T>
size_t Bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

// Free releases a vector's memory.
template <typename T>
void Free(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

}  // namespace train_internal
}  // namespace loom

#endif  // LOOM_TOOLS_GPT_INTERNAL_MODEL_UTIL_H_
