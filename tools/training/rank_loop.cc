#include "tools/training/rank_loop.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "core/buffer_view.h"
#include "core/compute_timer.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/status_macros.h"
#include "models/gpt/gpt_stage_module.h"
#include "pipeline/executor/send_buffers.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tools/training/activation_estimate.h"
#include "tools/training/device_gemm.h"
#include "tools/training/device_trainer.h"
#include "tools/training/host_cpu.h"
#include "tools/training/job_checkpoint.h"
#include "tools/training/rank_optimizer.h"
#include "tools/training/step_statistics.h"
#include "tools/training/wire.h"
#include "core/tensor.h"

namespace loom {
namespace {

// Figures one rank reports for a step, gathered at world rank 0.
struct RankStep {
  double loss = 0;  // the stage's mean loss (last stage only)
  bool holds_loss = false;
  int64_t state_bytes = 0;
  int64_t estimated_state_bytes = 0;  // topology/memory_estimate's, for this rank
  int64_t sharded_bytes = 0;
  int64_t disk_bytes = 0;
  int64_t comm_bytes = 0;  // sent, this step
  int64_t peak_activation_bytes = 0;
  int64_t estimated_activation_bytes = 0;  // topology/memory_estimate's, for this rank
  bool holds_eval = false;  // the stage's held-out loss (last stage, on eval steps)
  double eval_loss = 0;
  StepBreakdown breakdown;
  DpTraffic dp;
};

uint64_t SentBytes(const Communicator& comm) {
  uint64_t total = 0;
  for (const CollectiveKind kind : AllCollectiveKinds()) total += comm.Counters(kind).bytes_sent;
  return total;
}

// VisitFigures calls `visit` on each of a RankStep's fields, in one fixed order:
// the one list Pack and Unpack share (a field added to RankStep is added here).
template <typename Step, typename Visit>
void VisitFigures(Step& s, Visit&& visit) {
  visit(s.holds_loss);
  visit(s.loss);
  visit(s.state_bytes);
  visit(s.estimated_state_bytes);
  visit(s.sharded_bytes);
  visit(s.disk_bytes);
  visit(s.comm_bytes);
  visit(s.peak_activation_bytes);
  visit(s.estimated_activation_bytes);
  visit(s.holds_eval);
  visit(s.eval_loss);
  for (auto* field : {&s.breakdown.compute, &s.breakdown.dp_comm, &s.breakdown.pp_comm,
                      &s.breakdown.optimizer, &s.breakdown.other, &s.breakdown.param_wait,
                      &s.breakdown.gemm, &s.breakdown.attention, &s.breakdown.cp_hops,
                      &s.breakdown.cp_exposed}) {
    visit(*field);
  }
  for (auto* field : {&s.dp.all_gather_bytes, &s.dp.reduce_scatter_bytes,
                      &s.dp.all_reduce_bytes, &s.dp.all_gather_calls,
                      &s.dp.reduce_scatter_calls, &s.dp.all_reduce_calls,
                      &s.dp.zero_bucket_numel, &s.dp.zero_persistent_numel,
                      &s.dp.recomputed_forwards, &s.dp.zero_units, &s.dp.zero_kept_units,
                      &s.dp.zero_kept_numel}) {
    visit(*field);
  }
}

// One rank's figures for a step, gathered at world rank 0 as doubles (exact for
// the byte counts involved, below 2^53).
int StepFigures() {
  RankStep step;
  int count = 0;
  VisitFigures(step, [&](const auto&) { ++count; });
  return count;
}
const int kStepFigures = StepFigures();

// Pack writes `s`'s figures into `figures` (kStepFigures of them; its memory is
// reused from step to step).
void Pack(const RankStep& s, std::vector<double>& figures) {
  figures.clear();
  VisitFigures(s, [&](const auto& field) { figures.push_back(static_cast<double>(field)); });
}
RankStep Unpack(const double* figures) {
  RankStep s;
  VisitFigures(s, [&](auto& field) {
    using Field = std::remove_reference_t<decltype(field)>;
    if constexpr (std::is_same_v<Field, bool>) {
      field = *figures++ != 0.0;
    } else {
      field = static_cast<Field>(*figures++);
    }
  });
  return s;
}

// CheckpointDue: whether the job saves after step `done` (counted from 1).
bool EvalDue(const TrainJobOptions& o, int64_t done) {
  return o.eval_every > 0 && (done == o.steps || done % o.eval_every == 0);
}

bool CheckpointDue(const TrainJobOptions& o, int64_t done) {
  if (o.checkpoint_dir.empty()) return false;
  return done == o.steps || (o.checkpoint_every > 0 && done % o.checkpoint_every == 0);
}

absl::Status Save(const TrainJobOptions& o, int64_t done, const std::vector<GptParameter>& params,
                  RankWiring& w, const DataParallelOptimizer& optimizer) {
  RankCheckpointPart part;
  absl::StatusOr<std::vector<CheckpointTensor>> tensors =
      CheckpointTensorsOf(params, o.tp, w.place.t);
  if (tensors.ok()) part.tensors = std::move(*tensors);
  // The first rank of the parameters' dp x cp group saves what all of them hold.
  part.saves_dp_replicated = w.place.dpcp_index == 0;
  absl::StatusOr<std::vector<StateSlice>> slices = optimizer.ReadState();
  // A rank that cannot read its state still joins the save's agreements, so that
  // every rank fails with its reason instead of waiting for it.
  if (slices.ok()) part.slices = std::move(*slices);
  const absl::Status read =
      AgreeOnStatus(*w.world, tensors.ok() ? slices.status() : tensors.status());
  if (!read.ok()) return read;
  CheckpointOptions save;
  save.keep = o.keep_checkpoints;
  absl::Status saved = SaveCheckpoint(o.checkpoint_dir, MetaOf(o, done), part, *w.world, save);
  if (!saved.ok()) {
    return absl::Status(saved.code(),
                        absl::StrCat("--checkpoint_dir ", o.checkpoint_dir, ": ", saved.message()));
  }
  return absl::OkStatus();
}

// Resume loads the checkpoint of --resume into the optimizer and returns its step
// (0 for a fresh start). Every rank reads for itself; they agree on the outcome.
absl::StatusOr<int64_t> Resume(const TrainJobOptions& o, const std::vector<GptParameter>& params,
                               RankWiring& w, DataParallelOptimizer& optimizer) {
  if (o.resume_dir.empty()) return 0;
  int64_t step = 0;
  const auto load = [&]() -> absl::Status {
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(o.resume_dir);
    if (!reader.ok() && absl::IsNotFound(reader.status()) && !o.resume_required) {
      return absl::OkStatus();  // nothing saved yet: a fresh start
    }
    if (!reader.ok()) return reader.status();
    LOOM_RETURN_IF_ERROR(reader->CheckModel(GptModelFields(o.model)));
    if (reader->meta().step >= o.steps) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint is of step ",
                                                        reader->meta().step, "; --steps ", o.steps,
                                                        " asks for no more"));
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<CheckpointTensor> tensors,
                          CheckpointTensorsOf(params, o.tp, w.place.t));
    LOOM_RETURN_IF_ERROR(optimizer.WriteState(reader->SourceFor(std::move(tensors))));
    step = reader->meta().step;
    return absl::OkStatus();
  };
  absl::Status loaded = load();
  if (!loaded.ok()) {
    loaded = absl::Status(loaded.code(),
                          absl::StrCat("--resume ", o.resume_dir, ": ", loaded.message()));
  }
  LOOM_RETURN_IF_ERROR(AgreeOnStatus(*w.world, loaded));
  return step;
}

