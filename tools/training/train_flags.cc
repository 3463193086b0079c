#include "tools/training/train_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "collectives/cost_model.h"
#include "core/byte_size.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "offload/offload_config.h"
#include "tools/planner/this_cpu.h"
#include "tools/training/cp_comm_choice.h"
#include "tools/training/job_plan.h"
#include "tools/training/offload_mapping.h"
#include "tools/training/validate.h"

ABSL_FLAG(int, dp, 2, "Data-parallel ranks.");
ABSL_FLAG(int, tp, 2, "Tensor-parallel ranks (must divide --heads).");
ABSL_FLAG(int, pp, 2,
          "Pipeline stages (at most --layers; layers that do not divide go to the inner "
          "stages first).");
ABSL_FLAG(int, cp, 1,
          "Context-parallel ranks: each holds its positions of every sequence (at most one "
          "apart in count, any --seq_len >= --cp), and attention runs as ring attention "
          "around them.");
ABSL_FLAG(std::string, cp_comm, "auto",
          "With --cp > 1, how attention crosses the cp ranks: ring (K/V blocks around the "
          "ring, overlapped with compute; any head count), a2a (all-to-all from sequence to "
          "heads and back; --cp must divide --heads / --tp), or auto (the one an alpha-beta "
          "model predicts to leave less communication exposed, the ring's hops hidden "
          "behind attention; the header line says why).");
ABSL_FLAG(std::string, cost_model, "",
          "The cost model the job's communicators choose their algorithms by, from this "
          "file (written by collective_bench --calibrate --save_cost_model), and with "
          "--cp_comm=auto the link's alpha and beta. Empty: a dp (or cp) group across "
          "hosts measures one on its hosts, once per set of hosts, cached in "
          "--cost_model_cache; inside one host, the formulas.");
ABSL_FLAG(std::string, cost_model_cache, "",
          "The directory of the cost models measured across hosts (empty: "
          "$LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom).");
ABSL_FLAG(int, cost_model_calibrations, 3,
          "How many jobs' calibrations the cache of --cost_model_cache merges (their "
          "median) before later jobs only read it; 1: the first job's is kept.");
ABSL_FLAG(double, attention_gflops, 50,
          "With --cp_comm=auto: one rank's fused attention rate in GFLOP/s, which the "
          "ring's hops hide behind (50: one Zen 4 core).");
ABSL_FLAG(std::string, cp_layout, "zigzag",
          "With --cp > 1, which positions each cp rank holds: zigzag (2 cp chunks, rank r "
          "holds chunks r and 2 cp - 1 - r: the same causal work on every rank) or contiguous "
          "(cp chunks, the last rank does the most work; for comparison).");
ABSL_FLAG(std::string, schedule, "1f1b",
          "Pipeline schedule: gpipe, 1f1b, interleaved-1f1b, zb-h1 or zb-v (the zero-bubble "
          "schedules split each backward into input and weight parts; zb-v puts two stages on "
          "each pipeline rank).");
ABSL_FLAG(int64_t, microbatches, 4, "Microbatches per step and data-parallel rank (>= --pp).");
ABSL_FLAG(int64_t, micro_batch, 2, "Sequences per microbatch.");
ABSL_FLAG(int64_t, steps, 100, "Optimizer steps.");
ABSL_FLAG(int, zero, 3,
          "ZeRO stage: 0 (plain data parallel), 1 (optimizer state sharded), 2 (and gradients) "
          "or 3 (and parameters).");
ABSL_FLAG(std::string, reshard, "auto",
          "With --zero=3: block (the model borrows each block's parameters from the ZeRO "
          "engine just before use, prefetching the next, and frees them after: again for the "
          "backward) or step (every block gathered at the step's first forward and kept until "
          "the optimizer step; gradients reduce-scattered once per step); auto: block at "
          "--zero=3, step otherwise. At --zero=1 or 2 nothing is gathered (the engine holds the "
          "whole weights once): step is block with the reduce-scatter deferred.");
ABSL_FLAG(bool, defer_reduce_scatter, false,
          "With --reshard=block: keep the gradients summed over the microbatches and "
          "reduce-scatter them once per step (the bits of --zero=0, at the memory of whole "
          "gradients); otherwise each backward reduce-scatters each block as it leaves it.");
