// ParallelConfig: the sizes of a training job's parallel dimensions and its pipeline
// layout, validated against a world size with messages that carry the numbers.
//
// Example:
//   ParallelConfig config;
//   config.dp = 2; config.pp = 4; config.tp = 2;
//   config.num_layers = 32; config.num_microbatches = 8;
//   config.Validate(16);        // OK
//   config.Validate(8);         // InvalidArgument: dp=2 x pp=4 x cp=1 x tp=2 = 16 ranks, world size is 8
//   config.num_layers = 30;
//   config.Validate(16);        // InvalidArgument: num_layers=30 is not divisible by pp=4 x virtual_stages=1 ...
//   config.layers_per_stage = {7, 8, 8, 7};
//   config.Validate(16);        // OK: an explicit uneven layout covering 30 layers
//   config.ToMesh();            // Mesh pp=4,dp=2,cp=1,tp=2 (Megatron order tp-cp-dp-pp)
#ifndef LOOM_TOPOLOGY_PARALLEL_CONFIG_H_
#define LOOM_TOPOLOGY_PARALLEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/mesh.h"

namespace loom {

// The pipeline schedules a configuration can name. They differ here only in what they
// require of the configuration; the schedules themselves live in //pipeline.
enum class PipelineScheduleKind {
  kGPipe,
  k1F1B,
  kInterleaved1F1B,  // Needs virtual_stages >= 2 and num_microbatches >= pp.
  kZeroBubbleH1,
  kZeroBubbleV,      // Two stages per rank (V shape): virtual_stages == 2, num_microbatches >= pp.
};

// PipelineScheduleName returns "gpipe", "1f1b", "interleaved-1f1b", "zb-h1" or "zb-v".
absl::string_view PipelineScheduleName(PipelineScheduleKind kind);
// ParsePipelineSchedule reads those names; InvalidArgument naming the text otherwise.
absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(absl::string_view name);

struct ParallelConfig {
  int64_t dp = 1;  // Data parallel.
  int64_t pp = 1;  // Pipeline parallel (stages' ranks).
  int64_t cp = 1;  // Context (sequence) parallel.
  int64_t tp = 1;  // Tensor parallel.
  // Expert parallel, carved out of the dp x cp ranks as in Megatron-Core: must divide
  // dp * cp; it does not multiply the world size.
  int64_t ep = 1;

  // Model layers; 0 skips the layer checks (a config for a mesh only).
  int64_t num_layers = 0;
  // Optional explicit layout: layers of each pipeline stage (pp * virtual_stages
  // entries, in stage order). Empty means an even split, which then must divide.
  std::vector<int64_t> layers_per_stage;
  int64_t num_microbatches = 1;
  // Model chunks per pipeline rank (interleaved 1F1B: v >= 2; ZB-V: exactly 2).
  int64_t virtual_stages = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;

  // Validate checks the configuration against `world_size`. InvalidArgument, with
  // the numbers, for: a size, microbatch count or virtual-stage count below 1; a
  // product dp*pp*cp*tp different from world_size; ep not dividing dp*cp; layers not
  // divisible by pp*virtual_stages without an explicit layout; a layout with the wrong
  // number of stages, a negative entry or a sum other than num_layers; fewer
  // microbatches than stages for schedules that need more; virtual stages that the
  // schedule does not use.
  absl::Status Validate(int64_t world_size) const;

  // LayersPerStage returns the layout: the explicit one, or the even split.
  // InvalidArgument as in Validate when neither applies.
  absl::StatusOr<std::vector<int64_t>> LayersPerStage() const;

  // ToMesh returns the mesh of dp, pp, cp and tp laid out by a Megatron-style order
  // string (first name fastest); the default is Megatron's "tp-cp-dp-pp" without ep,
  // which puts tensor-parallel peers on adjacent ranks. InvalidArgument if the order
  // does not name exactly those four dimensions or a size is below 1.
  absl::StatusOr<Mesh> ToMesh(absl::string_view order = "tp-cp-dp-pp") const;

  // ToString returns "dp=2,pp=4,cp=1,tp=2,ep=1".
  std::string ToString() const;
};

}  // namespace loom

#endif  // LOOM_TOPOLOGY_PARALLEL_CONFIG_H_
