#include "models/gpt/internal/model_util.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {
namespace train_internal {

absl::Status GradAccumulator::Resize(size_t n) {
  if (n == view_.size()) return absl::OkStatus();
  if (bound()) {
    return absl::InternalError(absl::StrCat("a bound gradient accumulator of ", view_.size(),
                                            " values cannot hold ", n));
  }
  own_.assign(n, 0.0f);
  view_ = absl::MakeSpan(own_);
  return absl::OkStatus();
}

absl::Status GradAccumulator::Bind(absl::Span<float> memory) {
  if (memory.size() != view_.size()) {
    return absl::InternalError(absl::StrCat("binding a gradient accumulator of ", view_.size(),
                                            " values to ", memory.size()));
  }
  if (memory.data() == view_.data()) return absl::OkStatus();
  std::copy(view_.begin(), view_.end(), memory.begin());
  view_ = memory;
  std::vector<float>().swap(own_);
  return absl::OkStatus();
}

absl::Status AddInto(GradAccumulator& accum, const Tensor& grad) {
  absl::StatusOr<absl::Span<const float>> g = grad.As<float>();
  if (!g.ok()) return absl::InternalError(absl::StrCat("gradient: ", g.status().message()));
  return AddInto(accum, *g);
}

absl::Status AddInto(GradAccumulator& accum, absl::Span<const float> grad) {
  if (accum.size() == 0) LOOM_RETURN_IF_ERROR(accum.Resize(grad.size()));
  if (accum.size() != grad.size()) {
    return absl::InternalError(absl::StrCat("gradient of ", grad.size(),
                                            " values for an accumulator of ", accum.size()));
  }
  const absl::Span<float> sum = accum.view();
  for (size_t i = 0; i < grad.size(); ++i) sum[i] += grad[i];
  return absl::OkStatus();
}

GptParameter ParameterOf(std::string name, Tensor& values, GradAccumulator& grad,
                         std::vector<int64_t> full_shape, TpSplit split, int64_t parts) {
  // Sized at Create, before any binding, so this cannot fail afterwards.
  grad.Resize(static_cast<size_t>(values.numel())).IgnoreError();
  GptParameter p;
  p.name = std::move(name);
  p.shape = values.shape();
  p.full_shape = std::move(full_shape);
  p.split = split;
  p.parts = parts;
  // The model stores every parameter in f32, so As<float> cannot fail.
  p.values = *values.As<float>();
  p.grad = grad.view();
  return p;
}

GptParameter ParameterOf(std::string name, std::vector<float>& values, GradAccumulator& grad,
                         std::vector<int64_t> shape) {
  grad.Resize(values.size()).IgnoreError();
  GptParameter p;
  p.name = std::move(name);
  p.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(values.size())}
                          : std::move(shape);
  p.full_shape = p.shape;
  p.values = absl::MakeSpan(values);
  p.grad = grad.view();
  return p;
}

absl::Status BindGradients(absl::Span<const GptParameter> params,
                           absl::Span<GradAccumulator* const> accumulators,
                           absl::Span<float> memory) {
  size_t total = 0;
  for (const GptParameter& p : params) total += p.grad.size();
  if (memory.size() != total) {
    return absl::InvalidArgumentError(absl::StrCat("gradient memory of ", memory.size(),
                                                   " floats for parameters with ", total));
  }
  size_t at = 0;
  for (const GptParameter& p : params) {
    const auto owner = std::find_if(
        accumulators.begin(), accumulators.end(),
        [&p](const GradAccumulator* a) { return a->view().data() == p.grad.data(); });
    if (owner == accumulators.end() || (*owner)->size() != p.grad.size()) {
      return absl::InternalError(absl::StrCat("parameter ", p.name,
                                              "'s gradient is no accumulator of its model"));
    }
    LOOM_RETURN_IF_ERROR((*owner)->Bind(memory.subspan(at, p.grad.size())));
    at += p.grad.size();
  }
  return absl::OkStatus();
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
