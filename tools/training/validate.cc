#include "tools/training/validate.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/transport/heartbeat.h"
#include "core/checked_size.h"
#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "tools/launcher.h"
#include "tools/training/device_gemm.h"
#include "tools/training/rank_optimizer.h"

namespace loom {

// StagesPerRank: interleaved 1F1B runs two model chunks per rank here, and ZB-V
// always places two stages per rank (its V); the others one.
int64_t StagesPerRank(PipelineScheduleKind schedule) {
  return schedule == PipelineScheduleKind::kInterleaved1F1B ||
                 schedule == PipelineScheduleKind::kZeroBubbleV
             ? 2
             : 1;
}

namespace {

// RanksWord says what the job's ranks are, as the header line does.
std::string RanksWord(RankTransport transport) {
  if (transport == RankTransport::kThreads) return "thread ranks";
  return absl::StrCat("processes over ", RankTransportName(transport));
}

// ValidateLaunch: the options of how the ranks start and are watched.
absl::Status ValidateLaunch(const TrainJobOptions& o, const TrainLaunchOptions& launch) {
  const char* transport = RankTransportName(launch.transport);
  if (!launch.job_id.empty()) {
    if (launch.transport != RankTransport::kShm) {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_id ", launch.job_id, " is for --transport shm, not ", transport));
    }
    if (absl::Status s = ValidateJobId(launch.job_id); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
    }
  }
  LOOM_RETURN_IF_ERROR(ValidateHeartbeatTimeout(launch.heartbeat_timeout, "--heartbeat_timeout"));
  if (launch.max_restarts < 0 || launch.max_restarts > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_restarts ", launch.max_restarts, " is not in [0, 100]"));
  }
  if (launch.elastic_dp && launch.max_restarts == 0) {
    return absl::InvalidArgumentError("--elastic_dp needs --max_restarts (it acts on restarts)");
  }
  if (launch.max_restarts > 0 && o.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--max_restarts ", launch.max_restarts,
                                                   " needs --checkpoint_dir (a restart resumes "
                                                   "from it)"));
  }
  if (launch.max_restarts > 0 && launch.transport != RankTransport::kShm) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_restarts is for --transport shm (train "
                     "restarts the processes it launches), not ",
                     transport));
  }
  if (launch.min_ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--min_ranks ", launch.min_ranks,
                                                   " must be >= 1"));
  }
  return absl::OkStatus();
}