ABSL_FLAG(bool, overlap_grad_reduce, true,
          "With --zero=0: all-reduce each unit's gradient (a block, the embeddings, the "
          "head) on a communication thread as soon as the step's last backward is done with "
          "it, beside the rest of the backward, as DDP does; false: one all-reduce after the "
          "backward.");
ABSL_FLAG(std::string, grad_bucket, "1M",
          "With --zero=0 and --overlap_grad_reduce: the largest all-reduce bucket a unit's "
          "gradient is cut into, from its last parameter backwards (a larger parameter alone), "
          "so a block's first gradients travel while the rest of its backward runs; 0: one "
          "bucket per unit.");
ABSL_FLAG(std::string, device, "cpu",
          "Where the job computes: cpu, or cuda (CUDA device 0; needs a build with "
          "--config=cuda). One rank with the optimizer state in host memory trains the whole "
          "model on the device (parameters, gradients, moments and activations there, bf16 or "
          "f32 products on cuBLAS); any other mesh sends only the matrix products there.");
ABSL_FLAG(std::string, device_attention, "auto",
          "--device=cuda on one rank: attention materialized (each head's [s, s] scores on "
          "cuBLAS) or flash (tiled, bf16 with head_dim 64 or 128); auto: flash where it "
          "applies.");
ABSL_FLAG(std::string, offload, "cpu",
          "Optimizer offload: none, cpu (CPU AdamW on threads), nvme (its state on disk) or gpu "
          "(AdamW on CUDA device 0, its moments there; zero 0, f32, a --config=cuda build).");
ABSL_FLAG(std::string, offload_params, "none",
          "Where --zero=3 keeps its parameter shards between uses: none or cpu (host memory, "
          "where this job keeps every weight) or nvme (on disk under --nvme_dir, each read just "
          "before its all-gather, written back by the step).");
ABSL_FLAG(std::string, offload_grads, "none",
          "Where --zero=2 and 3 keep their gradient shards: none or cpu (host memory) or nvme "
          "(on disk under --nvme_dir, added into by each reduce-scatter, read by the step).");
ABSL_FLAG(int64_t, prefetch_depth, 2,
          "With --zero=3: units gathered ahead of the one in use, in [0, 64].");
ABSL_FLAG(std::string, persist_below, "0",
          "With --zero=1, 2 or 3: a unit of the model (a block, the embeddings, the final norm "
          "with the head) whose parameters take fewer f32 bytes than this stays whole on every "
          "rank instead of sharded, e.g. 64K; 0: every unit is sharded.");
ABSL_FLAG(std::string, offload_config, "",
          "The offload library's spec (offload/offload_config.h) instead of --offload, "
          "--offload_params, --offload_grads, --nvme_dir and --prefetch_depth (and its threads: "
          "AdamW's), e.g. "
          "optimizer=nvme,params=nvme,host_budget=8G,nvme_dirs=/nvme0,prefetch=1 "
          "(validated against this machine's memory and disks).");
ABSL_FLAG(int64_t, threads_per_rank, 0,
          "Threads for each rank's matrix products (OpenBLAS); 0: this host's CPUs divided by "
          "its ranks, at least 1. More than 1 must fit: ranks on the host x threads <= CPUs.");
ABSL_FLAG(int64_t, param_budget, 0,
          "With --zero=3: the most gathered parameter bytes alive at once on a rank (prefetched "
          "units included); 0: the prefetch depth alone bounds them.");
ABSL_FLAG(std::string, nvme_dir, "",
          "With --offload, --offload_params or --offload_grads nvme: directories for the state on "
          "disk, ':' "
          "separated (one per drive); empty: a fresh directory under $TMPDIR, removed "
          "afterwards.");
ABSL_FLAG(std::string, dtype, "f32", "Compute dtype: f32 or bf16 (bf16 with --zero=1, 2 or 3).");
ABSL_FLAG(std::string, recompute, "none", "Activation checkpointing: none or full.");
ABSL_FLAG(int64_t, vocab, 0, "Vocabulary size; 0: 64 for the Markov chain, 256 with --data.");
ABSL_FLAG(std::vector<std::string>, data, {},
          "Train on these text files (comma-separated, read as one text) as byte-level language "
          "modelling (vocabulary 256) instead of the seeded Markov chain.");
ABSL_FLAG(double, eval_fraction, 0.05,
          "With --data: the share of the text, at its end, held out from training, in [0, 0.5].");
