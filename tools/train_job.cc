#include "tools/train_job.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "pipeline/executor/executor.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "tools/gpt/gpt_parameter.h"
#include "tools/gpt/gpt_stage_module.h"
#include "tools/gpt/markov_data.h"
#include "zero3/partition.h"
#include "zero3/zero3_engine.h"

namespace loom {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(120);

// The communicators and the pipeline endpoint of one rank: separate transports
// for each dimension, since the ZeRO engine drives dp from its own thread while
// the layers drive tp and the executor drives pp.
struct RankWiring {
  int rank = 0, d = 0, s = 0, t = 0;
  std::unique_ptr<Communicator> tp, dp, world;
  // Every endpoint of the rank, aborted when it fails so that its peers in each
  // group stop waiting at once instead of at their deadlines.
  std::vector<std::shared_ptr<Transport>> endpoints;
  std::unique_ptr<Transport> pp;
};

// Figures one rank reports for a step, read by world rank 0 after a barrier.
struct RankStep {
  double loss = 0;      // the stage's mean loss (last stage only)
  bool holds_loss = false;
  int64_t state_bytes = 0;
  int64_t sharded_bytes = 0;
  int64_t disk_bytes = 0;
  int64_t comm_bytes = 0;  // sent, this step
  int64_t peak_activation_bytes = 0;
};

uint64_t SentBytes(const Communicator& comm) {
  uint64_t total = 0;
  for (const CollectiveKind kind : AllCollectiveKinds()) total += comm.Counters(kind).bytes_sent;
  return total;
}

// One rank's optimizer: ZeRO-3 (engine) or plain data parallelism (whole AdamW).
class RankOptimizer {
 public:
  virtual ~RankOptimizer() = default;
  // BeforeStep makes the model's weights current (zero 3: gathers them).
  virtual absl::Status BeforeStep() = 0;
  // AfterBackward reduces the gradients over dp and applies AdamW.
  virtual absl::Status AfterBackward(int64_t step) = 0;
  virtual int64_t StateBytes() const = 0;
  virtual int64_t ShardedBytes() const = 0;
  virtual int64_t DiskBytes() const { return 0; }
};

AdamWHyper Hyper(const TrainJobOptions& options, int64_t step) {
  AdamWHyper hyper;
  hyper.lr = options.lr;
  hyper.weight_decay = options.weight_decay;
  hyper.eps = options.adam_eps;
  hyper.step = step;
  return hyper;
}

// ZeRO stages 1, 2 and 3 through zero3/Zero3Engine. The stage's layers own their
// weights for the whole step, so the engine's part is one gather before the step
// (nothing to gather at stages 1 and 2, which keep the whole parameters) and one
// kGradients pass plus Step after it.
class ShardedOptimizer : public RankOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<ShardedOptimizer>> Create(
      const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp,
      DiskTier* disk, const std::string& disk_prefix) {
    std::vector<ParamSpec> specs;
    std::vector<float> initial;
    for (const GptParameter& p : params) {
      specs.push_back({p.name, p.shape});
      initial.insert(initial.end(), p.values.begin(), p.values.end());
    }
    PartitionOptions partition_options;
    partition_options.dp_size = options.dp;
    partition_options.bucket_numel = 1 << 15;
    partition_options.persistence_threshold = 256;
    LOOM_ASSIGN_OR_RETURN(Partition partition, Partition::Create(specs, partition_options));
    Zero3Options zero;
    zero.stage = options.zero;
    zero.compute_dtype = options.dtype;
    zero.offload_optimizer = options.offload != OffloadKind::kNone;
    zero.optimizer_disk = disk;
    zero.disk_prefix = disk_prefix;
    zero.adamw_threads = options.adamw_threads;
    zero.timeout = kTimeout;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Engine> engine,
                          Zero3Engine::Create(partition, dp, initial, zero));
    return std::unique_ptr<ShardedOptimizer>(
        new ShardedOptimizer(options, std::move(params), std::move(engine)));
  }

  absl::Status BeforeStep() override {
    LOOM_RETURN_IF_ERROR(engine_->BeginPass(Zero3Pass::kForward));
    for (size_t p = 0; p < params_.size(); ++p) {
      LOOM_ASSIGN_OR_RETURN(absl::Span<const float> w, engine_->Acquire(static_cast<int>(p)));
      std::copy(w.begin(), w.end(), params_[p].values.begin());
    }
    return engine_->EndPass();
  }

  absl::Status AfterBackward(int64_t step) override {
    LOOM_RETURN_IF_ERROR(engine_->BeginPass(Zero3Pass::kGradients));
    for (int p = static_cast<int>(params_.size()) - 1; p >= 0; --p) {
      LOOM_RETURN_IF_ERROR(engine_->AddGrad(p, params_[p].grad));
    }
    LOOM_RETURN_IF_ERROR(engine_->EndPass());
    return engine_->Step(Hyper(options_, step));
  }

  int64_t ShardedBytes() const override {
    const Zero3Stats stats = engine_->Stats();
    return stats.model_state_bytes + stats.persistent_state_bytes;
  }
  int64_t DiskBytes() const override { return engine_->Stats().disk_state_bytes; }
  int64_t StateBytes() const override {
    int64_t resident = 0;
    for (const GptParameter& p : params_) {
      resident += static_cast<int64_t>((p.values.size() + p.grad.size()) * sizeof(float));
    }
    return ShardedBytes() + resident;
  }

 private:
  ShardedOptimizer(const TrainJobOptions& options, std::vector<GptParameter> params,
                 std::unique_ptr<Zero3Engine> engine)
      : options_(options), params_(std::move(params)), engine_(std::move(engine)) {}

  TrainJobOptions options_;
  std::vector<GptParameter> params_;
  std::unique_ptr<Zero3Engine> engine_;
};