// CheckJobSizes checks, before anything is allocated, that the products of the
// size flags fit an int64 and that what the job must hold at least fits this
// machine's memory: the whole model's parameters, gradients and AdamW state (16
// bytes per parameter: the ranks of a job on one host hold it between them, and
// the reference run holds all of it), one step's tokens, one microbatch's
// logits, one layer's attention scores and one activation per layer.
// InvalidArgument naming the flags.
absl::Status CheckJobSizes(const TrainJobOptions& o) {
  const GptConfig& m = o.model;
  const int64_t ffn = m.ffn_size();  // ValidateTrainJob checked 4 x --hidden
  LOOM_ASSIGN_OR_RETURN(const int64_t embedding,
                        CheckedMul({{"--vocab", m.vocab}, {"--hidden", m.hidden}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t positions,
                        CheckedMul({{"--seq_len", m.seq_len}, {"--hidden", m.hidden}}));
  LOOM_ASSIGN_OR_RETURN(
      const int64_t attention,
      CheckedMul({{"4 matrices", 4}, {"--hidden", m.hidden}, {"--hidden", m.hidden}}));
  LOOM_ASSIGN_OR_RETURN(
      const int64_t mlp,
      CheckedMul({{"2 matrices", 2}, {"--hidden", m.hidden}, {"ffn (4 x --hidden)", ffn}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t block,
                        CheckedAdd({{"attention weights", attention}, {"MLP weights", mlp}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t blocks,
                        CheckedMul({{"--layers", m.layers}, {"weights per block", block}}));
  LOOM_ASSIGN_OR_RETURN(
      const int64_t params,
      CheckedAdd({{"embedding", embedding}, {"positions", positions}, {"blocks", blocks}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t state_bytes,
                        CheckedMul({{"parameters", params}, {"bytes of state each", 16}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t step_tokens, CheckedMul({{"--dp", o.dp},
                                                               {"--microbatches", o.microbatches},
                                                               {"--micro_batch", o.micro_batch},
                                                               {"--seq_len", m.seq_len}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t token_bytes,
                        CheckedMul({{"tokens per step", step_tokens}, {"bytes each", 8}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t logit_bytes, CheckedMul({{"--micro_batch", o.micro_batch},
                                                               {"--seq_len", m.seq_len},
                                                               {"--vocab", m.vocab},
                                                               {"bytes per f32", 4}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t score_bytes, CheckedMul({{"--micro_batch", o.micro_batch},
                                                               {"--heads", m.heads},
                                                               {"--seq_len", m.seq_len},
                                                               {"--seq_len", m.seq_len},
                                                               {"bytes per f32", 4}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t activation_bytes,
                        CheckedMul({{"--layers", m.layers},
                                    {"--micro_batch", o.micro_batch},
                                    {"--seq_len", m.seq_len},
                                    {"--hidden", m.hidden},
                                    {"bytes per f32", 4}}));
  LOOM_ASSIGN_OR_RETURN(const int64_t total, CheckedAdd({{"model state", state_bytes},
                                                         {"tokens", token_bytes},
                                                         {"logits", logit_bytes},
                                                         {"attention scores", score_bytes},
                                                         {"activations", activation_bytes}}));
  const absl::Status fits = CheckFitsInMemory(
      absl::StrFormat("--vocab %d --seq_len %d --hidden %d --heads %d --layers %d --dp %d "
                      "--microbatches %d --micro_batch %d: the model state (%d parameters "
                      "x 16 "
                      "bytes), a step's tokens, a microbatch's logits and activations",
                      m.vocab, m.seq_len, m.hidden, m.heads, m.layers, o.dp, o.microbatches,
                      o.micro_batch, params),
      total);
  if (!fits.ok()) return absl::InvalidArgumentError(fits.message());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ByteCorpus> OpenTrainCorpus(const TrainJobOptions& o) {
  ByteCorpusOptions corpus;
  corpus.paths = o.data;
  corpus.seq_len = o.model.seq_len;
  corpus.eval_fraction = o.eval_fraction;
  corpus.seed = o.data_seed;
  return ByteCorpus::Open(corpus);
}

absl::Status ValidateTrainJob(const TrainJobOptions& o) {
  return ValidateTrainJob(o, TrainLaunchOptions());
}

absl::Status ValidateTrainJob(const TrainJobOptions& o, const TrainLaunchOptions& launch) {
  LOOM_RETURN_IF_ERROR(ValidateLaunch(o, launch));
  const RankTransport transport = launch.transport;
  if (o.dp < 1 || o.pp < 1 || o.cp < 1 || o.tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--dp ", o.dp, " --pp ", o.pp, " --cp ", o.cp,
                                                   " --tp ", o.tp, ": each must be >= 1"));
  }
  const absl::StatusOr<int64_t> world =
      CheckedMul({{"--dp", o.dp}, {"--pp", o.pp}, {"--cp", o.cp}, {"--tp", o.tp}});
  if (!world.ok() || *world > kMaxTrainRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp ", o.dp, " x --pp ", o.pp, " x --cp ", o.cp, " x --tp ", o.tp, " = ",
                     world.ok() ? absl::StrCat(*world) : "more than int64 holds", " ",
                     RanksWord(transport), "; at most ", kMaxTrainRanks));
  }
  if (o.model.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layers ", o.model.layers, " must be >= 1 (a model needs a block)"));
  }
  if (!std::isfinite(o.lr) || o.lr < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr ", o.lr, " must be a finite number >= 0 (as a float)"));
  }
  if (!std::isfinite(o.adam_eps) || o.adam_eps <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--adam_eps ", o.adam_eps, " must be a finite number > 0 (as a float)"));
  }
  // GptConfig computes its MLP width as 4 x hidden: that product must exist first.
  if (o.model.ffn == 0 && o.model.hidden > 0) {
    if (absl::StatusOr<int64_t> ffn =
            CheckedMul({{"MLP width factor", 4}, {"--hidden", o.model.hidden}});
        !ffn.ok()) {
      return ffn.status();
    }
  }
  if (absl::Status s = o.model.Validate(o.tp); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", s.message()));
  }
  if (o.cp > 1 && o.model.seq_len < o.cp) {
    // Every cp rank holds at least one position of each sequence (CpChunks).
    return absl::InvalidArgumentError(absl::StrCat("--seq_len ", o.model.seq_len,
                                                   " is shorter than --cp ", o.cp,
                                                   ": every cp rank needs a position"));
  }
  if (o.cp_layout != CpLayout::kZigzag && o.cp_layout != CpLayout::kContiguous) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cp_layout ", static_cast<int>(o.cp_layout), " is not zigzag or contiguous"));
  }
  if (o.cp > 1 && o.cp_comm == CpComm::kAllToAll && o.tp >= 1 &&
      o.model.heads % o.tp == 0 && (o.model.heads / o.tp) % o.cp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cp_comm a2a needs --cp ", o.cp, " to divide each tp rank's ", o.model.heads / o.tp,
        " heads (--heads ", o.model.heads, " / --tp ", o.tp, "); use --cp_comm ring"));
  }
  const int64_t stages_per_rank = StagesPerRank(o.schedule);
  const int64_t stages = o.pp * stages_per_rank;
  // Layers that do not divide go to the inner stages first (WithBalancedLayers);
  // every stage needs one.
  if (o.model.layers < stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layers ", o.model.layers, " is fewer than the ", stages, " pipeline stages (--pp ",
        o.pp,
        stages_per_rank > 1
            ? absl::StrCat(" x 2 stages per rank for ", PipelineScheduleName(o.schedule))
            : "",
        ")"));
  }
  if (o.microbatches < o.pp) {
    return absl::InvalidArgumentError(absl::StrCat("--microbatches ", o.microbatches,
                                                   " is fewer than --pp ", o.pp,
                                                   ": the pipeline would never fill"));
  }
  if (o.micro_batch < 1 || o.steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro_batch ", o.micro_batch, " and --steps ", o.steps, " must be >= 1"));
  }
  if (o.zero < 0 || o.zero > 3) {
    return absl::InvalidArgumentError(absl::StrCat("--zero ", o.zero, " must be 0, 1, 2 or 3"));
  }
  if (o.reshard == Reshard::kBlock && o.zero == 0) {
    return absl::InvalidArgumentError(
        "--reshard block needs --zero 1, 2 or 3 (zero 0 keeps the whole model on every rank: "
        "there is nothing to gather or release)");
  }
  if (o.defer_reduce_scatter && EffectiveReshard(o) != Reshard::kBlock) {
    return absl::InvalidArgumentError(
        "--defer_reduce_scatter needs --reshard block, the default at --zero 3 (--reshard step "
        "always reduces once per step)");
  }
  if (o.device == ComputeDevice::kCuda && !DeviceGemmAvailable()) {
    return absl::InvalidArgumentError(
        "--device cuda needs a train built with --config=cuda (this one has no CUDA)");
  }
  if (o.offload == OffloadKind::kGpu) {
    if (!DeviceGemmAvailable()) {
      return absl::InvalidArgumentError(
          "--offload gpu needs a train built with --config=cuda (this one has no CUDA)");
    }
    if (o.zero != 0 || o.dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--offload gpu needs --zero 0 and --dtype f32 (the ZeRO engine's and the bf16 "
          "master's AdamW run on the CPU); got --zero ", o.zero, " --dtype ", DTypeName(o.dtype)));
    }
    if (!o.checkpoint_dir.empty() || !o.resume_dir.empty()) {
      return absl::InvalidArgumentError(
          "--offload gpu does not checkpoint (its moments stay on the device): drop "
          "--checkpoint_dir and --resume");
    }
  }
  if (o.offload_params == OffloadKind::kGpu) {
    return absl::InvalidArgumentError("--offload_params gpu is not none, cpu or nvme");
  }
  if (o.offload_params != OffloadKind::kNone && o.zero != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--offload_params ", OffloadName(o.offload_params), " needs --zero 3 (zero ", o.zero,
        " keeps whole parameters on every rank)"));
  }
  if (o.offload_grads == OffloadKind::kGpu) {
    return absl::InvalidArgumentError("--offload_grads gpu is not none, cpu or nvme");
  }
  if (o.offload_grads != OffloadKind::kNone && o.zero < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--offload_grads ", OffloadName(o.offload_grads), " needs --zero 2 or 3 (zero ", o.zero,
        " keeps the whole gradient on every rank)"));
  }
  if (o.prefetch_depth < 0 || o.prefetch_depth > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefetch_depth ", o.prefetch_depth, " is not in [0, 64]"));
  }
  if (o.param_budget < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--param_budget ", o.param_budget, " is negative"));
  }
  if (o.param_budget > 0 && o.zero != 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--param_budget bounds zero 3's gathered parameters; zero ", o.zero, " gathers none"));
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
  if (o.adamw_threads < 1 || o.adamw_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--adamw_threads ", o.adamw_threads, " is not in [1, 256]"));
  }
  // After --steps is known to be >= 1 (the schedule names it otherwise).
  if (absl::Status s = ScheduleOf(o).Validate(); !s.ok()) return s;
  if (o.checkpoint_every < 0 || (o.checkpoint_every > 0 && o.checkpoint_dir.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_every ", o.checkpoint_every,
                     o.checkpoint_every < 0 ? " must be >= 0" : " needs --checkpoint_dir"));
  }
  if (o.eval_every < 0 || o.steps >= kEvalStep) {
    return absl::InvalidArgumentError(absl::StrCat("--eval_every ", o.eval_every, " and --steps ",
                                                   o.steps, ": must be >= 0 and < 2^40"));
  }
  if (!std::isfinite(o.clip_grad_norm) || o.clip_grad_norm < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--clip_grad_norm ", o.clip_grad_norm,
                                                   " must be a finite number >= 0 (0: off)"));
  }
  if (o.keep_checkpoints < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keep_checkpoints ", o.keep_checkpoints, " must be >= 1"));
  }
  if (o.testing_halt_after_step < 0 || o.testing_halt_after_step > o.steps) {
    return absl::InvalidArgumentError(absl::StrCat("halt after step ", o.testing_halt_after_step,
                                                   " is outside [0, --steps ", o.steps, "]"));
  }
  if (!o.data.empty()) {
    if (o.model.vocab != 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data is byte-level text, which needs --vocab 256, not ", o.model.vocab));
    }
    // Opened here, before any rank starts, so that a bad file is one line at once.
    absl::StatusOr<ByteCorpus> corpus = OpenTrainCorpus(o);
    if (!corpus.ok()) {
      return absl::Status(corpus.status().code(),
                          absl::StrCat("--data: ", corpus.status().message()));
    }
    // The held-out set is one global batch of sequences.
    const absl::StatusOr<int64_t> wanted = CheckedMul(
        {{"--dp", o.dp}, {"--microbatches", o.microbatches}, {"--micro_batch", o.micro_batch}});
    if (!wanted.ok()) return wanted.status();
    if (o.eval_every > 0 && corpus->EvalCount() < *wanted) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--eval_every needs ", *wanted, " held-out sequences of --seq_len ", o.model.seq_len,
          " (--dp x --microbatches x --micro_batch); --eval_fraction ", o.eval_fraction,
          " of --data holds ", corpus->EvalCount()));
    }
  }
  return CheckJobSizes(o);
}

}  // namespace loom