ABSL_FLAG(int64_t, seq_len, 32, "Tokens per sequence.");
ABSL_FLAG(int64_t, hidden, 64, "Hidden size.");
ABSL_FLAG(int64_t, heads, 4, "Attention heads.");
ABSL_FLAG(int64_t, layers, 4, "Transformer blocks.");
ABSL_FLAG(double, lr, 3e-3, "AdamW learning rate.");
ABSL_FLAG(double, adam_eps, 1e-6, "AdamW epsilon.");
ABSL_FLAG(int64_t, eval_every, 0,
          "Every N steps and after the last: the mean loss over a fixed held-out set (one global "
          "batch; with --data the text's held-out tail), computed on the training mesh; 0: off.");
ABSL_FLAG(double, clip_grad_norm, 0,
          "Scale the dp-averaged gradient of the whole model to this global L2 norm when it is "
          "longer (each element counted once across tp, pp and dp); 0: off.");
ABSL_FLAG(int64_t, warmup_steps, 0, "Linear learning-rate warm-up over this many steps.");
// A string, not std::optional<double>: absl stores such a flag under a sequence lock
// whose atomic_thread_fence GCC 12 refuses to build with -fsanitize=thread.
ABSL_FLAG(std::string, lr_min, "",
          "Cosine decay from --lr (after the warm-up) to this rate at the last step; unset: no "
          "decay.");
ABSL_FLAG(std::string, metrics, "",
          "Append one JSON line per step to FILE: step, loss, eval_loss, lr, tokens_per_second, "
          "bytes_sent, seconds (a resumed run first drops the lines it will log again).");
ABSL_FLAG(std::string, plot, "",
          "Write the loss curve (and the eval loss) as an SVG to FILE at the end (from --metrics "
          "when given, so a resumed run plots the whole run).");
ABSL_FLAG(uint64_t, seed, 1, "Model seed.");
ABSL_FLAG(int64_t, plan, 0,
          "Train on N thread ranks in the configuration //tools:plan ranks first for this "
          "model on this CPU (dp, tp, pp, cp, zero, schedule, microbatches, micro_batch and "
          "recompute are the planner's; leave them out). 0: off.");
ABSL_FLAG(int64_t, global_batch, 0,
          "With --plan: sequences per step (0: dp x microbatches x micro_batch of the "
          "defaults, 16).");
ABSL_FLAG(std::vector<std::string>, plan_calibration, {},
          "With --plan: --summary_json files of one-rank runs of this model; the one with "
          "the threads each rank gets fits the planner's constants (tools/README.md, plan).");
ABSL_FLAG(bool, print_mesh, false,
          "Print every rank's coordinates and groups (the table //tools:mesh prints for the "
          "job's shape and order) before training.");
ABSL_FLAG(bool, compare_reference, true,
          "Also train on one rank and report the largest parameter difference.");
ABSL_FLAG(std::string, trace, "", "Write a Chrome trace of the last step's pipeline to FILE.");
ABSL_FLAG(std::string, summary_json, "", "Write the summary as JSON to FILE.");
ABSL_FLAG(std::string, transport, "threads",
          "threads (ranks are threads of this process), shm (processes over shared memory) or "
          "mpi (the processes of an mpirun job; started as one when run directly).");
// A string, parsed with absl::ParseDuration (see collective_bench's --timeout).
ABSL_FLAG(std::string, heartbeat_timeout, "10s",
          "With --transport=shm or mpi: a rank that has not run for this long (stopped, "
          "frozen) is reported by its peers, which end the job naming it; at least 200ms, or "
          "inf (off).");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Save checkpoints here (created if missing): every --checkpoint_every steps and after "
          "the last. A checkpoint holds every parameter in the whole model's coordinates, so any "
          "valid mesh can resume from it.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Steps between checkpoints; 0: only after the last step.");
ABSL_FLAG(int, keep_checkpoints, 2, "Checkpoints to keep in --checkpoint_dir (the newest).");
ABSL_FLAG(bool, resume, false,
          "Continue from the latest checkpoint in --checkpoint_dir, on this run's mesh; with no "
          "checkpoint there yet, start at step 0.");
ABSL_FLAG(std::string, resume_from, "",
          "Continue from the latest checkpoint in this directory (which must hold one), on this "
          "run's mesh; new checkpoints go to --checkpoint_dir.");
