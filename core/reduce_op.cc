#include "core/reduce_op.h"

#include <array>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {
constexpr std::array<ReduceOp, 5> kAllOps = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg};
}  // namespace

absl::Span<const ReduceOp> AllReduceOps() { return kAllOps; }

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
  }
  return "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (ReduceOp op : kAllOps) {
    if (ReduceOpName(op) == lower) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown reduce op \"", name,
                                                 "\"; expected one of sum, prod, min, max, avg"));
}

std::ostream& operator<<(std::ostream& os, ReduceOp op) { return os << ReduceOpName(op); }

}  // namespace loom
