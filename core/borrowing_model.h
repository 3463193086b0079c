// BorrowingModel: a model whose weights can live in a ParameterSource
// (core/parameter_source.h) instead of the model: what a data-parallel optimizer at
// any ZeRO stage (zero3/data_parallel.h) needs of a model. The model lists its
// parameters and declares its units; UseParameterSource hands the weights over for
// good, after which every pass of the model asks the source for each unit just
// before it computes with it (under a UnitLease) and gives its gradients to the
// source (GradientHome::kSource) or keeps them until the caller collects them
// (kModel). models/gpt's GptModel is one.
//
// Example (a library user's model, one data-parallel rank):
//   class MyModel : public BorrowingModel { ... };
//   MyModel model = ...;
//   std::vector<BorrowingModel*> models = {&model};
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelOptimizer> dp,
//                         MakeDataParallelOptimizer(models, dp_comm, options));
//   // model.ParameterViews()[k].values is empty now: the optimizer's source holds it
#ifndef LOOM_CORE_BORROWING_MODEL_H_
#define LOOM_CORE_BORROWING_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/parameter_source.h"

namespace loom {

// Where a borrowing model's gradients go: to the source as each backward pass
// makes them (kSource), or into the model's own sums, handed over by the caller
// once per step (kModel: e.g. a deferred reduce-scatter).
enum class GradientHome { kSource, kModel };

// ModelParameter: one parameter as the model holds it, with mutable views of its
// values and gradient (f32, row-major). `values` is the model's own until
// UseParameterSource and empty after; `grad` is where the model sums its gradient
// (empty when the source takes the gradients).
struct ModelParameter {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<float> values;
  absl::Span<float> grad;
};

class BorrowingModel {
 public:
  virtual ~BorrowingModel() = default;

  // ParameterViews lists the parameters in the model's order (the order the
  // source numbers them in).
  virtual std::vector<ModelParameter> ParameterViews() = 0;
  // Units: how the model uses its parameters, covering them in order (see
  // ParameterUnit).
  virtual std::vector<ParameterUnit> Units() const = 0;
  // UseParameterSource makes `source` (not owned; it must outlive the model) the
  // home of the weights from now on. FailedPrecondition when called twice.
  virtual absl::Status UseParameterSource(ParameterSource* source, GradientHome grads) = 0;
};

}  // namespace loom

#endif  // LOOM_CORE_BORROWING_MODEL_H_
