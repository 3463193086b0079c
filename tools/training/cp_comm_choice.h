// ChooseCpComm: how the job's attention crosses the cp group when --cp_comm is auto,
// by an alpha-beta cost model of the communication each variant leaves exposed, per
// layer and microbatch:
//   ring (ring_attention.h): cp - 1 forward hops of K and V, cp - 1 backward hops of
//     K, V and the dK, dV sums, and one last hop home; each hop costs alpha + beta
//     bytes and runs on a communication thread beside the attention of the block in
//     hand, so only what exceeds that block's compute is exposed (the last hop home
//     is exposed whole);
//   a2a (ulysses_attention.h, where cp divides each tp rank's heads): four
//     all-to-alls of cp - 1 messages each, (cp - 1) alpha + beta bytes, none hidden.
// A block's compute is its share of the rank's attention work: 4 d flops per visible
// (query, key) pair and head forward, 2.5 times that backward (the fused backward's
// five products against the forward's two), over the mean rank's pairs, at
// `attention_flops_per_second`. The same flags give the same choice on every rank
// (nothing here is measured at start-up), so the ranks of a job agree.
//
// Example (--cp=4 --tp=1 --heads=4 --hidden=64 --seq_len=1024 --micro_batch=1, the
// default constants):
//   LOOM_ASSIGN_OR_RETURN(CpCommChoice choice, ChooseCpComm(options, CpCostInputs{}));
//   choice.comm;  // CpComm::kRing: its hops hide behind 0.17 ms of attention each
//   choice.why;   // "ring: exposed communication per layer and microbatch predicted
//                 //  0.026 ms for the ring (7 hops ...), 0.073 ms for a2a (...)"
#ifndef LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_
#define LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "collectives/cost_model.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tools/training/train_options.h"

namespace loom {

// What the model weighs: the link's constants (CostModel's alpha and beta, from a
// file that `collective_bench --calibrate --save_cost_model` wrote, or its defaults)
// and one rank's fused attention rate (50 GFLOP/s: the fused kernel on one core of
// the Zen 4 VM, tensor_parallel/layers/README.md).
struct CpCostInputs {
  double alpha = CostModel::Default().constants().alpha;  // seconds per message
  double beta = CostModel::Default().constants().beta;    // seconds per byte sent
  double attention_flops_per_second = 50e9;
  std::string source = "default constants";  // where alpha and beta came from
};

struct CpCommChoice {
  CpComm comm = CpComm::kRing;
  // Predicted exposed communication seconds per layer and microbatch (a2a: negative
  // where it does not fit the heads).
  double ring_seconds = 0;
  double a2a_seconds = -1;
  std::string why;  // one line: the figures that decided
};

// ChooseCpComm returns the variant with the smaller predicted exposed time (ring on a
// tie), with the reason. At cp 1 it returns ring ("cp 1: no context parallelism").
// InvalidArgument for constants that are not finite and positive; errors from the
// ops' traffic functions (bad sizes).
absl::StatusOr<CpCommChoice> ChooseCpComm(const TrainJobOptions& options,
                                          const CpCostInputs& inputs);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_CP_COMM_CHOICE_H_
