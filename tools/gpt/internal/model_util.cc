#include "tools/gpt/internal/model_util.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {
namespace train_internal {

absl::Status AddInto(std::vector<float>& accum, const Tensor& grad) {
  absl::StatusOr<absl::Span<const float>> g = grad.As<float>();
  if (!g.ok()) return absl::InternalError(absl::StrCat("gradient: ", g.status().message()));
  if (accum.empty()) accum.assign(g->size(), 0.0f);
  if (accum.size() != g->size()) {
    return absl::InternalError(absl::StrCat("gradient of ", g->size(),
                                            " values for an accumulator of ", accum.size()));
  }
  AddInto(accum, *g);
  return absl::OkStatus();
}

void AddInto(std::vector<float>& accum, absl::Span<const float> grad) {
  if (accum.empty()) accum.assign(grad.size(), 0.0f);
  for (size_t i = 0; i < grad.size() && i < accum.size(); ++i) accum[i] += grad[i];
}

GptParameter ParameterOf(std::string name, Tensor& values, std::vector<float>& grad,
                         std::vector<int64_t> full_shape, TpSplit split, int64_t parts) {
  if (grad.size() != static_cast<size_t>(values.numel())) {
    grad.assign(static_cast<size_t>(values.numel()), 0.0f);
  }
  GptParameter p;
  p.name = std::move(name);
  p.shape = values.shape();
  p.full_shape = std::move(full_shape);
  p.split = split;
  p.parts = parts;
  // The model stores every parameter in f32, so As<float> cannot fail.
  p.values = *values.As<float>();
  p.grad = absl::MakeSpan(grad);
  return p;
}

GptParameter ParameterOf(std::string name, std::vector<float>& values, std::vector<float>& grad,
                         std::vector<int64_t> shape) {
  if (grad.size() != values.size()) grad.assign(values.size(), 0.0f);
  GptParameter p;
  p.name = std::move(name);
  p.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(values.size())}
                          : std::move(shape);
  p.full_shape = p.shape;
  p.values = absl::MakeSpan(values);
  p.grad = absl::MakeSpan(grad);
  return p;
}

absl::StatusOr<Tensor> ToTensor(std::vector<int64_t> shape, absl::Span<const float> values) {
  return Tensor::FromValues(std::move(shape), values);
}

absl::StatusOr<absl::Span<const float>> Values(const Tensor& t) {
  absl::StatusOr<absl::Span<const float>> v = t.As<float>();
  if (!v.ok()) return absl::InternalError(absl::StrCat("activation: ", v.status().message()));
  return v;
}

std::vector<float> Add(absl::Span<const float> a, absl::Span<const float> b) {
  std::vector<float> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

}  // namespace train_internal
}  // namespace loom