// Plain data parallelism: every rank keeps the whole AdamW state, gradients are
// averaged by one all-reduce of the flattened gradients.
class DataParallelOptimizer : public RankOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> Create(
      const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp) {
    int64_t total = 0;
    for (const GptParameter& p : params) total += static_cast<int64_t>(p.values.size());
    LOOM_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(total));
    auto optimizer = std::unique_ptr<DataParallelOptimizer>(
        new DataParallelOptimizer(options, std::move(params), dp, std::move(state)));
    optimizer->master_.resize(static_cast<size_t>(total));
    optimizer->flat_grad_.resize(static_cast<size_t>(total));
    size_t at = 0;
    for (const GptParameter& p : optimizer->params_) {
      std::copy(p.values.begin(), p.values.end(), optimizer->master_.begin() + at);
      at += p.values.size();
    }
    return optimizer;
  }

  absl::Status BeforeStep() override { return absl::OkStatus(); }

  absl::Status AfterBackward(int64_t step) override {
    size_t at = 0;
    for (const GptParameter& p : params_) {
      std::copy(p.grad.begin(), p.grad.end(), flat_grad_.begin() + at);
      at += p.grad.size();
    }
    if (dp_->size() > 1) {
      LOOM_RETURN_IF_ERROR(dp_->AllReduce(absl::MakeSpan(flat_grad_), ReduceOp::kAvg));
    }
    AdamWOptions adam;
    adam.threads = options_.offload == OffloadKind::kCpu ? options_.adamw_threads : 1;
    LOOM_RETURN_IF_ERROR(AdamWStep(Hyper(options_, step), absl::MakeSpan(master_), flat_grad_,
                                   state_, adam));
    at = 0;
    for (GptParameter& p : params_) {
      std::copy_n(master_.begin() + at, p.values.size(), p.values.begin());
      at += p.values.size();
    }
    return absl::OkStatus();
  }

  int64_t ShardedBytes() const override { return 0; }
  int64_t StateBytes() const override {
    // The model's weights are the master copy here: params 4 + grads 4 + m, v 8.
    return static_cast<int64_t>(master_.size() * sizeof(float) * 2) +
           static_cast<int64_t>(state_.size_bytes());
  }

 private:
  DataParallelOptimizer(const TrainJobOptions& options, std::vector<GptParameter> params,
                        Communicator* dp, AdamWState state)
      : options_(options), params_(std::move(params)), dp_(dp), state_(std::move(state)) {}

  TrainJobOptions options_;
  std::vector<GptParameter> params_;
  Communicator* dp_;
  AdamWState state_;
  std::vector<float> master_;
  std::vector<float> flat_grad_;
};

