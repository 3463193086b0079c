// executor_vs_simulator: runs each schedule for real next to the simulator's
// prediction for the same costs, and prints a Markdown table (the README's).
//
// The workload is TinyMlp (tiny_mlp.h): `--layers` tanh layers of `--width`
// columns, microbatches of `--rows` rows, split evenly over the schedule's stages.
// For every schedule and pipeline size:
//   1. the costs of each stage's F, B, I and W are measured on this thread alone,
//      by calling the stage module directly (median of --repeats calls each);
//   2. Simulate (simulator.h) predicts the makespan from those per-stage costs,
//      with no transfer latency (an activation is 128 KiB at the defaults, copied
//      in microseconds next to milliseconds of compute);
//   3. the executor runs the schedule over the inproc transport, one thread per
//      rank, --steps times, and every step's gradients are checked bitwise
//      against the unpipelined reference; the measured wall time of a step runs
//      from the first rank's first action to the last rank's last completed send
//      (median step);
//   4. the schedule is simulated again with the durations its actions actually
//      took in that step (per stage and kind, median).
// Columns: "work / cores" is the larger of the simulated makespan and the ranks'
// total simulated busy time over min(p, cores): with fewer cores than ranks, a
// step cannot be shorter. "compute stretch" is the module time of all ranks in
// the run over the simulated busy time of step 1: above 1 when the ranks' threads
// compete for cores (more ranks than cores, or other load) or for memory
// bandwidth. The last column compares the measurement with step 4's prediction;
// where the ranks have cores of their own, what remains is the executor's own
// overhead and any waiting the schedule does not explain.
//
//   ./bazelw run //pipeline/executor:executor_vs_simulator
//   ./bazelw run //pipeline/executor:executor_vs_simulator --
//       --ranks=2 --microbatches=16 --schedules=1f1b,zb-h1   (one line)

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/transport.h"
#include "core/status_macros.h"
#include "pipeline/executor/executor.h"
#include "core/tensor.h"
#include "pipeline/executor/tiny_mlp.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"
#include "pipeline/stage_layout.h"
#include "topology/parallel_config.h"

ABSL_FLAG(std::string, schedules, "gpipe,1f1b,interleaved-1f1b,zb-h1,zb-v",
          "comma-separated schedules (interleaved-1f1b and zb-v run two stages per rank)");
ABSL_FLAG(std::string, ranks, "2,4", "comma-separated pipeline sizes p");
ABSL_FLAG(int64_t, microbatches, 8, "microbatches per step, m");
ABSL_FLAG(int64_t, layers, 16, "MLP layers; must split evenly over 2p stages for every p");
ABSL_FLAG(int64_t, width, 512, "columns of every layer (each layer is a width x width matmul)");
ABSL_FLAG(int64_t, rows, 64, "rows per microbatch");
ABSL_FLAG(int64_t, repeats, 7, "calls per stage and pass when measuring costs (median)");
ABSL_FLAG(int64_t, steps, 5, "executor steps per schedule (median wall time)");
ABSL_FLAG(int64_t, spin_iterations, 4000,
          "inproc transport polls before a wait blocks (InprocOptions::spin_iterations)");

namespace loom {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseList(const std::string& text) {
  std::vector<int64_t> values;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("not a number: \"", item, "\" in ", text));
    }
    values.push_back(value);
  }
  return values;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double Seconds(absl::Time start, absl::Time end) { return absl::ToDoubleSeconds(end - start); }

struct Workload {
  MlpConfig config;
  MlpParameters params;
  MlpData data;
};

std::vector<std::unique_ptr<MlpStageModule>> MakeModules(const Workload& work,
                                                         const StageLayout& layout,
                                                         bool split) {
  std::vector<std::unique_ptr<MlpStageModule>> modules;
  for (int64_t r = 0; r < layout.num_ranks(); ++r) {
    modules.push_back(*MlpStageModule::Create(work.config, layout, r, work.params, work.data, split));
  }
  return modules;
}

