// Private helpers of the GPT model: gradient accumulation, parameter entries,
// tensors from value vectors.
#ifndef LOOM_MODELS_GPT_INTERNAL_MODEL_UTIL_H_
#define LOOM_MODELS_GPT_INTERNAL_MODEL_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/gpt/gpt_parameter.h"
#include "tensor_parallel/tensor.h"

namespace loom {
namespace train_internal {

// GradAccumulator: one parameter's gradient accumulator. It holds zeroed memory of
// its own until Bind moves it into memory the caller owns (the data-parallel
// all-reduce bucket, so that Backward adds where the all-reduce reads and nothing
// is copied in between). view() is the floats either way; a move keeps it valid.
class GradAccumulator {
 public:
  GradAccumulator() = default;
  GradAccumulator(GradAccumulator&&) = default;
  GradAccumulator& operator=(GradAccumulator&&) = default;
  GradAccumulator(const GradAccumulator&) = delete;
  GradAccumulator& operator=(const GradAccumulator&) = delete;

  absl::Span<float> view() const { return view_; }
  size_t size() const { return view_.size(); }
  bool bound() const { return own_.empty() && !view_.empty(); }

  // Resize gives an unbound accumulator n zeroed floats of its own; Internal for a
  // bound one of another size (its memory is the caller's).
  absl::Status Resize(size_t n);
  // Bind copies the values into `memory` (exactly size() floats, Internal
  // otherwise), views it from now on and frees its own memory.
  absl::Status Bind(absl::Span<float> memory);

 private:
  std::vector<float> own_;
  absl::Span<float> view_;
};

// AddInto adds `grad` (f32, same element count) into `accum`, sizing it on first
// use. Internal when the counts differ.
absl::Status AddInto(GradAccumulator& accum, const Tensor& grad);
absl::Status AddInto(GradAccumulator& accum, absl::Span<const float> grad);

// ParameterOf returns the entry for a layer's f32 tensor and its accumulator
// (sized to the tensor, zero-filled, if still empty).
GptParameter ParameterOf(std::string name, Tensor& values, GradAccumulator& grad,
                         std::vector<int64_t> full_shape, TpSplit split, int64_t parts = 1);
// ParameterOf for a parameter the model holds as a vector, replicated on all ranks,
// of `shape` ({values.size()} when empty).
GptParameter ParameterOf(std::string name, std::vector<float>& values, GradAccumulator& grad,
                         std::vector<int64_t> shape = {});

// BindGradients moves each accumulator in `accumulators` (any order) behind the
// gradient views of `params` into `memory`, params' gradients back to back in list
// order. InvalidArgument naming both counts when memory is not exactly their sum;
// Internal when a parameter's gradient is no accumulator of the list.
absl::Status BindGradients(absl::Span<const GptParameter> params,
                           absl::Span<GradAccumulator* const> accumulators,
                           absl::Span<float> memory);

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

#endif  // LOOM_MODELS_GPT_INTERNAL_MODEL_UTIL_H_