std::string TraceEvents(const std::vector<RankExecution>& executions, int world) {
  absl::Time origin = absl::InfiniteFuture();
  for (const RankExecution& e : executions) {
    if (!e.actions.empty()) origin = std::min(origin, e.start);
  }
  std::string out = "{\"traceEvents\":[";
  bool first = true;
  for (int r = 0; r < world; ++r) {
    absl::StrAppend(&out, first ? "" : ",",
                    absl::StrFormat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                                    "\"args\":{\"name\":\"rank %d\"}}",
                                    r, r));
    first = false;
    for (const ExecutedAction& a : executions[r].actions) {
      absl::StrAppend(
          &out, ",",
          absl::StrFormat("{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                          "\"dur\":%.3f}",
                          a.action.ToString(), r, absl::ToDoubleMicroseconds(a.start - origin),
                          absl::ToDoubleMicroseconds(a.end - a.start)));
    }
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

}  // namespace

std::string StepReport::ToString() const {
  return absl::StrFormat(
      "step %4d  loss %.4f  %7.1f ms  %9.0f tokens/s  model state %s/rank  sent %s/rank",
      step, loss, seconds * 1e3, tokens_per_second,
      absl::StrFormat("%.2f MiB", static_cast<double>(model_state_bytes) / (1 << 20)),
      absl::StrFormat("%.2f MiB", static_cast<double>(comm_bytes) / (1 << 20)));
}

