#include "tools/training/cp_comm_choice.h"

#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tensor_parallel/layers/ulysses_attention.h"

namespace loom {

absl::StatusOr<CpCommChoice> ChooseCpComm(const TrainJobOptions& o) {
  CpCommChoice choice;
  if (o.cp <= 1) {
    choice.why = "cp 1: no context parallelism";
    return choice;
  }
  const int64_t heads = o.model.heads / o.tp;  // ValidateTrainJob: tp divides the heads
  const int64_t d = o.model.hidden / o.model.heads;
  LOOM_ASSIGN_OR_RETURN(const RingAttentionTraffic ring,
                        RingAttentionSentElements(o.model.seq_len, o.cp, 0, o.cp_layout, d));
  // Per layer and microbatch: every head of every sequence of the microbatch.
  const int64_t ring_elements = (ring.forward + ring.backward) * heads * o.micro_batch;
  if (heads % o.cp != 0) {
    choice.why = absl::StrFormat(
        "ring: a2a needs cp %d to divide each tp rank's %d heads; the ring sends %d f32 "
        "elements per layer and microbatch",
        o.cp, heads, ring_elements);
    return choice;
  }
  LOOM_ASSIGN_OR_RETURN(
      const UlyssesAttentionTraffic a2a,
      UlyssesAttentionSentElements(o.model.seq_len, o.cp, 0, o.cp_layout, heads, d));
  const int64_t a2a_elements = (a2a.forward + a2a.backward) * o.micro_batch;
  choice.comm = a2a_elements < ring_elements ? CpComm::kAllToAll : CpComm::kRing;
  choice.why = absl::StrFormat(
      "%s: a2a sends %d f32 elements per layer and microbatch (4 all-to-alls), the ring %d "
      "(%d hops, overlapped with compute)",
      CpCommName(choice.comm), a2a_elements, ring_elements, 2 * o.cp - 1);
  return choice;
}

}  // namespace loom
