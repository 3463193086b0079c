#include "tools/training/cp_comm_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tensor_parallel/layers/ulysses_attention.h"

namespace loom {
namespace {

absl::Status CheckConstant(const char* name, double value) {
  if (!(std::isfinite(value) && value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp cost model: ", name, " ", value, " must be finite and > 0"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CpCommChoice> ChooseCpComm(const TrainJobOptions& o, const CpCostInputs& in) {
  CpCommChoice choice;
  if (o.cp <= 1) {
    choice.why = "cp 1: no context parallelism";
    return choice;
  }
  LOOM_RETURN_IF_ERROR(CheckConstant("alpha", in.alpha));
  LOOM_RETURN_IF_ERROR(CheckConstant("beta", in.beta));
  LOOM_RETURN_IF_ERROR(CheckConstant("attention flops per second",
                                     in.attention_flops_per_second));
  const int64_t heads = o.model.heads / o.tp;  // ValidateTrainJob: tp divides the heads
  const int64_t d = o.model.hidden / o.model.heads;
  const int64_t b = o.micro_batch;
  const double c = o.cp;
  // The ring: a multi-head call sends every head's rows in one message per hop.
  LOOM_ASSIGN_OR_RETURN(const RingAttentionTraffic ring,
                        RingAttentionSentElements(o.model.seq_len, o.cp, 0, o.cp_layout, d));
  const double bytes_per_element = 4.0 * static_cast<double>(heads * b);
  // Backward: (4 (cp - 1) + 2) units of rows x d: K, V, dK, dV on cp - 1 hops, then
  // dK, dV home.
  const double unit = static_cast<double>(ring.backward) / (4.0 * (c - 1) + 2.0);
  const double forward_hop = in.alpha + in.beta * bytes_per_element *
                                            static_cast<double>(ring.forward) / (c - 1);
  const double backward_hop = in.alpha + in.beta * bytes_per_element * 4.0 * unit;
  const double home_hop = in.alpha + in.beta * bytes_per_element * 2.0 * unit;
  // The mean rank's attention, per block (cp blocks a call).
  const double seq = static_cast<double>(o.model.seq_len);
  const double mean_pairs = seq * (seq + 1) / 2 / c;
  const double forward_flops = 4.0 * static_cast<double>(d * heads * b) * mean_pairs;
  const double forward_block = forward_flops / in.attention_flops_per_second / c;
  const double backward_block = 2.5 * forward_block;
  choice.ring_seconds = (c - 1) * std::max(0.0, forward_hop - forward_block) +
                        (c - 1) * std::max(0.0, backward_hop - backward_block) + home_hop;
  const std::string constants = absl::StrFormat(
      "%s: alpha %.3g us, beta %.3g GB/s, attention %.3g GFLOP/s", in.source, in.alpha * 1e6,
      1e-9 / in.beta, in.attention_flops_per_second / 1e9);
  const std::string ring_text = absl::StrFormat(
      "%.3g ms for the ring (%d hops of %.3g and %.3g ms beside %.3g and %.3g ms of "
      "attention per block, one of %.3g ms home)",
      choice.ring_seconds * 1e3, 2 * o.cp - 1, forward_hop * 1e3, backward_hop * 1e3,
      forward_block * 1e3, backward_block * 1e3, home_hop * 1e3);
  if (heads % o.cp != 0) {
    choice.why = absl::StrFormat(
        "ring: a2a needs cp %d to divide each tp rank's %d heads; exposed communication per "
        "layer and microbatch predicted %s (%s)",
        o.cp, heads, ring_text, constants);
    return choice;
  }
  LOOM_ASSIGN_OR_RETURN(
      const UlyssesAttentionTraffic a2a,
      UlyssesAttentionSentElements(o.model.seq_len, o.cp, 0, o.cp_layout, heads, d));
  // Four all-to-alls of cp - 1 messages each; the bytes are the heads' already.
  choice.a2a_seconds =
      4.0 * (c - 1) * in.alpha +
      in.beta * 4.0 * static_cast<double>(b) * static_cast<double>(a2a.forward + a2a.backward);
  choice.comm = choice.a2a_seconds < choice.ring_seconds ? CpComm::kAllToAll : CpComm::kRing;
  choice.why = absl::StrFormat(
      "%s: exposed communication per layer and microbatch predicted %s, %.3g ms for a2a "
      "(4 all-to-alls of %d message%s each, %d f32 elements, not overlapped) (%s)",
      CpCommName(choice.comm), ring_text, choice.a2a_seconds * 1e3, o.cp - 1, o.cp > 2 ? "s" : "",
      (a2a.forward + a2a.backward) * b, constants);
  return choice;
}

}  // namespace loom
