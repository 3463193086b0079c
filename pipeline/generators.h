// Schedule generators: GPipe, 1F1B, interleaved 1F1B, ZB-H1 and ZB-V, each as a
// compute-only Schedule (F, B, I, W per rank), and a forward-only schedule for
// evaluation; Lower (lowering.h) adds the messages and Verify (verifier.h) checks
// the result. Each generator follows the published
// construction, so its bubble and memory match the papers' formulas (see the
// simulator and the README's table).
//
// Notation: p ranks, m microbatches, v stages per rank, r a rank. Activations are
// counted per stage and microbatch ("one F's worth").
//
//   gpipe             Loop layout, one stage per rank. All m forwards, then all m
//                     backwards in microbatch order (as PyTorch's ScheduleGPipe).
//                     Peak activations: m on every rank.
//   1f1b              Loop layout, one stage per rank (PipeDream-Flush, Megatron-LM):
//                     warmup = min(p-r-1, m) forwards, then alternately one forward
//                     and one backward, then the remaining backwards. Peak
//                     activations: min(p-r, m).
//   interleaved-1f1b  Loop layout with v stages (model chunks) per rank, stage
//                     c*p + r on rank r (Megatron-LM's virtual pipeline). A rank's
//                     m*v forwards run in microbatch groups of p: the k-th forward is
//                     chunk (k mod pv) / p on microbatch (k / pv)*p + k mod p, and the
//                     k-th backward the same with the chunks reversed. warmup =
//                     min((p-r-1)*2 + (v-1)*p, m*v) as current Megatron-LM computes
//                     it (older versions ran everything as warmup when m == p), then
//                     one forward and one backward alternately, then the remaining
//                     backwards. Needs m to be a multiple of p (Megatron-LM's classic
//                     form). Peak activations: min(warmup + 1, m*v) chunk activations.
//   zb-h1             Loop layout, one stage per rank (Qi et al. 2023, "Zero Bubble
//                     Pipeline Parallelism", ZB-H1): 1F1B's order with every B split
//                     into I (input gradient, on the critical path) and W (weight
//                     gradient, deferrable). Rank r delays its W's by r backwards
//                     (the paper's "starting points of W adjusted to the warm-up":
//                     r is p-1 minus r's warmup), so the I's run up the pipeline
//                     without waiting for W's and the delayed W's fill the cooldown:
//                     after the j-th I comes W(j - r), and the last min(r, m) W's end
//                     the list. With t_F = t_I = t_W every rank idles exactly
//                     (p-1) t_F once m >= p: a third of 1F1B's (p-1)(t_F + t_B).
//                     Full activations (F until I): min(p-r, m), as 1F1B; counted
//                     until their W, min(p, m) on every rank — the paper's "same
//                     memory as 1F1B" holds because a W keeps only part of an
//                     activation (the inputs of the weight matmuls) alive.
//   zb-v              V-shape layout, rank r holds stages r and 2p-1-r (Qi et al.,
//                     ZB-V), the handcrafted schedule as PyTorch's
//                     ScheduleZBVZeroBubble builds it: a warmup of chunk-0 forwards,
//                     then interleaved chunk-1 / chunk-0 forwards, then F-I-W triples
//                     on both chunks, and a cooldown of I's with the W's last. For
//                     m < 2p-1 it is built for 2p-1 microbatches and the extra ones
//                     are dropped. With per-chunk t_F = t_I = t_W every rank idles
//                     exactly (p-1) t_F once m >= 2p (half of ZB-H1's at the same
//                     per-stage costs, since a chunk is half a stage); peak
//                     activations min(2p, 2m) chunk activations, 1F1B's first rank.
//   forward-only      Any layout (a training schedule's, so that an evaluation runs
//                     on the training mesh): F's only, no backward, so only
//                     activations move and no gradient is touched. Each rank runs
//                     its stages' forwards in wavefront order: F(s, mb) ranked by
//                     s + mb, ties to the lower microbatch; with one stage per
//                     rank that is F0, F1, ..., F(m-1), GPipe's forward half,
//                     whose makespan is (m + p - 1) t_F.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Schedule s, Make1F1BSchedule(/*num_ranks=*/4, /*num_microbatches=*/8));
//   // s.ranks[3]: 3F0 3B0 3F1 3B1 ... (warmup 0)
//   // s.ranks[0]: 0F0 0F1 0F2 0F3 0B0 0F4 0B1 ... (warmup 3)
//   MakeInterleaved1F1BSchedule(4, 6, 2);
//   // InvalidArgument: interleaved-1f1b needs num_microbatches to be a multiple of
//   //   num_ranks (microbatch groups of p): num_microbatches=6, num_ranks=4
//   MakeForwardOnlySchedule(2, 3, /*stages_per_rank=*/2);
//   // s.ranks[0]: 0F0 0F1 2F0 0F2 2F1 2F2 (loop p=2 v=2: stages 0 and 2)
//   MakeForwardOnlySchedule(*StageLayout::VShape(2), 2);
//   // s.ranks[0]: 0F0 0F1 3F0 3F1; s.ranks[1]: 1F0 2F0 1F1 2F1
#ifndef LOOM_PIPELINE_GENERATORS_H_
#define LOOM_PIPELINE_GENERATORS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"
#include "topology/parallel_config.h"

