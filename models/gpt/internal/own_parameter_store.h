// OwnParameterStore: the parameter source of a GptModel that owns its weights (one
// not handed to GptModel::UseParameterSource): one f32 vector per parameter, lent
// whole in every pass and written in place by the model's user through
// Parameters(). The model keeps the gradients (GradientHome::kModel), so AddGrad
// is refused. The layers never own weights of their own in a model: this store is
// where an owning model's weights live.
#ifndef LOOM_MODELS_GPT_INTERNAL_OWN_PARAMETER_STORE_H_
#define LOOM_MODELS_GPT_INTERNAL_OWN_PARAMETER_STORE_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/parameter_source.h"

namespace loom {
namespace gpt_internal {

class OwnParameterStore : public ParameterSource {
 public:
  // The store copies `initial`, one view per parameter in the model's order.
  explicit OwnParameterStore(absl::Span<const absl::Span<const float>> initial);

  // values(param) is the parameter's storage, valid for the store's lifetime.
  absl::Span<float> values(int param) {
    return absl::MakeSpan(values_[static_cast<size_t>(param)]);
  }
  int num_params() const { return static_cast<int>(values_.size()); }

  absl::Status BeginParameterPass(ParameterPass pass) override;
  // Acquire: OutOfRange for a parameter the store does not hold;
  // FailedPrecondition outside a pass or in a kGradients pass.
  absl::StatusOr<absl::Span<const float>> Acquire(int param) override;
  // AddGrad: FailedPrecondition (the owning model keeps its gradients).
  absl::Status AddGrad(int param, absl::Span<const float> grad) override;
  absl::Status EndPass() override;

 private:
  std::vector<std::vector<float>> values_;
  std::optional<ParameterPass> pass_;
};

}  // namespace gpt_internal
}  // namespace loom

#endif  // LOOM_MODELS_GPT_INTERNAL_OWN_PARAMETER_STORE_H_