ABSL_FLAG(int, max_restarts, 0,
          "With --transport=shm: when a rank fails (killed, crashed, stopped responding), stop "
          "the job and start it again from the latest checkpoint, up to this many times. Needs "
          "--checkpoint_dir.");
ABSL_FLAG(bool, elastic_dp, false,
          "With --max_restarts: a restart treats the failed rank's host as lost and continues "
          "with fewer data-parallel replicas (the largest dp below the current one that keeps "
          "the global batch, dp x microbatches, whole), from the mesh-independent checkpoint.");
ABSL_FLAG(int, min_ranks, 1,
          "With --elastic_dp: a restart that would leave fewer ranks than this ends the job "
          "instead.");
ABSL_FLAG(std::string, job_id, "",
          "With --transport=shm: the job's id, 1 to 64 characters from [A-Za-z0-9_-]; its "
          "segments are /dev/shm/loom.<id>-<dimension><group>.*. Empty makes a unique one.");

namespace loom {
namespace {

// A byte-size flag's value ("64K", "1M", "0"), at most 1P.
absl::StatusOr<int64_t> ByteSizeFlag(absl::string_view name, const std::string& value) {
  absl::StatusOr<size_t> bytes = ParseByteSize(value);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", bytes.status().message()));
  }
  if (*bytes > (size_t{1} << 50)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " ", *bytes, " bytes is above 1P"));
  }
  return static_cast<int64_t>(*bytes);
}

// ParseChoice maps a flag's `value` to its choice: InvalidArgument "--flag value
// is not a, b or c" naming every choice otherwise.
template <typename T>
absl::StatusOr<T> ParseChoice(absl::string_view flag, const std::string& value,
                              std::initializer_list<std::pair<const char*, T>> choices) {
  std::string names;
  size_t i = 0;
  for (const auto& [name, choice] : choices) {
    if (value == name) return choice;
    absl::StrAppend(&names, i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", "), name);
    ++i;
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", value, " is not ", names));
}

// GivenFlag: whether flag `name` is set away from its default.
bool GivenFlag(absl::string_view name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->CurrentValue() != flag->DefaultValue();
}

