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
#include "core/tensor.h"

namespace loom {
namespace gpt_internal {

// GradAccumulator: one parameter's gradient accumulator, zeroed memory of its own.
// view() is the floats; a move keeps it valid.
class GradAccumulator {
 public:
  GradAccumulator() = default;
  GradAccumulator(GradAccumulator&&) = default;
  GradAccumulator& operator=(GradAccumulator&&) = default;
  GradAccumulator(const GradAccumulator&) = delete;
  GradAccumulator& operator=(const GradAccumulator&) = delete;

  absl::Span<float> view() const { return view_; }
  size_t size() const { return view_.size(); }

  // Resize gives the accumulator n zeroed floats (nothing when it has n already).
  absl::Status Resize(size_t n);

 private:
  std::vector<float> own_;
  absl::Span<float> view_;
};

// AddInto adds `grad` (f32, same element count) into `accum`, sizing it on first
// use. Internal when the counts differ.
absl::Status AddInto(GradAccumulator& accum, const Tensor& grad);
absl::Status AddInto(GradAccumulator& accum, absl::Span<const float> grad);

// ParameterList: a model's parameter entries, in the model's order, beside const
// views of the values its layers were created with. The entries' `values` are
// empty: the model's parameter source holds them (own_parameter_store.h copies
// `initial` when the model owns its weights).
struct ParameterList {
  std::vector<GptParameter> params;
  std::vector<absl::Span<const float>> initial;
};

// AppendParameter appends the entry for a layer's f32 tensor and its accumulator
// (sized to the tensor, zero-filled, if still empty).
void AppendParameter(ParameterList& out, std::string name, const Tensor& values,
                     GradAccumulator& grad, std::vector<int64_t> full_shape, TpSplit split,
                     int64_t parts = 1);
// AppendParameter for a parameter replicated on all ranks, of `shape`
// ({values.size()} when empty).
void AppendParameter(ParameterList& out, std::string name, absl::Span<const float> values,
                     GradAccumulator& grad, std::vector<int64_t> shape = {});

// ToTensor returns an f32 tensor of `shape` holding `values`.
absl::StatusOr<Tensor> ToTensor(std::vector<int64_t> shape, absl::Span<const float> values);

// Values returns the f32 values of a tensor (Internal for another dtype).
absl::StatusOr<absl::Span<const float>> Values(const Tensor& t);

// Add returns a + b elementwise (equal sizes).
std::vector<float> Add(absl::Span<const float> a, absl::Span<const float> b);

// Add writes a + b elementwise into out (equal sizes; out may be a or b).
void Add(absl::Span<const float> a, absl::Span<const float> b, absl::Span<float> out);

// Activation: an uninitialized f32 tensor and its values, for a pass that writes
// every element (the block's outputs, written in place instead of copied in).
struct Activation {
  Tensor tensor;
  absl::Span<float> values;
};
absl::StatusOr<Activation> NewActivation(std::vector<int64_t> shape);

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

}  // namespace gpt_internal
}  // namespace loom

#endif  // LOOM_MODELS_GPT_INTERNAL_MODEL_UTIL_H_
