// The planner's `this-cpu` device: this host measured on the spot, one device per
// rank of a job of `ranks` ranks (threads share the host's cores: ranks x threads <=
// cores, as `train --threads_per_rank` allows), and the efficiency constants fitted
// to one run of the training job itself.
//  - MeasureThisCpu: the FMA peak of one core (core/fma_peak.h) times the rank's
//    threads, the memory bandwidth (a copy over every core; each rank gets its share),
//    the host's memory over the ranks, and alpha and beta of two thread ranks over
//    Loom's inproc transport (collectives/calibration.h), which the job's thread
//    ranks talk over, as both the link inside the "node" and between nodes.
//  - FitToJobRun: the GEMM and attention efficiencies and the element-wise passes
//    that make the step model reproduce a one-rank run of `train` (its
//    `--summary_json`): the products' seconds over their FLOPs, the attention's, the
//    rest of compute over the activation bytes, and what the step took beyond its
//    compute and optimizer as a fixed overhead per step.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(ThisCpu cpu, MeasureThisCpu(/*ranks=*/2));
//   cpu.device.peak_f32_flops;     // 2.8e11 on one core of this 2-core AMD EPYC VM
//   cpu.threads_per_rank;          // 1 on a 2-core host
//   LOOM_ASSIGN_OR_RETURN(JobRun run, ParseJobSummary(json_text));   // train --summary_json
//   LOOM_ASSIGN_OR_RETURN(DeviceSpec fitted, FitToJobRun(cpu.device, run));
//   fitted.gemm_max_efficiency;    // 0.51 for train's 4-layer, hidden-256 model here
#ifndef LOOM_TOOLS_PLANNER_THIS_CPU_H_
#define LOOM_TOOLS_PLANNER_THIS_CPU_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/planner/device.h"
#include "tools/planner/model_flops.h"
#include "tools/planner/step_model.h"

namespace loom {
namespace planner {

struct ThisCpu {
  DeviceSpec device;  // one rank's share
  int cores = 0;
  int threads_per_rank = 0;
  double host_memory_bandwidth = 0;  // bytes/s, all cores
  std::string cpu_model;
};

// CpuDeviceDefaults returns the constants of a CPU device before any fit: Loom's
// fused attention, the gradient all-reduce beside the last backward (train's
// --overlap_grad_reduce), a GEMM half width of 32.
DeviceSpec CpuDeviceDefaults();

// MeasureThisCpu measures the host for a job of `ranks` ranks of `threads_per_rank`
// threads each (0: the host's cores over the ranks, at least 1, as the job's
// default), in about a second. InvalidArgument for ranks below 1 or negative
// threads; the measurements' errors.
absl::StatusOr<ThisCpu> MeasureThisCpu(int64_t ranks, int threads_per_rank = 0);

// JobRun: what the planner reads of a `train --summary_json`.
struct JobRun {
  TransformerShape shape;
  PlanConfig config;
  int64_t global_batch = 0;
  int threads_per_rank = 0;
  // train --overlap_grad_reduce (a summary without the key: true, the default).
  bool overlap_grad_reduce = true;
  double step_seconds = 0;  // from tokens_per_second
  double compute_seconds = 0, gemm_seconds = 0, attention_seconds = 0;
  double optimizer_seconds = 0, dp_comm_seconds = 0, pp_comm_seconds = 0;
};

// ParseJobSummary reads the summary. InvalidArgument naming the first key missing or
// not a number.
absl::StatusOr<JobRun> ParseJobSummary(absl::string_view json);

// FitToJobRun returns `device` with gemm_max_efficiency, attention_efficiency and
// elementwise_passes fitted to `run`: a one-rank run, or a data-parallel one (dp
// ranks on one host, tp = pp = cp = 1), whose ranks compute global_batch / dp
// sequences each at the speed the host gives dp ranks at once. The second is the
// better calibration for a job whose ranks share the host's cores and memory
// bandwidth (tools/docs/train.md, "Across hosts": one rank alone computed 8
// sequences in 258 ms, two at once 286..317 ms each). FailedPrecondition when tp, pp
// or cp is above 1; InvalidArgument when the global batch is not dp x micro_batch x
// microbatches or a part of its compute is not positive. (The caller checks the run
// had the threads its device stands for.)
absl::StatusOr<DeviceSpec> FitToJobRun(const DeviceSpec& device, const JobRun& run);

// FitToJobRuns: the same over several runs of one dp, threads per rank, width,
// sequence and dtype (InvalidArgument naming them otherwise) whose microbatch sizes
// differ: it also fits gemm_half_rows (the products' efficiency falls as a
// microbatch has fewer rows) and grad_accumulate_passes (each microbatch adds its
// weight gradients into the accumulators), which one run cannot separate from the
// products' and the element-wise work. Attention and the step's overhead come from
// the first run. A single run, or runs whose microbatch sizes agree, fit as
// FitToJobRun with those two kept. Measured on 2 AMD EPYC cores (tools/docs/train.md):
// 4 microbatches of 2 sequences computed 1.01 s against 0.77 s for 1 of 8.
absl::StatusOr<DeviceSpec> FitToJobRuns(const DeviceSpec& device, const std::vector<JobRun>& runs);

// MeasureAndFit: MeasureThisCpu, then the device fitted (FitToJobRuns) to the first of
// `calibrations` that ran with the threads a rank gets and every later one of the
// same dp, width, sequence and dtype (`fitted` false, and the defaults kept, when
// none did).
struct FittedCpu {
  ThisCpu cpu;
  bool fitted = false;
  int runs_fitted = 0;  // the calibration runs FitToJobRuns used
};
absl::StatusOr<FittedCpu> MeasureAndFit(int64_t ranks, int threads_per_rank,
                                        const std::vector<JobRun>& calibrations);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_THIS_CPU_H_