// MeasureStageCosts times each stage's passes by calling its module directly, on
// this thread, and returns the medians in seconds.
absl::StatusOr<std::vector<StageCosts>> MeasureStageCosts(const Workload& work,
                                                          const StageLayout& layout,
                                                          int64_t repeats) {
  std::vector<std::unique_ptr<MlpStageModule>> modules = MakeModules(work, layout, true);
  std::vector<StageCosts> costs;
  for (int64_t stage = 0; stage < layout.num_stages(); ++stage) {
    MlpStageModule& module = *modules[layout.RankOf(stage)];
    const Tensor input = *Tensor::Create(module.InputShape(stage, 0));
    Tensor output_grad = *Tensor::Create(module.OutputShape(stage, 0));
    // The span, not a reference into the StatusOr (a temporary the loop outlives).
    const absl::Span<float> grad_values = *output_grad.As<float>();
    for (float& v : grad_values) v = 1e-3f;
    std::vector<double> f, b, i, w;
    for (int64_t k = 0; k < repeats; ++k) {
      absl::Time t0 = absl::Now();
      LOOM_RETURN_IF_ERROR(module.Forward(stage, 0, input).status());
      absl::Time t1 = absl::Now();
      LOOM_RETURN_IF_ERROR(module.BackwardInput(stage, 0, output_grad).status());
      absl::Time t2 = absl::Now();
      LOOM_RETURN_IF_ERROR(module.BackwardWeight(stage, 0));
      absl::Time t3 = absl::Now();
      f.push_back(Seconds(t0, t1));
      i.push_back(Seconds(t1, t2));
      w.push_back(Seconds(t2, t3));
      LOOM_RETURN_IF_ERROR(module.Forward(stage, 0, input).status());
      t0 = absl::Now();
      LOOM_RETURN_IF_ERROR(module.Backward(stage, 0, output_grad).status());
      b.push_back(Seconds(t0, absl::Now()));
    }
    costs.push_back({Median(f), Median(b), Median(i), Median(w)});
  }
  return costs;
}

struct Measured {
  double wall = 0;     // Median step: first action of any rank to last send done.
  double compute = 0;  // Module time summed over ranks, in that step.
  // Per stage, the median duration of each kind of action in that step, where
  // the schedule has it (the isolated cost otherwise).
  std::vector<StageCosts> in_run_costs;
};

// InRunCosts returns the per-stage medians of the compute actions' durations.
std::vector<StageCosts> InRunCosts(const std::vector<RankExecution>& ranks,
                                   std::vector<StageCosts> costs) {
  std::vector<std::vector<std::vector<double>>> durations(
      costs.size(), std::vector<std::vector<double>>(4));
  for (const RankExecution& rank : ranks) {
    for (const ExecutedAction& executed : rank.actions) {
      const int kind = static_cast<int>(executed.action.kind);
      if (kind < 4) {  // F, B, I, W
        durations[executed.action.stage][kind].push_back(Seconds(executed.start, executed.end));
      }
    }
  }
  for (size_t stage = 0; stage < costs.size(); ++stage) {
    double* fields[4] = {&costs[stage].forward, &costs[stage].backward,
                         &costs[stage].backward_input, &costs[stage].backward_weight};
    for (int kind = 0; kind < 4; ++kind) {
      if (!durations[stage][kind].empty()) *fields[kind] = Median(durations[stage][kind]);
    }
  }
  return costs;
}

// RunExecutor runs `steps` steps of `executor` on one thread per rank, checks
// that every step's gradients equal `expected` bit for bit, and returns the
// median step.
absl::StatusOr<Measured> RunExecutor(const PipelineExecutor& executor, const Workload& work,
                                     const StageLayout& layout, bool split, int64_t steps,
                                     int spin_iterations, const MlpGradients& expected,
                                     const std::vector<StageCosts>& isolated_costs) {
  const int p = static_cast<int>(layout.num_ranks());
  InprocOptions inproc;
  inproc.spin_iterations = spin_iterations;
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(p, inproc));
  std::vector<std::unique_ptr<Transport>> endpoints;
  for (int r = 0; r < p; ++r) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, group->Endpoint(r));
    endpoints.push_back(std::move(endpoint));
  }
  std::vector<std::unique_ptr<MlpStageModule>> modules = MakeModules(work, layout, split);
  std::vector<Measured> runs;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<absl::StatusOr<RankExecution>> results(
        p, absl::StatusOr<RankExecution>(absl::UnknownError("did not run")));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      threads.emplace_back([&, r] {
        modules[r]->BeginStep();
        results[r] = executor.Run(*endpoints[r], *modules[r]);
      });
    }
    for (std::thread& thread : threads) thread.join();
    absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
    Measured run;
    std::vector<RankExecution> executions;
    for (int r = 0; r < p; ++r) {
      if (!results[r].ok()) return results[r].status();
      first = std::min(first, results[r]->start);
      last = std::max(last, results[r]->end);
      run.compute += absl::ToDoubleSeconds(results[r]->compute);
      executions.push_back(*std::move(results[r]));
    }
    run.wall = Seconds(first, last);
    run.in_run_costs = InRunCosts(executions, isolated_costs);
    runs.push_back(std::move(run));
    std::vector<const MlpStageModule*> views;
    for (const auto& module : modules) views.push_back(module.get());
    const MlpGradients got = GatherGradients(work.config, views);
    if (!(got.grads == expected.grads) || got.loss != expected.loss) {
      return absl::InternalError(absl::StrCat(executor.schedule().name, " p=", p, " step ", step,
                                              ": gradients differ from the reference"));
    }
  }
  std::sort(runs.begin(), runs.end(),
            [](const Measured& a, const Measured& b) { return a.wall < b.wall; });
  return runs[runs.size() / 2];
}