namespace loom {

// Every generator returns InvalidArgument, naming the values, when num_ranks or
// num_microbatches is below 1 or the schedule would exceed the verifier's size
// limits, and for the schedule-specific conditions listed.

// MakeGPipeSchedule returns the "gpipe" schedule.
absl::StatusOr<Schedule> MakeGPipeSchedule(int64_t num_ranks, int64_t num_microbatches);

// Make1F1BSchedule returns the "1f1b" schedule.
absl::StatusOr<Schedule> Make1F1BSchedule(int64_t num_ranks, int64_t num_microbatches);

// MakeInterleaved1F1BSchedule returns the "interleaved-1f1b" schedule with
// `virtual_stages` stages per rank. Also InvalidArgument when virtual_stages < 1 or
// num_microbatches is not a multiple of num_ranks.
absl::StatusOr<Schedule> MakeInterleaved1F1BSchedule(int64_t num_ranks, int64_t num_microbatches,
                                                     int64_t virtual_stages);

// MakeZeroBubbleH1Schedule returns the "zb-h1" schedule.
absl::StatusOr<Schedule> MakeZeroBubbleH1Schedule(int64_t num_ranks, int64_t num_microbatches);

// MakeZeroBubbleVSchedule returns the "zb-v" schedule (two stages per rank).
absl::StatusOr<Schedule> MakeZeroBubbleVSchedule(int64_t num_ranks, int64_t num_microbatches);

// MakeForwardOnlySchedule returns the "forward-only" schedule on `layout`, as is
// (layers included). The evaluation of a training job passes its training
// schedule's layout, so every stage stays on the rank that holds its weights:
//   MakeForwardOnlySchedule(training.layout, num_microbatches)
absl::StatusOr<Schedule> MakeForwardOnlySchedule(const StageLayout& layout,
                                                 int64_t num_microbatches);

// MakeForwardOnlySchedule returns the "forward-only" schedule on the loop layout
// with `stages_per_rank` stages per rank: the layout of gpipe, 1f1b and zb-h1
// (stages_per_rank 1) and of interleaved-1f1b; for zb-v's V-shape pass its layout
// to the overload above. Also InvalidArgument when stages_per_rank < 1.
absl::StatusOr<Schedule> MakeForwardOnlySchedule(int64_t num_ranks, int64_t num_microbatches,
                                                 int64_t stages_per_rank = 1);

// MakeSchedule dispatches on `kind` (topology's enum, as a ParallelConfig names
// it). virtual_stages is used by interleaved-1f1b only; the other kinds need it to
// be 1, except zb-v, which needs 1 or 2 (it always places two stages per rank).
absl::StatusOr<Schedule> MakeSchedule(PipelineScheduleKind kind, int64_t num_ranks,
                                      int64_t num_microbatches, int64_t virtual_stages = 1);

}  // namespace loom

#endif  // LOOM_PIPELINE_GENERATORS_H_
