#include "models/gpt/internal/model_util.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"

namespace loom {
namespace gpt_internal {
absl::Status GradAccumulator::Resize(size_t n) {
  if (n == view_.size()) return absl::OkStatus();
  own_.assign(n, 0.0f);
  view_ = absl::MakeSpan(own_);
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
  // Raw pointers in the loop: Debian's Abseil is built hardened (ABSL_OPTION_HARDENED),
  // so Span's operator[] checks every index and the loop would stay scalar.
  float* const sum = accum.view().data();
  const float* const g = grad.data();
  ParallelForEach(static_cast<int64_t>(grad.size()), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) sum[i] += g[i];
  });
  return absl::OkStatus();
}

void AppendParameter(ParameterList& out, std::string name, const Tensor& values,
                     GradAccumulator& grad, std::vector<int64_t> full_shape, TpSplit split,
                     int64_t parts) {
  grad.Resize(static_cast<size_t>(values.numel())).IgnoreError();
  GptParameter p;
  p.name = std::move(name);
  p.shape = values.shape();
  p.full_shape = std::move(full_shape);
  p.split = split;
  p.parts = parts;
  p.grad = grad.view();
  out.params.push_back(std::move(p));
  // The layers are created in f32 (the model's only storage dtype), so As<float>
  // cannot fail; an owned weight already dropped gives an empty view.
  absl::StatusOr<absl::Span<const float>> initial = values.As<float>();
  out.initial.push_back(initial.ok() ? *initial : absl::Span<const float>());
}

void AppendParameter(ParameterList& out, std::string name, absl::Span<const float> values,
                     GradAccumulator& grad, std::vector<int64_t> shape) {
  grad.Resize(values.size()).IgnoreError();
  GptParameter p;
  p.name = std::move(name);
  p.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(values.size())}
                          : std::move(shape);
  p.full_shape = p.shape;
  p.grad = grad.view();
  out.params.push_back(std::move(p));
  out.initial.push_back(values);
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
  Add(a, b, absl::MakeSpan(out));
  return out;
}

void Add(absl::Span<const float> a, absl::Span<const float> b, absl::Span<float> out) {
  // Raw pointers, as in AddInto: a hardened Span's operator[] keeps the loop scalar.
  const float* const x = a.data();
  const float* const y = b.data();
  float* const z = out.data();
  ParallelForEach(static_cast<int64_t>(out.size()), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) z[i] = x[i] + y[i];
  });
}

absl::StatusOr<Activation> NewActivation(std::vector<int64_t> shape) {
  Activation a;
  LOOM_ASSIGN_OR_RETURN(a.tensor, Tensor::CreateUninitialized(std::move(shape)));
  // An f32 tensor, so As<float> cannot fail.
  a.values = *a.tensor.As<float>();
  return a;
}

}  // namespace gpt_internal
}  // namespace loom
