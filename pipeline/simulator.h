// Simulate: runs a schedule against a cost model and returns its timeline (start
// and end of every action), makespan, bubble ratio per rank and overall, and peak
// in-flight activations per rank.
//
// Timing model. All ranks start at time 0 and run their actions in order, each as
// soon as the rank's previous action has ended and its input is there.
//   - F, B, I, W take their stage's cost (SimulationCosts), uniform or per stage.
//   - Sends and receives take no time and never block the rank: they post the
//     transfer (isend / irecv), as PyTorch's pipelining runtime and Megatron-LM's
//     batched p2p do. A message leaves when its send is posted, right after the
//     compute that produced it, and arrives p2p_latency later.
//   - A compute whose input comes from another rank starts no earlier than that
//     arrival.
// So the timeline depends only on each rank's compute order and the costs, not on
// where Lower put the receives. A compute-only schedule is lowered first; the
// schedule must pass Verify under buffered semantics.
//
// Bubble. idle(r) = makespan - busy(r), where busy(r) is the sum of rank r's
// compute costs and the makespan is the end of the last action of any rank. So the
// warmup wait before a rank's first action and the time after its last one count
// as idle: the device is held for the whole step. bubble_ratio(r) = idle(r) /
// makespan; the overall ratio is sum(idle) / (p * makespan). (0 when the makespan is
// 0.) With uniform costs and p2p_latency = 0 these match the textbook formulas
// exactly:
//   GPipe, 1F1B:          (p-1) / (m + p-1)     every rank is busy m(t_F + t_B) and
//                                               idle (p-1)(t_F + t_B), for any t_F, t_B
//   interleaved 1F1B:     (p-1) / (v*m + p-1)   per-stage (chunk) costs: a bubble of
//                                               (p-1)(t_F + t_B) chunk-steps against
//                                               v*m of work, 1/v of 1F1B's
//   ZB-H1, m >= p:        (p-1) / (3m + p-1)    t_F = t_I = t_W: idle (p-1) t_F, a
//                                               third of 1F1B's 3(p-1) t_F
//   ZB-V, m >= 2p:        (p-1) / (6m + p-1)    per-chunk t_F = t_I = t_W: idle
//                                               (p-1) t_F, busy 6m t_F
// (the README's table, from //pipeline:bubble_table, shows them side by side).
// Megatron-LM and the zero-bubble paper quote the bubble against the ideal time
// instead, idle / busy: (p-1)/m, (p-1)/(v*m), (p-1)/(3m); same schedules, other
// denominator.
//
// Activations. Counted per stage and microbatch on the rank that holds the stage,
// in program order: +1 when F runs, -1 when the microbatch's backward is complete,
// at B or at W. I alone does not free it: W still needs the stage's inputs (the
// weight gradient is input^T x output gradient). peak_activations is the most held
// at once. peak_activations_before_input_grad instead frees at B or I, counting
// the full activations the input gradient still needs; the two differ only for the
// zero-bubble schedules, whose W's hold a smaller part of an activation — which is
// why the paper counts ZB-H1's memory as 1F1B's.
//
// Example:
//   SimulationCosts costs;               // F = 1, B = 2, I = W = 1, latency 0
//   costs.uniform.backward = 1;          // t_B = t_F
//   LOOM_ASSIGN_OR_RETURN(SimulationResult run,
//                         Simulate(*Make1F1BSchedule(4, 8), costs));
//   run.makespan;                        // 22  = (m + p - 1)(t_F + t_B)
//   run.bubble_ratio;                    // 0.2727... = 3 / 11
//   run.ranks[1].peak_activations;       // 3   = p - r
//   run.ranks[0].actions[0];             // {0F0, start 0, end 1}
#ifndef LOOM_PIPELINE_SIMULATOR_H_
#define LOOM_PIPELINE_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/action.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {

// The cost (time, in any unit) of each compute kind on one stage.
struct StageCosts {
  double forward = 1;
  double backward = 2;         // B: the whole backward, usually about 2 t_F.
  double backward_input = 1;   // I
  double backward_weight = 1;  // W
};

struct SimulationCosts {
  // Costs of every stage, unless per_stage is given.
  StageCosts uniform;
  // Empty, or one entry per stage of the schedule's layout.
  std::vector<StageCosts> per_stage;
  // Time from a send to the matching receive being able to complete.
  double p2p_latency = 0;

  // ScaledByLayers returns per-stage costs proportional to each stage's layers:
  // per_layer times layout.layers_per_stage()[s]. InvalidArgument when the layout
  // has no layers assigned.
  static absl::StatusOr<SimulationCosts> ScaledByLayers(const StageLayout& layout,
                                                        const StageCosts& per_layer,
                                                        double p2p_latency = 0);

  // ForStage returns the costs of `stage`.
  const StageCosts& ForStage(int64_t stage) const {
    return per_stage.empty() ? uniform : per_stage[stage];
  }
};

struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

struct RankTimeline {
  // Every action of the rank's lowered program, in order, with its times.
  std::vector<TimedAction> actions;
  double busy = 0;          // Sum of compute costs.
  double idle = 0;          // makespan - busy.
  double bubble_ratio = 0;  // idle / makespan.
  int64_t peak_activations = 0;
  int64_t peak_activations_before_input_grad = 0;
};

struct SimulationResult {
  double makespan = 0;
  // sum of idle / (num_ranks * makespan).
  double bubble_ratio = 0;
  std::vector<RankTimeline> ranks;

  // Summary returns one line per rank ("rank 0: busy 16 idle 6 bubble 27.3%
  // peak activations 4") and a total line.
  std::string Summary() const;
};

// Simulate returns the timeline of `schedule` under `costs`. InvalidArgument for a
// negative or non-finite cost or latency, or per_stage with a size other than the
// number of stages; otherwise the errors of Verify (buffered semantics) for a
// schedule that is malformed or deadlocks.
absl::StatusOr<SimulationResult> Simulate(const Schedule& schedule, const SimulationCosts& costs);

// CheckSimulationOf returns InvalidArgument unless `result` has one timeline per
// rank of `schedule`: what the exports (Chrome trace, SVG) check before drawing.
absl::Status CheckSimulationOf(const Schedule& schedule, const SimulationResult& result);

}  // namespace loom

#endif  // LOOM_PIPELINE_SIMULATOR_H_
