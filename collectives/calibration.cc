#include "collectives/calibration.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// RoundTrip returns the mean seconds of a ping-pong of `bytes` between rank 0 and
// `partner`; other ranks return 0 without taking part.
absl::StatusOr<double> RoundTrip(Communicator& comm, int partner, size_t bytes, int trips) {
  std::vector<std::byte> buffer(bytes);
  const BufferView view(buffer.data(), bytes, DType::kU8);
  if (comm.rank() != 0 && comm.rank() != partner) return 0.0;
  // One unmeasured trip first: page faults and connection set-up are not latency.
  for (int warm = 0; warm < 2; ++warm) {
    const int n = warm == 0 ? 1 : trips;
    const absl::Time start = absl::Now();
    for (int i = 0; i < n; ++i) {
      if (comm.rank() == 0) {
        LOOM_RETURN_IF_ERROR(comm.Send(view, partner));
        LOOM_RETURN_IF_ERROR(comm.Recv(view, partner));
      } else {
        LOOM_RETURN_IF_ERROR(comm.Recv(view, 0));
        LOOM_RETURN_IF_ERROR(comm.Send(view, 0));
      }
    }
    if (warm == 1) return absl::ToDoubleSeconds(absl::Now() - start) / n;
  }
  return 0.0;
}

}  // namespace

absl::StatusOr<CostModel> Calibrate(Communicator& comm, const CalibrationOptions& options) {
  CostModel::Constants constants = CostModel::Default().constants();
  // gamma: the f32 sum kernel over a buffer too large for the caches.
  {
    const size_t floats = options.bandwidth_bytes / sizeof(float);
    std::vector<float> a(floats, 1.0f), b(floats, 2.0f);
    LOOM_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeSpan(a)),
                                    BufferView::Of(absl::MakeSpan(b))));
    const absl::Time start = absl::Now();
    const int reps = 5;
    for (int i = 0; i < reps; ++i) {
      LOOM_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeSpan(a)),
                                      BufferView::Of(absl::MakeSpan(b))));
    }
    constants.gamma = std::max(1e-13, absl::ToDoubleSeconds(absl::Now() - start) / reps /
                                          static_cast<double>(floats * sizeof(float)));
  }
  const int n = comm.size();
  if (n > 1) {
    auto measure = [&](int partner, double* alpha, double* beta) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(const double small, RoundTrip(comm, partner, 8, options.latency_round_trips));
      LOOM_ASSIGN_OR_RETURN(const double large, RoundTrip(comm, partner, options.bandwidth_bytes,
                                                          options.bandwidth_round_trips));
      if (comm.rank() == 0) {
        *alpha = std::max(1e-9, small / 2);
        *beta = std::max(1e-13, (large / 2 - *alpha) / static_cast<double>(options.bandwidth_bytes));
      }
      return absl::OkStatus();
    };
    LOOM_RETURN_IF_ERROR(measure(1, &constants.alpha, &constants.beta));
    const int k = comm.options().ranks_per_node;
    if (k > 0 && k < n) {
      LOOM_RETURN_IF_ERROR(measure(k, &constants.inter_node_alpha, &constants.inter_node_beta));
    } else {
      constants.inter_node_alpha = constants.alpha;
      constants.inter_node_beta = constants.beta;
    }
  }
  // Everyone adopts rank 0's numbers: identical models make identical choices.
  double values[5] = {constants.alpha, constants.beta, constants.gamma, constants.inter_node_alpha,
                      constants.inter_node_beta};
  LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(values), /*root=*/0));
  constants.alpha = values[0];
  constants.beta = values[1];
  constants.gamma = values[2];
  constants.inter_node_alpha = values[3];
  constants.inter_node_beta = values[4];
  return CostModel::FromConstants(constants);
}

}  // namespace loom
