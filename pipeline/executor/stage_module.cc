#include "pipeline/executor/stage_module.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<Tensor> StageModule::Input(int64_t microbatch) {
  return absl::UnimplementedError(
      absl::StrCat("this stage module has no Input (asked for microbatch ", microbatch, ")"));
}

absl::StatusOr<Tensor> StageModule::Loss(int64_t microbatch, const Tensor&) {
  return absl::UnimplementedError(
      absl::StrCat("this stage module has no Loss (asked for microbatch ", microbatch, ")"));
}

absl::StatusOr<Tensor> StageModule::BackwardInput(int64_t stage, int64_t microbatch,
                                                     const Tensor&) {
  return absl::UnimplementedError(absl::StrCat("this stage module has no BackwardInput (stage ",
                                               stage, ", microbatch ", microbatch, ")"));
}

absl::Status StageModule::BackwardWeight(int64_t stage, int64_t microbatch) {
  return absl::UnimplementedError(absl::StrCat("this stage module has no BackwardWeight (stage ",
                                               stage, ", microbatch ", microbatch, ")"));
}

}  // namespace loom
