// ChooseCpComm: how the job's attention crosses the cp group when --cp_comm is auto.
// Ring attention (ring_attention.h) works for any head count and overlaps its hops
// with compute; the all-to-all variant (ulysses_attention.h) needs cp to divide each
// tp rank's heads and sends about 2 / cp of the ring's bytes in 4 all-to-all calls a
// layer instead of 2 cp - 1 hops. The choice compares what one rank sends per layer
// and microbatch, forward and backward, by the two ops' own traffic formulas.
//
// Example (--cp=4 --tp=1 --heads=4 --hidden=64 --seq_len=1024 --micro_batch=1):
//   LOOM_ASSIGN_OR_RETURN(CpCommChoice choice, ChooseCpComm(options));
//   choice.comm;  // CpComm::kAllToAll
//   choice.why;   // "a2a: sends 102,... f32 elements per layer and microbatch against
//                 //  the ring's 229,376 ..."
#ifndef LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_
#define LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tools/training/train_options.h"

namespace loom {

struct CpCommChoice {
  CpComm comm = CpComm::kRing;
  std::string why;  // one line: the figures that decided
};

// ChooseCpComm returns a2a when cp divides each tp rank's heads and its traffic per
// layer (rank 0's, forward and backward) is below the ring's, ring otherwise, with the
// reason. At cp 1 it returns ring ("cp 1: no context parallelism"). Errors from the
// ops' traffic functions (bad sizes).
absl::StatusOr<CpCommChoice> ChooseCpComm(const TrainJobOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_