absl::StatusOr<TrainJobOptions> OptionsFromFlags() {
  TrainJobOptions o;
  o.dp = absl::GetFlag(FLAGS_dp);
  o.tp = absl::GetFlag(FLAGS_tp);
  o.pp = absl::GetFlag(FLAGS_pp);
  o.cp = absl::GetFlag(FLAGS_cp);
  LOOM_ASSIGN_OR_RETURN(o.cp_layout,
                        ParseChoice<CpLayout>("--cp_layout", absl::GetFlag(FLAGS_cp_layout),
                                              {{"zigzag", CpLayout::kZigzag},
                                               {"contiguous", CpLayout::kContiguous}}));
  const std::string cp_comm = absl::GetFlag(FLAGS_cp_comm);
  if (cp_comm != "auto") {
    LOOM_ASSIGN_OR_RETURN(o.cp_comm, ParseChoice<CpComm>("--cp_comm", cp_comm,
                                                         {{"ring", CpComm::kRing},
                                                          {"a2a", CpComm::kAllToAll}}));
  }
  absl::StatusOr<PipelineScheduleKind> schedule =
      ParsePipelineSchedule(absl::GetFlag(FLAGS_schedule));
  if (!schedule.ok())
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", schedule.status().message()));
  o.schedule = *schedule;
  o.microbatches = absl::GetFlag(FLAGS_microbatches);
  o.micro_batch = absl::GetFlag(FLAGS_micro_batch);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.zero = absl::GetFlag(FLAGS_zero);
  LOOM_ASSIGN_OR_RETURN(o.reshard, ParseChoice<Reshard>("--reshard", absl::GetFlag(FLAGS_reshard),
                                                       {{"auto", Reshard::kAuto},
                                                        {"step", Reshard::kStep},
                                                        {"block", Reshard::kBlock}}));
  o.defer_reduce_scatter = absl::GetFlag(FLAGS_defer_reduce_scatter);
  o.overlap_grad_reduce = absl::GetFlag(FLAGS_overlap_grad_reduce);
  LOOM_ASSIGN_OR_RETURN(o.device,
                        ParseChoice<ComputeDevice>("--device", absl::GetFlag(FLAGS_device),
                                                   {{"cpu", ComputeDevice::kCpu},
                                                    {"cuda", ComputeDevice::kCuda}}));
  o.device_attention = absl::GetFlag(FLAGS_device_attention);
  if (o.device_attention != "auto" && o.device_attention != "materialized" &&
      o.device_attention != "flash") {
    return absl::InvalidArgumentError(absl::StrCat("--device_attention ", o.device_attention,
                                                   " is not auto, materialized or flash"));
  }
  LOOM_ASSIGN_OR_RETURN(o.offload,
                        ParseChoice<OffloadKind>("--offload", absl::GetFlag(FLAGS_offload),
                                                 {{"none", OffloadKind::kNone},
                                                  {"cpu", OffloadKind::kCpu},
                                                  {"nvme", OffloadKind::kNvme},
                                                  {"gpu", OffloadKind::kGpu}}));
  LOOM_ASSIGN_OR_RETURN(
      o.offload_params,
      ParseChoice<OffloadKind>("--offload_params", absl::GetFlag(FLAGS_offload_params),
                               {{"none", OffloadKind::kNone},
                                {"cpu", OffloadKind::kCpu},
                                {"nvme", OffloadKind::kNvme}}));
  LOOM_ASSIGN_OR_RETURN(
      o.offload_grads,
      ParseChoice<OffloadKind>("--offload_grads", absl::GetFlag(FLAGS_offload_grads),
                               {{"none", OffloadKind::kNone},
                                {"cpu", OffloadKind::kCpu},
                                {"nvme", OffloadKind::kNvme}}));
  o.param_budget = absl::GetFlag(FLAGS_param_budget);
  o.nvme_dir = absl::GetFlag(FLAGS_nvme_dir);
  const int64_t prefetch = absl::GetFlag(FLAGS_prefetch_depth);
  if (prefetch < 0 || prefetch > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefetch_depth ", prefetch, " is not in [0, 64]"));
  }
  o.prefetch_depth = static_cast<int>(prefetch);
  LOOM_ASSIGN_OR_RETURN(o.persist_below_bytes,
                        ByteSizeFlag("persist_below", absl::GetFlag(FLAGS_persist_below)));
  LOOM_ASSIGN_OR_RETURN(o.grad_bucket_bytes,
                        ByteSizeFlag("grad_bucket", absl::GetFlag(FLAGS_grad_bucket)));
  const int64_t threads_per_rank = absl::GetFlag(FLAGS_threads_per_rank);
  if (threads_per_rank < 0 || threads_per_rank > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--threads_per_rank ", threads_per_rank, " is not in [0, 1024] (0: automatic)"));
  }
  o.threads_per_rank = static_cast<int>(threads_per_rank);
  LOOM_ASSIGN_OR_RETURN(o.dtype, ParseChoice<DType>("--dtype", absl::GetFlag(FLAGS_dtype),
                                                   {{"f32", DType::kF32}, {"bf16", DType::kBF16}}));
  LOOM_ASSIGN_OR_RETURN(o.recompute,
                        ParseChoice<Recompute>("--recompute", absl::GetFlag(FLAGS_recompute),
                                               {{"none", Recompute::kNone},
                                                {"full", Recompute::kFull}}));
  o.data = absl::GetFlag(FLAGS_data);
  o.eval_fraction = absl::GetFlag(FLAGS_eval_fraction);
  o.model.vocab = absl::GetFlag(FLAGS_vocab);
  if (o.model.vocab == 0) o.model.vocab = o.data.empty() ? 64 : 256;
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.model.hidden = absl::GetFlag(FLAGS_hidden);
  o.model.heads = absl::GetFlag(FLAGS_heads);
  o.model.layers = absl::GetFlag(FLAGS_layers);
  o.model.seed = absl::GetFlag(FLAGS_seed);
  o.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  o.adam_eps = static_cast<float>(absl::GetFlag(FLAGS_adam_eps));
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.clip_grad_norm = static_cast<float>(absl::GetFlag(FLAGS_clip_grad_norm));
  if (const std::string lr_min = absl::GetFlag(FLAGS_lr_min); !lr_min.empty()) {
    double value = 0;
    if (!absl::SimpleAtod(lr_min, &value)) {
      return absl::InvalidArgumentError(absl::StrCat("--lr_min=", lr_min, " is not a number"));
    }
    o.lr_min = static_cast<float>(value);
  }
  o.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  const std::string resume_from = absl::GetFlag(FLAGS_resume_from);
  if (absl::GetFlag(FLAGS_resume)) {
    if (!resume_from.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--resume continues from --checkpoint_dir; --resume_from ", resume_from,
                       " names another directory: give one of them"));
    }
    if (o.checkpoint_dir.empty()) {
      return absl::InvalidArgumentError("--resume needs --checkpoint_dir (where to resume from)");
    }
    o.resume_dir = o.checkpoint_dir;
    o.resume_required = false;
  } else if (!resume_from.empty()) {
    o.resume_dir = resume_from;
    o.resume_required = true;
  }
  if (const std::string spec = absl::GetFlag(FLAGS_offload_config); !spec.empty()) {
    // One source of truth: the spec replaces the flags it covers (one set away
    // from its default is refused rather than silently overridden).
    for (const char* flag :
         {"offload", "offload_params", "offload_grads", "nvme_dir", "prefetch_depth"}) {
      if (GivenFlag(flag)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--offload_config replaces --", flag, ": give one of them"));
      }
    }
    absl::StatusOr<OffloadConfig> config = ParseOffloadConfig(spec);
    if (!config.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--offload_config: ", config.status().message()));
    }
    LOOM_RETURN_IF_ERROR(ApplyOffloadConfig(*config, &o));  // validated there
  }
  return o;
}