// Whether --device cuda trains the whole model on the device (device_trainer.h): one
// rank, the optimizer state in host memory (not on disk, not --offload gpu's), no
// recompute. Otherwise only the products go to the GPU (device_gemm.h).
bool DeviceResident(const TrainJobOptions& o) {
  return o.device == ComputeDevice::kCuda && o.dp * o.tp * o.pp * o.cp == 1 &&
         (o.offload == OffloadKind::kNone || o.offload == OffloadKind::kCpu) &&
         o.offload_params != OffloadKind::kNvme && o.offload_grads != OffloadKind::kNvme &&
         o.recompute == Recompute::kNone;
}

absl::Status Halted(int64_t step) {
  return absl::AbortedError(absl::StrCat("halted after step ", step, " (test hook)"));
}

}  // namespace

absl::Status RunRank(const TrainJobOptions& options, const JobSetup& setup, RankWiring& w,
                     DiskTier* disk, const std::function<void(const StepReport&)>& on_step,
                     TrainSummary* summary) {
  const absl::Time job_start = absl::Now();
  // --device cuda: this thread's matrix products go to the GPU, for the whole rank.
  const bool resident = DeviceResident(options);
  std::unique_ptr<GemmEngine> device_gemm;
  if (options.device == ComputeDevice::kCuda && !resident) {
    LOOM_ASSIGN_OR_RETURN(device_gemm, MakeDeviceGemmEngine(/*device=*/0));
  }
  ScopedGemmEngine on_device(device_gemm.get());  // nullptr: OpenBLAS
  GptStageModuleOptions module_options;
  module_options.micro_batch = options.micro_batch;
  module_options.num_microbatches = options.microbatches;
  module_options.recompute = options.recompute;
  // --dtype bf16: the weights are bf16 values, and the products round their other
  // input to bf16 too, to run on bf16 hardware GEMMs (gemm.h).
  module_options.precision =
      options.dtype == DType::kBF16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
  // --cp: this rank's positions of every sequence, attention across the cp group. Its
  // loss is a share (the cp group's shares add up to the mean), and so are its
  // gradients; the optimizer averages over dp x cp, so each share counts cp times.
  module_options.context_parallel = {w.cp.get(), options.cp_layout, options.cp_comm};
  module_options.loss_gradient_scale = static_cast<float>(options.cp);
  const int d = w.place.d;
  GptMicrobatchFn data_fn = [&setup, d](int64_t step, int64_t mb) {
    return setup.Microbatch(step, mb, d);
  };
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> module,
                        GptStageModule::Create(options.model, setup.schedule.layout, w.place.s, *w.tp,
                                               data_fn, module_options));
  // The stage models borrow their weights from the optimizer's sources from now on.
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelOptimizer> optimizer,
                        MakeRankOptimizer(options, *module, w.dp.get(), disk,
                                          absl::StrCat("train.s", w.place.s, ".t", w.place.t)));
  // The parameter list (no values: the sources hold them), for the checkpoints'
  // names and shapes.
  const std::vector<GptParameter> params = module->Parameters();
  // topology/memory_estimate's model-state bytes for this rank's optimizer (its
  // stages' tp shards, replicated layer norms and uneven stages included), memory
  // and disk together: --offload nvme moves a part, it does not remove it.
  LOOM_ASSIGN_OR_RETURN(const int64_t estimated_state_bytes, optimizer->EstimatedStateBytes());
  // And its activation bytes: this pipeline rank's stage models, by the flags.
  LOOM_ASSIGN_OR_RETURN(const int64_t estimated_activation_bytes,
                        EstimatedActivationBytes(options, setup.schedule, w.place.s));
  LOOM_ASSIGN_OR_RETURN(const int64_t first_step, Resume(options, params, w, *optimizer));
  if (summary != nullptr) summary->resumed_from_step = first_step;
  // --device cuda on one rank: the device holds the training state from here on;
  // the optimizer above is the checkpoints' mirror (fresh or resumed, it fills it).
  std::unique_ptr<DeviceTrainer> trainer;
  if (resident) {
    LOOM_ASSIGN_OR_RETURN(trainer, MakeDeviceTrainer(options.model, options.micro_batch,
                                                     options.dtype == DType::kBF16,
                                                     options.device_attention));
    LOOM_ASSIGN_OR_RETURN(const std::vector<StateSlice> state, optimizer->ReadState());
    LOOM_RETURN_IF_ERROR(trainer->Load(params, state));
    if (summary != nullptr) summary->device_description = trainer->Describe();
  }
  // Clipping: tp-replicated parameters count on tp rank 0 only.
  std::vector<float> norm_weights;
  for (const GptParameter& p : params) {
    norm_weights.push_back(p.split == TpSplit::kReplicated && w.place.t != 0 ? 0.0f : 1.0f);
  }
  GptMicrobatchFn eval_fn = [&setup, d](int64_t, int64_t mb) {
    return setup.EvalMicrobatch(mb, d);
  };
  const int world = w.world->size();
  std::vector<double> gathered(static_cast<size_t>(world * kStepFigures));
  std::vector<double> mine;
  mine.reserve(static_cast<size_t>(kStepFigures));
  RankExecution last_execution;
  // The pipeline's payloads go out of the pp transport's communication memory
  // (shm: the next stage's process maps it), reused from step to step.
  SendBuffers send_buffers;
  uint64_t sent_before = 0;
  // The dp communicator's counters at the end of the previous step.
  const CollectiveKind dp_kinds[] = {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllReduce};
  std::array<CollectiveCounters, 3> dp_before;
  for (int k = 0; k < 3; ++k) dp_before[k] = w.dp->Counters(dp_kinds[k]);
  // Forwards run again: a step's stage forwards beyond one per stage and microbatch.
  int64_t forwards_before = module->training_forwards();
  const int64_t forwards_per_step =
      static_cast<int64_t>(module->stages().size()) * options.microbatches;
  int64_t kept_units_before = optimizer->KeptUnits();
  int64_t kept_numel_before = optimizer->KeptNumel();
  // Rank 0's running totals (a run's memory stays flat over its steps).
  StepStatistics statistics(static_cast<size_t>(std::max<int64_t>(options.step_history, 0)));
  for (int64_t step = first_step; step < options.steps; ++step) {
    // Rank 0 reads the host's CPU counters around the step (not the evaluation).
    const absl::StatusOr<HostCpuTimes> cpu_before =
        summary != nullptr ? ReadHostCpuTimes() : absl::StatusOr<HostCpuTimes>(HostCpuTimes());
    // And its process's page faults over the training work (not a checkpoint's save).
    const int64_t faults_before = summary != nullptr ? ProcessPageFaults() : -1;
    const absl::Time start = absl::Now();
    StepBreakdown breakdown;
    absl::Time mark = start;
    // Seconds since the previous mark, and a new mark.
    const auto lap = [&mark]() {
      const absl::Time now = absl::Now();
      const double seconds = absl::ToDoubleSeconds(now - mark);
      mark = now;
      return seconds;
    };
    // The device path's step loss (the module's otherwise).
    double device_loss = 0;
    if (trainer != nullptr) {
      const DeviceBatchFn batch_of = [&](int64_t mb) { return setup.Microbatch(step, mb, d); };
      LOOM_ASSIGN_OR_RETURN(device_loss, trainer->ForwardBackward(batch_of, options.microbatches));
      breakdown.compute = lap();
    } else {
      module->BeginStep(step);
      const double waited_before = optimizer->WaitSeconds();
      const double gemm_before = ThreadComputeSeconds(ComputeKind::kGemm);
      const double attention_before = ThreadComputeSeconds(ComputeKind::kAttention);
      const RingOverlapStats ring_before = ThisThreadRingOverlap();
      LOOM_ASSIGN_OR_RETURN(last_execution, setup.executor->Run(*w.pp, *module, &send_buffers));
      const double executed = lap();
      breakdown.gemm = ThreadComputeSeconds(ComputeKind::kGemm) - gemm_before;
      breakdown.attention = ThreadComputeSeconds(ComputeKind::kAttention) - attention_before;
      const RingOverlapStats ring_after = ThisThreadRingOverlap();
      breakdown.cp_hops = ring_after.hop_seconds - ring_before.hop_seconds;
      breakdown.cp_exposed = ring_after.exposed_seconds - ring_before.exposed_seconds;
      // The module's waits for the engine happen inside its compute.
      breakdown.param_wait = optimizer->WaitSeconds() - waited_before;
      breakdown.compute =
          std::max(0.0, absl::ToDoubleSeconds(last_execution.compute) - breakdown.param_wait);
      breakdown.pp_comm = absl::ToDoubleSeconds(last_execution.waiting);
      breakdown.other +=
          std::max(0.0, executed - breakdown.compute - breakdown.param_wait - breakdown.pp_comm);
    }
    float grad_scale = 1.0f;
    double grad_norm = 0;
    if (trainer != nullptr) {
      if (options.clip_grad_norm > 0) {
        LOOM_ASSIGN_OR_RETURN(const double squares, trainer->GradSquaredNorm());
        grad_norm = std::sqrt(squares);
        grad_scale = static_cast<float>(
            std::min(1.0, static_cast<double>(options.clip_grad_norm) / (grad_norm + 1e-6)));
      }
      AdamWHyper hyper = AdamWHyperAt(options, step + 1);
      hyper.grad_scale = grad_scale;
      LOOM_RETURN_IF_ERROR(trainer->Step(hyper));
      breakdown.optimizer = lap();
    } else {
      // Without clipping, Step reduces the gradients itself: at zero 0 with overlap it
      // steps each unit as its all-reduce ends, beside the ones still in flight.
      if (options.clip_grad_norm > 0) {
        LOOM_RETURN_IF_ERROR(optimizer->ReduceGradients());
        // Every rank's share, summed over the world: each element of the model once.
        LOOM_ASSIGN_OR_RETURN(double squares, optimizer->GradSquaredNorm(norm_weights));
        LOOM_RETURN_IF_ERROR(w.world->AllReduce(absl::MakeSpan(&squares, 1), ReduceOp::kSum));
        grad_norm = std::sqrt(squares);
        grad_scale = static_cast<float>(
            std::min(1.0, static_cast<double>(options.clip_grad_norm) / (grad_norm + 1e-6)));
      }
      breakdown.dp_comm += lap();
      AdamWHyper hyper = AdamWHyperAt(options, step + 1);
      hyper.grad_scale = grad_scale;
      const double step_comm_before = optimizer->StepCommSeconds();
      LOOM_RETURN_IF_ERROR(optimizer->Step(hyper));
      // Step's waits for gradient communication are dp communication, the rest AdamW.
      const double step_comm = optimizer->StepCommSeconds() - step_comm_before;
      breakdown.dp_comm += step_comm;
      breakdown.optimizer = std::max(0.0, lap() - step_comm);
    }
    const int64_t faults_after = summary != nullptr ? ProcessPageFaults() : -1;
    double checkpoint_seconds = 0;
    if (CheckpointDue(options, step + 1)) {
      const absl::Time saving = absl::Now();
      if (trainer != nullptr) LOOM_RETURN_IF_ERROR(trainer->MirrorInto(*optimizer));
      LOOM_RETURN_IF_ERROR(Save(options, step + 1, params, w, *optimizer));
      checkpoint_seconds = absl::ToDoubleSeconds(absl::Now() - saving);
    }
    const double step_seconds = absl::ToDoubleSeconds(absl::Now() - start);
    const absl::StatusOr<HostCpuTimes> cpu_after =
        summary != nullptr ? ReadHostCpuTimes() : absl::StatusOr<HostCpuTimes>(HostCpuTimes());
    breakdown.other += lap();
    // The step's training loss, before an evaluation replaces the module's.
    const bool holds_loss = trainer != nullptr || module->holds_loss();
    const double train_loss =
        trainer != nullptr ? device_loss
                           : (holds_loss ? static_cast<double>(module->loss()) : 0.0);
    std::optional<double> eval_loss;
    if (trainer != nullptr && EvalDue(options, step + 1)) {
      const DeviceBatchFn batch_of = [&](int64_t mb) { return setup.EvalMicrobatch(mb, d); };
      LOOM_ASSIGN_OR_RETURN(eval_loss, trainer->Evaluate(batch_of, options.microbatches));
    } else if (EvalDue(options, step + 1)) {
      // The weights the step produced, through a forward-only schedule on the
      // training mesh; the next BeginStep returns to training.
      module->BeginForwardOnly(step + 1, eval_fn);
      LOOM_RETURN_IF_ERROR(setup.eval_executor->Run(*w.pp, *module, &send_buffers).status());
      if (module->holds_loss()) eval_loss = static_cast<double>(module->loss());
    }
    const uint64_t sent =
        SentBytes(*w.tp) + SentBytes(*w.dp) + (w.cp != nullptr ? SentBytes(*w.cp) : 0);
    RankStep report;
    report.holds_loss = holds_loss;
    report.loss = train_loss;
    report.state_bytes = trainer != nullptr ? trainer->state_bytes() : optimizer->StateBytes();
    report.estimated_state_bytes = estimated_state_bytes;
    report.sharded_bytes = optimizer->ShardedBytes();
    report.disk_bytes = optimizer->DiskBytes();
    report.comm_bytes = static_cast<int64_t>(sent - sent_before);
    report.peak_activation_bytes = trainer != nullptr
                                       ? trainer->activation_bytes()
                                       : static_cast<int64_t>(module->peak_activation_bytes());
    report.estimated_activation_bytes = estimated_activation_bytes;
    report.holds_eval = eval_loss.has_value();
    report.eval_loss = eval_loss.value_or(0.0);
    report.breakdown = breakdown;
    std::array<CollectiveCounters, 3> dp_now;
    for (int k = 0; k < 3; ++k) dp_now[k] = w.dp->Counters(dp_kinds[k]);
    const auto delta = [&](int k, uint64_t CollectiveCounters::*field) {
      return static_cast<int64_t>(dp_now[k].*field - dp_before[k].*field);
    };
    report.dp = {delta(0, &CollectiveCounters::bytes_sent),
                 delta(1, &CollectiveCounters::bytes_sent),
                 delta(2, &CollectiveCounters::bytes_sent),
                 delta(0, &CollectiveCounters::calls),
                 delta(1, &CollectiveCounters::calls),
                 delta(2, &CollectiveCounters::calls),
                 optimizer->BucketNumel(),
                 optimizer->PersistentNumel(),
                 trainer != nullptr
                     ? 0
                     : module->training_forwards() - forwards_before - forwards_per_step,
                 optimizer->Units(),
                 optimizer->KeptUnits() - kept_units_before,
                 optimizer->KeptNumel() - kept_numel_before};
    forwards_before = module->training_forwards();
    kept_units_before = optimizer->KeptUnits();
    kept_numel_before = optimizer->KeptNumel();
    dp_before = dp_now;
    sent_before = sent;
    Pack(report, mine);
    LOOM_RETURN_IF_ERROR(w.world->Gather(ConstBufferView::Of(absl::MakeConstSpan(mine)),
                                         BufferView::Of(absl::MakeSpan(gathered)), 0));
    const bool halts = step + 1 == options.testing_halt_after_step;
    if (summary == nullptr) {
      if (halts) return Halted(step + 1);
      continue;
    }
    StepReport line;
    line.step = step + 1;
    int losses = 0, evals = 0;
    double eval_sum = 0;
    for (int r = 0; r < world; ++r) {
      const RankStep s = Unpack(gathered.data() + r * kStepFigures);
      if (r == 0) summary->dp_traffic = s.dp;  // the last step's, in the end
      if (s.holds_loss && s.loss == s.loss) {
        line.loss += s.loss;
        ++losses;
      }
      if (s.holds_eval) {
        eval_sum += s.eval_loss;
        ++evals;
      }
      line.model_state_bytes = std::max(line.model_state_bytes, s.state_bytes);
      summary->estimated_model_state_bytes_per_rank =
          std::max(summary->estimated_model_state_bytes_per_rank, s.estimated_state_bytes);
      line.comm_bytes = std::max(line.comm_bytes, s.comm_bytes);
      summary->sharded_state_bytes_per_rank =
          std::max(summary->sharded_state_bytes_per_rank, s.sharded_bytes);
      summary->disk_state_bytes_per_rank =
          std::max(summary->disk_state_bytes_per_rank, s.disk_bytes);
      summary->peak_activation_bytes_per_rank =
          std::max(summary->peak_activation_bytes_per_rank, s.peak_activation_bytes);
      summary->estimated_activation_bytes_per_rank =
          std::max(summary->estimated_activation_bytes_per_rank, s.estimated_activation_bytes);
      line.breakdown.Add(s.breakdown, 1.0 / world);
    }
    // The last stage's tp ranks all hold the same loss, and its cp ranks a share
    // each: the sum over cp, averaged over tp and dp.
    line.loss = line.loss * options.cp / std::max(losses, 1);
    if (evals > 0) line.eval_loss = eval_sum * options.cp / evals;
    line.grad_norm = grad_norm;
    line.seconds = step_seconds;  // training and checkpoint; not the evaluation
    line.tokens_per_second = static_cast<double>(setup.tokens_per_step) / line.seconds;
    line.checkpoint_seconds = checkpoint_seconds;
    line.host_cpu_busy =
        cpu_before.ok() && cpu_after.ok() ? BusyFraction(*cpu_before, *cpu_after) : -1.0;
    line.page_faults = faults_before >= 0 && faults_after >= 0 ? faults_after - faults_before : -1;
    line.lr = static_cast<double>(ScheduleOf(options).LrAt(step + 1));
    statistics.Add(line);
    if (on_step) on_step(line);
    if (halts) return Halted(step + 1);
  }
  // The models hold no weights: the sources give them (ZeRO gathers them).
  std::vector<GptParameter> final_weights = module->Parameters();
  std::vector<std::vector<float>> gathered_weights;
  if (trainer != nullptr) {
    LOOM_ASSIGN_OR_RETURN(gathered_weights, trainer->Weights());
  } else {
    LOOM_ASSIGN_OR_RETURN(gathered_weights, optimizer->GatherWeights());
  }
  for (size_t k = 0; k < final_weights.size(); ++k) {
    final_weights[k].values = absl::MakeSpan(gathered_weights[k]);
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> final_params,
                        GatherBytes(*w.world, EncodeParameters(w.place.t, final_weights)));
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> executions,
                        GatherBytes(*w.world, EncodeExecution(last_execution)));
  if (summary == nullptr) return absl::OkStatus();
  std::vector<std::vector<TraceEvent>> trace;
  for (int r = 0; r < world; ++r) {
    LOOM_ASSIGN_OR_RETURN(RankParameters rank, DecodeParameters(final_params[r]));
    summary->final_params.push_back(std::move(rank));
    LOOM_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, DecodeExecution(executions[r]));
    trace.push_back(std::move(events));
  }
  summary->trace_json = TraceEvents(trace);
  summary->uniform_loss = std::log(static_cast<double>(options.model.vocab));
  summary->entropy_rate = setup.markov.has_value() ? setup.markov->EntropyRate() : 0.0;
  statistics.FillSummary(summary);
  summary->tokens_per_second =
      static_cast<double>(setup.tokens_per_step * (options.steps - first_step)) /
      absl::ToDoubleSeconds(absl::Now() - job_start);
  if (device_gemm != nullptr) summary->device_gemm_products = DeviceGemmProducts(*device_gemm);
  return absl::OkStatus();
}

void AbortRank(RankWiring& w, const absl::Status& reason) {
  for (const std::shared_ptr<Transport>& endpoint : w.endpoints) endpoint->Abort(reason);
  if (w.pp != nullptr) w.pp->Abort(reason);
}

}  // namespace loom