absl::Status Main() {
  LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> ranks, ParseList(absl::GetFlag(FLAGS_ranks)));
  const int64_t m = absl::GetFlag(FLAGS_microbatches);
  const int64_t layers = absl::GetFlag(FLAGS_layers);
  const int64_t repeats = absl::GetFlag(FLAGS_repeats);
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  if (m < 1 || layers < 1 || repeats < 1 || steps < 1 || absl::GetFlag(FLAGS_width) < 1 ||
      absl::GetFlag(FLAGS_rows) < 1) {
    return absl::InvalidArgumentError(
        "--microbatches, --layers, --width, --rows, --repeats and --steps must be at least 1");
  }

  Workload work;
  work.config.widths.assign(static_cast<size_t>(layers + 1), absl::GetFlag(FLAGS_width));
  work.config.rows = absl::GetFlag(FLAGS_rows);
  work.config.num_microbatches = m;
  work.params = MakeMlpParameters(work.config);
  work.data = MakeMlpData(work.config);

  std::printf("TinyMlp: %lld layers of %lld x %lld, microbatches of %lld rows; %u cores; "
              "ranks are threads over the inproc transport\n\n",
              static_cast<long long>(layers), static_cast<long long>(work.config.widths[0]),
              static_cast<long long>(work.config.widths[0]),
              static_cast<long long>(work.config.rows), std::thread::hardware_concurrency());
  // One reference for every row: the bench never updates the parameters.
  const MlpGradients expected = MlpReference(work.config, work.params, work.data);
  std::printf(
      "| schedule | p | m | v | stage 0 F / B / I / W (ms) | simulated bubble | simulated (ms) | "
      "work / cores (ms) | measured (ms) | measured / simulated | compute stretch | "
      "simulated, in-run costs (ms) | measured / that |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_schedules), ',',
                                               absl::SkipEmpty())) {
    LOOM_ASSIGN_OR_RETURN(const PipelineScheduleKind kind, ParsePipelineSchedule(name));
    const bool two_per_rank = kind == PipelineScheduleKind::kInterleaved1F1B ||
                              kind == PipelineScheduleKind::kZeroBubbleV;
    const bool split = kind == PipelineScheduleKind::kZeroBubbleH1 ||
                       kind == PipelineScheduleKind::kZeroBubbleV;
    for (const int64_t p : ranks) {
      const int64_t v = two_per_rank ? 2 : 1;
      LOOM_ASSIGN_OR_RETURN(Schedule schedule, MakeSchedule(kind, p, m, v));
      LOOM_ASSIGN_OR_RETURN(const StageLayout layout, schedule.layout.WithEvenLayers(layers));
      LOOM_ASSIGN_OR_RETURN(const std::vector<StageCosts> stage_costs,
                            MeasureStageCosts(work, layout, repeats));
      SimulationCosts costs;
      costs.per_stage = stage_costs;
      LOOM_ASSIGN_OR_RETURN(const SimulationResult simulated, Simulate(schedule, costs));
      double simulated_busy = 0;
      for (const RankTimeline& rank : simulated.ranks) simulated_busy += rank.busy;

      LOOM_ASSIGN_OR_RETURN(const PipelineExecutor executor, PipelineExecutor::Create(schedule));
      LOOM_ASSIGN_OR_RETURN(
          const Measured measured,
          RunExecutor(executor, work, layout, split, steps,
                      static_cast<int>(absl::GetFlag(FLAGS_spin_iterations)), expected,
                      stage_costs));
      SimulationCosts in_run;
      in_run.per_stage = measured.in_run_costs;
      LOOM_ASSIGN_OR_RETURN(const SimulationResult resimulated, Simulate(schedule, in_run));
      const StageCosts& c = stage_costs[0];
      // On fewer cores than ranks, the ranks' work cannot all overlap: the step
      // takes at least the total work over the cores.
      const double cores = std::max(1u, std::thread::hardware_concurrency());
      const double bound = std::max(
          simulated.makespan, simulated_busy / std::min(static_cast<double>(p), cores));
      std::printf("| %s | %lld | %lld | %lld | %.2f / %.2f / %.2f / %.2f | %.3f | %.1f | %.1f | "
                  "%.1f | %.2f | %.2f | %.1f | %.2f |\n",
                  schedule.name.c_str(), static_cast<long long>(p), static_cast<long long>(m),
                  static_cast<long long>(v), 1e3 * c.forward, 1e3 * c.backward,
                  1e3 * c.backward_input, 1e3 * c.backward_weight, simulated.bubble_ratio,
                  1e3 * simulated.makespan, 1e3 * bound, 1e3 * measured.wall,
                  measured.wall / simulated.makespan, measured.compute / simulated_busy,
                  1e3 * resimulated.makespan, measured.wall / resimulated.makespan);
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = loom::Main();
  if (!status.ok()) {
    std::fprintf(stderr, "executor_vs_simulator: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