// PlanFromFlags: --plan=N replaces the mesh, ZeRO stage, schedule, microbatching and
// recompute of `options` by the planner's first choice (training/job_plan.h) and
// returns its line (the job's first) in `*line`.
absl::Status PlanFromFlags(int argc, char** argv, RankTransport transport,
                           TrainJobOptions& options, std::string* line) {
  const int64_t world = absl::GetFlag(FLAGS_plan);
  const int64_t global_batch = absl::GetFlag(FLAGS_global_batch);
  if (world == 0) {
    if (global_batch != 0 || !absl::GetFlag(FLAGS_plan_calibration).empty()) {
      return absl::InvalidArgumentError("--global_batch and --plan_calibration go with --plan");
    }
    return absl::OkStatus();
  }
  if (world < 0) return absl::InvalidArgumentError(absl::StrCat("--plan is ", world));
  if (transport != RankTransport::kThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("--plan is for --transport threads (one process measures and chooses), not ",
                     RankTransportName(transport)));
  }
  // Given on the command line at all, even at its default value.
  for (const char* flag : {"dp", "tp", "pp", "cp", "zero", "schedule", "microbatches",
                           "micro_batch", "recompute"}) {
    for (int i = 1; i < argc; ++i) {
      absl::string_view arg = argv[i];
      if (arg == "--") break;
      if (!absl::ConsumePrefix(&arg, "--")) absl::ConsumePrefix(&arg, "-");
      if (arg == flag || absl::StartsWith(arg, absl::StrCat(flag, "="))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--plan chooses --", flag, "; leave it out"));
      }
    }
  }
  if (global_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--global_batch is ", global_batch));
  }
  std::vector<planner::JobRun> calibrations;
  for (const std::string& path : absl::GetFlag(FLAGS_plan_calibration)) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat("--plan_calibration ", path, ": cannot be read"));
    }
    absl::StatusOr<planner::JobRun> run = planner::ParseJobSummary(text.str());
    if (!run.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--plan_calibration ", path, ": ", run.status().message()));
    }
    calibrations.push_back(*run);
  }
  LOOM_ASSIGN_OR_RETURN(
      PlannedJob job,
      PlanTrainJob(options, world,
                   global_batch > 0 ? global_batch
                                    : int64_t{options.dp} * options.microbatches * options.micro_batch,
                   calibrations));
  options = std::move(job.options);
  *line = job.line;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainCommand> TrainCommandFromFlags(int argc, char** argv) {
  TrainCommand command;
  LOOM_ASSIGN_OR_RETURN(command.options, OptionsFromFlags());
  TrainLaunchOptions& launch = command.launch;
  LOOM_ASSIGN_OR_RETURN(
      launch.transport,
      ParseChoice<RankTransport>("--transport", absl::GetFlag(FLAGS_transport),
                                 {{"threads", RankTransport::kThreads},
                                  {"shm", RankTransport::kShm},
                                  {"mpi", RankTransport::kMpi}}));
  launch.job_id = absl::GetFlag(FLAGS_job_id);
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_heartbeat_timeout), &launch.heartbeat_timeout)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_timeout ", absl::GetFlag(FLAGS_heartbeat_timeout), " is not a duration"));
  }
  launch.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  launch.elastic_dp = absl::GetFlag(FLAGS_elastic_dp);
  launch.min_ranks = absl::GetFlag(FLAGS_min_ranks);
  TrainOutputs& outputs = command.outputs;
  outputs.trace = absl::GetFlag(FLAGS_trace);
  outputs.summary_json = absl::GetFlag(FLAGS_summary_json);
  outputs.metrics = absl::GetFlag(FLAGS_metrics);
  outputs.plot = absl::GetFlag(FLAGS_plot);
  outputs.compare_reference = absl::GetFlag(FLAGS_compare_reference);
  outputs.print_mesh = absl::GetFlag(FLAGS_print_mesh);
  command.offload_config = absl::GetFlag(FLAGS_offload_config);
  LOOM_RETURN_IF_ERROR(
      PlanFromFlags(argc, argv, launch.transport, command.options, &command.plan_line));
  LOOM_RETURN_IF_ERROR(ValidateTrainJob(command.options, launch));
  // A file the command line names that cannot be read or parsed is a usage error.
  command.options.cost_model = absl::GetFlag(FLAGS_cost_model);
  command.options.cost_model_cache = absl::GetFlag(FLAGS_cost_model_cache);
  command.options.cost_model_calibrations = absl::GetFlag(FLAGS_cost_model_calibrations);
  if (command.options.cost_model_calibrations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cost_model_calibrations=", command.options.cost_model_calibrations,
        ": the cache merges 1 calibration or more"));
  }
  LOOM_ASSIGN_OR_RETURN(const std::optional<CostModel> given_model,
                        LoadJobCostModel(command.options));
  // --cp_comm auto: the variant the cost model prices lower (cp_comm_choice.h), on a
  // valid mesh; from the flags and the file alone, so every rank chooses the same.
  if (absl::GetFlag(FLAGS_cp_comm) != "auto") {
    // The attention rate decides nothing then: refused rather than ignored.
    if (GivenFlag("attention_gflops")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--attention_gflops is for --cp_comm=auto, not --cp_comm=", absl::GetFlag(FLAGS_cp_comm)));
    }
  } else {
    CpCostInputs inputs;
    inputs.attention_flops_per_second = absl::GetFlag(FLAGS_attention_gflops) * 1e9;
    if (!(inputs.attention_flops_per_second > 0) ||
        !std::isfinite(inputs.attention_flops_per_second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--attention_gflops ", absl::GetFlag(FLAGS_attention_gflops), " must be > 0"));
    }
    if (given_model.has_value()) {
      inputs.alpha = given_model->constants().alpha;
      inputs.beta = given_model->constants().beta;
      inputs.source = command.options.cost_model;
    }
    absl::StatusOr<CpCommChoice> choice = ChooseCpComm(command.options, inputs);
    if (!choice.ok()) return choice.status();
    command.options.cp_comm = choice->comm;
    command.cp_comm_why = absl::StrCat("auto, ", choice->why);
  }
  return command;
}

std::string TrainUsage() {
  std::vector<std::string> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::EndsWith(flag->Filename(), "train_flags.cc")) continue;
    const std::string value = flag->DefaultValue();
    flags.push_back(absl::StrCat("[--", name, "=", value.empty() ? "..." : value, "]"));
  }
  std::sort(flags.begin(), flags.end());
  std::string usage =
      "Trains a GPT decoder over dp x tp x pp x cp ranks (threads, shm processes or an mpirun "
      "job) with ZeRO 0-3 and offload, and compares it with one rank.\n  train";
  size_t column = 7;
  for (const std::string& flag : flags) {
    if (column + flag.size() + 1 > 96) {
      absl::StrAppend(&usage, "\n       ");
      column = 7;
    }
    absl::StrAppend(&usage, " ", flag);
    column += flag.size() + 1;
  }
  absl::StrAppend(&usage, "\n(train --help describes each flag; tools/docs/train.md the job)");
  return usage;
}

}  // namespace loom