absl::Status ValidateTrainJob(const TrainJobOptions& o) {
  if (o.dp < 1 || o.pp < 1 || o.tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp ", o.dp, " --pp ", o.pp, " --tp ", o.tp, ": each must be >= 1"));
  }
  if (o.dp * o.pp * o.tp > 64) {
    return absl::InvalidArgumentError(absl::StrCat("--dp ", o.dp, " x --pp ", o.pp, " x --tp ",
                                                   o.tp, " = ", o.dp * o.pp * o.tp,
                                                   " thread ranks; at most 64"));
  }
  if (absl::Status s = o.model.Validate(o.tp); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", s.message()));
  }
  const int64_t stages_per_rank = o.schedule == PipelineScheduleKind::kInterleaved1F1B ? 2 : 1;
  const int64_t stages = o.pp * stages_per_rank;
  if (o.model.layers % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layers ", o.model.layers, " is not divisible by the ", stages,
        " pipeline stages (--pp ", o.pp,
        stages_per_rank > 1 ? " x 2 virtual stages for interleaved-1f1b" : "", ")"));
  }
  if (o.schedule == PipelineScheduleKind::kZeroBubbleH1 ||
      o.schedule == PipelineScheduleKind::kZeroBubbleV) {
    return absl::UnimplementedError(absl::StrCat(
        "--schedule ", PipelineScheduleName(o.schedule),
        " splits the backward into input and weight parts, which the GPT stage module does not "
        "do yet; use gpipe, 1f1b or interleaved-1f1b"));
  }
  if (o.microbatches < o.pp) {
    return absl::InvalidArgumentError(absl::StrCat("--microbatches ", o.microbatches,
                                                   " is fewer than --pp ", o.pp,
                                                   ": the pipeline would never fill"));
  }
  if (o.micro_batch < 1 || o.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--micro_batch ", o.micro_batch, " and --steps ",
                                                   o.steps, " must be >= 1"));
  }
  if (o.zero < 0 || o.zero > 3) {
    return absl::InvalidArgumentError(absl::StrCat("--zero ", o.zero, " must be 0, 1, 2 or 3"));
  }
  if (o.offload == OffloadKind::kNvme && o.zero == 0) {
    return absl::InvalidArgumentError(
        "--offload nvme needs --zero 1, 2 or 3 (the ZeRO engine keeps the optimizer state on "
        "disk)");
  }
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype ", DTypeName(o.dtype), " must be f32 or bf16"));
  }
  if (o.dtype == DType::kBF16 && o.zero == 0) {
    return absl::InvalidArgumentError(
        "--dtype bf16 needs --zero 1, 2 or 3 (the ZeRO engine keeps the f32 master)");
  }
  if (o.adamw_threads < 1 || o.adamw_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--adamw_threads ", o.adamw_threads, " is not in [1, 256]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step) {
  LOOM_RETURN_IF_ERROR(ValidateTrainJob(options));
  const int dp = options.dp, pp = options.pp, tp = options.tp;
  const int world = dp * pp * tp;
  const int64_t virtual_stages =
      options.schedule == PipelineScheduleKind::kInterleaved1F1B ? 2 : 1;
  absl::StatusOr<Schedule> schedule =
      MakeSchedule(options.schedule, pp, options.microbatches, virtual_stages);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", schedule.status().message()));
  }
  ExecutorOptions executor_options;
  executor_options.timeout = kTimeout;
  LOOM_ASSIGN_OR_RETURN(const PipelineExecutor executor,
                        PipelineExecutor::Create(*schedule, executor_options));

  MarkovOptions markov;
  markov.vocab = options.model.vocab;
  markov.seq_len = options.model.seq_len;
  markov.branching = options.markov_branching;
  markov.seed = options.data_seed;
  LOOM_ASSIGN_OR_RETURN(const MarkovData data, MarkovData::Create(markov));
  BatchLayout batch;
  batch.micro_batch = options.micro_batch;
  batch.num_microbatches = options.microbatches;
  batch.dp_size = dp;

  // One inproc group per line of each dimension, plus the world (barriers).
  // Rank order: tp fastest, then pp, then dp.
  auto rank_of = [&](int d, int s, int t) { return (d * pp + s) * tp + t; };
  std::vector<std::shared_ptr<InprocGroup>> tp_groups, pp_groups, dp_groups;
  for (int i = 0; i < dp * pp; ++i) tp_groups.push_back(*InprocGroup::Create(tp));
  for (int i = 0; i < dp * tp; ++i) pp_groups.push_back(*InprocGroup::Create(pp));
  for (int i = 0; i < pp * tp; ++i) dp_groups.push_back(*InprocGroup::Create(dp));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> world_group, InprocGroup::Create(world));

  std::vector<RankWiring> wiring(world);
  CommunicatorOptions comm_options;
  comm_options.timeout = kTimeout;
  for (int d = 0; d < dp; ++d) {
    for (int s = 0; s < pp; ++s) {
      for (int t = 0; t < tp; ++t) {
        RankWiring& w = wiring[rank_of(d, s, t)];
        w.rank = rank_of(d, s, t);
        w.d = d;
        w.s = s;
        w.t = t;
        auto make = [&](const std::shared_ptr<InprocGroup>& g,
                        int r) -> absl::StatusOr<std::unique_ptr<Communicator>> {
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, g->Endpoint(r));
          w.endpoints.push_back(std::move(endpoint));
          return Communicator::Create(w.endpoints.back(), comm_options);
        };
        LOOM_ASSIGN_OR_RETURN(w.tp, make(tp_groups[d * pp + s], t));
        LOOM_ASSIGN_OR_RETURN(w.dp, make(dp_groups[s * tp + t], d));
        LOOM_ASSIGN_OR_RETURN(w.world, make(world_group, w.rank));
        LOOM_ASSIGN_OR_RETURN(w.pp, pp_groups[d * tp + t]->Endpoint(s));
      }
    }
  }

  // --offload nvme: one DiskTier for every rank (names carry the rank's stage, tp
  // and dp coordinates), in a fresh directory unless one is named.
  std::unique_ptr<DiskTier> disk;
  std::string made_dir;
  auto remove_made_dir = absl::MakeCleanup([&made_dir] {
    if (!made_dir.empty()) rmdir(made_dir.c_str());
  });
  if (options.offload == OffloadKind::kNvme) {
    DiskTierOptions disk_options;
    if (options.nvme_dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern =
          absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/loom_train_nvme.XXXXXX");
      if (mkdtemp(pattern.data()) == nullptr) {
        return absl::UnavailableError(
            absl::StrCat("--offload nvme: mkdtemp ", pattern, ": ", std::strerror(errno)));
      }
      made_dir = pattern;
      disk_options.directories = {made_dir};
    } else {
      disk_options.directories = absl::StrSplit(options.nvme_dir, ':', absl::SkipEmpty());
    }
    absl::StatusOr<std::unique_ptr<DiskTier>> created = DiskTier::Create(disk_options);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("--nvme_dir: ", created.status().message()));
    }
    disk = std::move(*created);
  }

  TrainSummary summary;
  summary.uniform_loss = std::log(static_cast<double>(options.model.vocab));
  summary.entropy_rate = data.EntropyRate();
  summary.final_params.resize(world);
  std::vector<RankStep> reports(world);
  std::vector<RankExecution> last_executions(world);
  std::vector<absl::Status> results(world);
  const int64_t tokens_per_step =
      dp * options.microbatches * options.micro_batch * options.model.seq_len;

  auto run_rank = [&](RankWiring& w) -> absl::Status {
    GptStageModuleOptions module_options;
    module_options.micro_batch = options.micro_batch;
    module_options.num_microbatches = options.microbatches;
    module_options.recompute = options.recompute;
    const int d = w.d;
    GptMicrobatchFn data_fn = [&data, batch, d](int64_t step, int64_t mb) {
      return data.Microbatch(batch, step, mb, d);
    };
    LOOM_ASSIGN_OR_RETURN(
        std::unique_ptr<GptStageModule> module,
        GptStageModule::Create(options.model, schedule->layout, w.s, *w.tp, data_fn,
                               module_options));
    std::unique_ptr<RankOptimizer> optimizer;
    if (options.zero > 0) {
      LOOM_ASSIGN_OR_RETURN(
          optimizer, ShardedOptimizer::Create(options, module->Parameters(), w.dp.get(),
                                              disk.get(), absl::StrCat("train.s", w.s, ".t", w.t)));
    } else {
      LOOM_ASSIGN_OR_RETURN(optimizer, DataParallelOptimizer::Create(
                                           options, module->Parameters(), w.dp.get()));
    }
    uint64_t sent_before = 0;
    for (int64_t step = 0; step < options.steps; ++step) {
      const absl::Time start = absl::Now();
      module->BeginStep(step);
      LOOM_RETURN_IF_ERROR(optimizer->BeforeStep());
      LOOM_ASSIGN_OR_RETURN(last_executions[w.rank], executor.Run(*w.pp, *module));
      LOOM_RETURN_IF_ERROR(optimizer->AfterBackward(step + 1));
      const uint64_t sent = SentBytes(*w.tp) + SentBytes(*w.dp);
      RankStep& report = reports[w.rank];
      report.holds_loss = module->holds_loss();
      report.loss = report.holds_loss ? static_cast<double>(module->loss()) : 0.0;
      report.state_bytes = optimizer->StateBytes();
      report.sharded_bytes = optimizer->ShardedBytes();
      report.disk_bytes = optimizer->DiskBytes();
      report.comm_bytes = static_cast<int64_t>(sent - sent_before);
      for (const int64_t stage : module->stages()) {
        report.peak_activation_bytes =
            std::max(report.peak_activation_bytes,
                     static_cast<int64_t>(module->model(stage).peak_activation_bytes()));
      }
      sent_before = sent;
      // Everyone's report is in before rank 0 reads them.
      LOOM_RETURN_IF_ERROR(w.world->Barrier());
      if (w.rank == 0) {
        StepReport line;
        line.step = step + 1;
        int losses = 0;
        for (const RankStep& r : reports) {
          if (r.holds_loss && r.loss == r.loss) {
            line.loss += r.loss;
            ++losses;
          }
          line.model_state_bytes = std::max(line.model_state_bytes, r.state_bytes);
          line.comm_bytes = std::max(line.comm_bytes, r.comm_bytes);
          summary.sharded_state_bytes_per_rank =
              std::max(summary.sharded_state_bytes_per_rank, r.sharded_bytes);
          summary.disk_state_bytes_per_rank =
              std::max(summary.disk_state_bytes_per_rank, r.disk_bytes);
          summary.peak_activation_bytes_per_rank =
              std::max(summary.peak_activation_bytes_per_rank, r.peak_activation_bytes);
        }
        // The last stage's tp ranks all hold the same loss: average over them and dp.
        line.loss /= std::max(losses, 1);
        line.seconds = absl::ToDoubleSeconds(absl::Now() - start);
        line.tokens_per_second = static_cast<double>(tokens_per_step) / line.seconds;
        summary.steps.push_back(line);
        if (on_step) on_step(line);
      }
      // Nobody overwrites a report before rank 0 has read it.
      LOOM_RETURN_IF_ERROR(w.world->Barrier());
    }
    LOOM_RETURN_IF_ERROR(optimizer->BeforeStep());  // zero 3: the final weights
    RankParameters& out = summary.final_params[w.rank];
    out.tp_rank = w.t;
    for (GptParameter p : module->Parameters()) {
      out.values.emplace_back(p.values.begin(), p.values.end());
      p.values = {};
      p.grad = {};
      out.params.push_back(std::move(p));
    }
    return absl::OkStatus();
  };

  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = run_rank(wiring[r]);
      // A rank that failed tells the others at once instead of at their deadline.
      if (!results[r].ok()) {
        for (const std::shared_ptr<Transport>& endpoint : wiring[r].endpoints) {
          endpoint->Abort(results[r]);
        }
        wiring[r].pp->Abort(results[r]);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  // The first failure that is not just another rank's abort.
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok() && results[r].code() != absl::StatusCode::kUnavailable) {
      return absl::Status(results[r].code(),
                          absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  summary.final_loss = summary.steps.back().loss;
  int64_t comm = 0;
  for (const StepReport& line : summary.steps) {
    summary.peak_model_state_bytes_per_rank =
        std::max(summary.peak_model_state_bytes_per_rank, line.model_state_bytes);
    comm += line.comm_bytes;
  }
  summary.comm_bytes_per_rank_per_step = comm / static_cast<int64_t>(summary.steps.size());
  summary.tokens_per_second = static_cast<double>(tokens_per_step * options.steps) / seconds;
  summary.trace_json = TraceEvents(last_executions, world);
  return summary;
}

absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary) {
  TrainJobOptions one = options;
  one.dp = 1;
  one.pp = 1;
  one.tp = 1;
  // Plain one-rank training, unless bf16 compute needs the ZeRO engine's f32 master
  // (at dp 1 it shards nothing); the optimizer state stays in memory.
  one.zero = options.dtype == DType::kBF16 ? 3 : 0;
  one.offload = OffloadKind::kNone;
  one.nvme_dir.clear();
  one.schedule = PipelineScheduleKind::kGPipe;
  // The same global batch: dp ranks' microbatches, one after another.
  one.microbatches = options.microbatches * options.dp;
  LOOM_ASSIGN_OR_RETURN(const TrainSummary reference, RunTrainJob(one, nullptr));
  std::map<std::string, const std::vector<float>*> full;
  const RankParameters& ref = reference.final_params[0];
  ReferenceComparison out;
  out.reference_final_loss = reference.final_loss;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    full[ref.params[i].name] = &ref.values[i];
    for (const float v : ref.values[i]) {
      out.max_abs_param = std::max(out.max_abs_param, std::fabs(double{v}));
    }
  }
  // Each rank's tp shard against the same shard of the reference.
  for (size_t r = 0; r < summary.final_params.size(); ++r) {
    const RankParameters& rank = summary.final_params[r];
    for (size_t i = 0; i < rank.params.size(); ++i) {
      const GptParameter& meta = rank.params[i];
      auto it = full.find(meta.name);
      if (it == full.end()) {
        return absl::InternalError(absl::StrCat("parameter ", meta.name, " of rank ", r,
                                                " is not in the one-rank reference"));
      }
      LOOM_ASSIGN_OR_RETURN(std::vector<float> shard,
                            ShardOf(meta, *it->second, options.tp, rank.tp_rank));
      const std::vector<float>& values = rank.values[i];
      if (shard.size() != values.size()) {
        return absl::InternalError(absl::StrCat("parameter ", meta.name, " of rank ", r, " has ",
                                                values.size(), " elements, its reference shard ",
                                                shard.size()));
      }
      for (size_t k = 0; k < values.size(); ++k) {
        out.max_abs_param_diff =
            std::max(out.max_abs_param_diff, std::fabs(double{values[k]} - double{shard[k]}));
      }
    }
  }
  return out;
}

}  // namespace loom
