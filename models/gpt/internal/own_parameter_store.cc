#include "models/gpt/internal/own_parameter_store.h"

#include "absl/strings/str_cat.h"

namespace loom {
namespace gpt_internal {

namespace {
constexpr char kName[] = "GptModel's own parameter store";
}  // namespace

OwnParameterStore::OwnParameterStore(absl::Span<const absl::Span<const float>> initial) {
  values_.reserve(initial.size());
  for (const absl::Span<const float> v : initial) values_.emplace_back(v.begin(), v.end());
}

absl::Status OwnParameterStore::BeginParameterPass(ParameterPass pass) {
  if (pass_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": BeginParameterPass inside a pass"));
  }
  pass_ = pass;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> OwnParameterStore::Acquire(int param) {
  if (param < 0 || param >= num_params()) {
    return absl::OutOfRangeError(
        absl::StrCat(kName, ": Acquire(", param, "): it holds ", num_params(), " parameters"));
  }
  if (!pass_.has_value() || *pass_ == ParameterPass::kGradients) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": Acquire(", param, ") ",
                     pass_.has_value() ? "in a kGradients pass" : "outside a pass"));
  }
  return absl::MakeConstSpan(values_[static_cast<size_t>(param)]);
}

absl::Status OwnParameterStore::AddGrad(int param, absl::Span<const float> grad) {
  return absl::FailedPreconditionError(absl::StrCat(kName, ": AddGrad(", param, ", ", grad.size(),
                                                    " values): the model keeps its gradients"));
}

absl::Status OwnParameterStore::EndPass() {
  if (!pass_.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": EndPass outside a pass"));
  }
  pass_.reset();
  return absl::OkStatus();
}

}  // namespace gpt_internal
}  // namespace loom
