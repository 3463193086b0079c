// train: Loom's end-to-end training job (tools/training/train_job.h). Trains a small GPT
// decoder on a seeded Markov chain over dp x pp x tp thread ranks with ZeRO-3 and
// CPU-offloaded AdamW by default, prints one line per step and a summary, and
// compares the result with the same training on one rank.
//
//   ./bazelw run //tools:train
//   ./bazelw run //tools:train -- --dp=4 --tp=1 --pp=2 --zero=0 --steps=20
//   ./bazelw run //tools:train -- --transport=shm    # 8 processes, shared memory
//   ./bazelw run //tools:train -- --transport=mpi    # 8 processes of an mpirun job
//
// With --transport=shm the ranks are processes: run directly, train starts them
// itself (through tools/launcher, as //tools:launch does) as copies of this binary
// with the same flags; a process that finds LOOM_JOB_ID in its environment is one
// rank. World rank 0 prints; a failing rank stops the job and is named.
// With --transport=mpi the ranks are the processes of an Open MPI job: under mpirun
// (`mpirun -np 8 train --transport=mpi`, across hosts too) each process is the rank
// MPI gives it; run directly, train re-runs itself under a one-host mpirun.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "collectives/cost_model.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/build_info.h"
#include "core/byte_size.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fma_peak.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "offload/offload_config.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tools/cli.h"
#include "tools/internal/janitor.h"
#include "tools/job_files.h"
#include "tools/launcher.h"
#include "tools/mesh_report.h"
#include "tools/planner/this_cpu.h"
#include "tools/training/atomic_file.h"
#include "tools/training/compute_report.h"
#include "tools/training/cp_comm_choice.h"
#include "tools/training/job_checkpoint.h"
#include "tools/training/job_mesh.h"
#include "tools/training/job_plan.h"
#include "tools/training/loss_plot.h"
#include "tools/training/metrics_log.h"
#include "tools/training/offload_mapping.h"
#include "tools/training/reference.h"
#include "tools/training/train_job.h"
#include "topology/mesh.h"
#include "topology/node_layout.h"
#include "topology/parallel_config.h"

ABSL_FLAG(int, dp, 2, "Data-parallel ranks.");
ABSL_FLAG(int, tp, 2, "Tensor-parallel ranks (must divide --heads).");
ABSL_FLAG(int, pp, 2, "Pipeline stages (must divide --layers).");
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
          "With --cp_comm=auto: the link's alpha and beta from this file (written by "
          "collective_bench --calibrate --save_cost_model); the defaults otherwise.");
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
ABSL_FLAG(std::string, device, "cpu",
          "Where the layers' matrix products run: cpu (OpenBLAS) or cuda (cuBLAS on CUDA "
          "device 0, f32; needs a build with --config=cuda). Everything else stays on the CPU.");
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

// JsonSafe returns `text` fit for a JSON string: quotes and backslashes escaped,
// control characters dropped (a CPU model name comes from /proc/cpuinfo).
std::string JsonSafe(absl::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
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
  LOOM_ASSIGN_OR_RETURN(o.device,
                        ParseChoice<ComputeDevice>("--device", absl::GetFlag(FLAGS_device),
                                                   {{"cpu", ComputeDevice::kCpu},
                                                    {"cuda", ComputeDevice::kCuda}}));
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
  {
    absl::StatusOr<size_t> persist = ParseByteSize(absl::GetFlag(FLAGS_persist_below));
    if (!persist.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--persist_below: ", persist.status().message()));
    }
    if (*persist > (size_t{1} << 50)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--persist_below ", *persist, " bytes is above 1P"));
    }
    o.persist_below_bytes = static_cast<int64_t>(*persist);
  }
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
  const int restarts = absl::GetFlag(FLAGS_max_restarts);
  if (restarts < 0 || restarts > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_restarts ", restarts, " is not in [0, 100]"));
  }
  if (absl::GetFlag(FLAGS_elastic_dp) && restarts == 0) {
    return absl::InvalidArgumentError("--elastic_dp needs --max_restarts (it acts on restarts)");
  }
  if (restarts > 0 && o.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_restarts ", restarts, " needs --checkpoint_dir (a restart resumes from it)"));
  }
  if (const std::string spec = absl::GetFlag(FLAGS_offload_config); !spec.empty()) {
    // One source of truth: the spec replaces the flags it covers (one set away
    // from its default is refused rather than silently overridden).
    for (const char* flag :
         {"offload", "offload_params", "offload_grads", "nvme_dir", "prefetch_depth"}) {
      const absl::CommandLineFlag* given = absl::FindCommandLineFlag(flag);
      if (given != nullptr && given->CurrentValue() != given->DefaultValue()) {
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

// WriteFile writes `text` to `path` (flag `flag`'s value); Unavailable naming the
// flag, the path and strerror when a call fails.
absl::Status WriteFile(absl::string_view flag, const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat(flag, "=", path, ": cannot open for writing: ", StrError(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      return absl::UnavailableError(
          absl::StrCat(flag, "=", path, ": write: ", StrError(error)));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) {
    return absl::UnavailableError(absl::StrCat(flag, "=", path, ": close: ", StrError(errno)));
  }
  return absl::OkStatus();
}

// CheckCheckpointDirectory: --checkpoint_dir is a directory this process may write
// in, or can be made as one (its parent is).
absl::Status CheckCheckpointDirectory(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  std::string target = dir;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint_dir ", dir, ": ", StrError(errno)));
    }
    const size_t slash = dir.find_last_of('/');
    target = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
    if (::stat(target.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir ", dir, ": its parent ",
                                                     target, ": ", StrError(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_dir ", dir, ": ", target, " is not a directory"));
  }
  if (::access(target.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir ", dir, ": cannot write in ",
                                                   target, ": ", StrError(errno)));
  }
  return absl::OkStatus();
}

// CheckPaths checks, before any rank starts, what the job will write: --trace and
// --summary_json can be opened for writing, and each --nvme_dir is a directory this
// process may write in. InvalidArgument naming the flag, the path and strerror.
absl::Status CheckPaths(const TrainJobOptions& o) {
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--trace", absl::GetFlag(FLAGS_trace)));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--summary_json", absl::GetFlag(FLAGS_summary_json)));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--metrics", absl::GetFlag(FLAGS_metrics)));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--plot", absl::GetFlag(FLAGS_plot)));
  LOOM_RETURN_IF_ERROR(CheckCheckpointDirectory(o.checkpoint_dir));
  // The checkpoint to resume from, before any rank starts: there is one (for
  // --resume_from), it is readable, and it holds this model.
  if (!o.resume_dir.empty()) {
    const absl::string_view flag = o.resume_required ? "--resume_from " : "--resume ";
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(o.resume_dir);
    if (!reader.ok() && (o.resume_required || !absl::IsNotFound(reader.status()))) {
      // Nothing to resume from is the command line's fault; a damaged checkpoint is not.
      return absl::Status(absl::IsNotFound(reader.status()) ? absl::StatusCode::kInvalidArgument
                                                            : reader.status().code(),
                          absl::StrCat(flag, o.resume_dir, ": ", reader.status().message()));
    }
    if (reader.ok()) {
      if (absl::Status s = reader->CheckModel(o.model); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(flag, o.resume_dir, ": ", s.message()));
      }
    }
  }
  if (!UsesDisk(o)) return absl::OkStatus();
  for (absl::string_view dir : absl::StrSplit(o.nvme_dir, ':', absl::SkipEmpty())) {
    const std::string path(dir);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nvme_dir: ", path, ": ", StrError(errno)));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("--nvme_dir: ", path, " is not a directory"));
    }
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nvme_dir: ", path, ": cannot write in it: ", StrError(errno)));
    }
  }
  return absl::OkStatus();
}

// SmallerDataParallel: the largest dp' < dp whose replicas split the global batch
// (dp x microbatches) evenly into at least `pp` microbatches each, with that count.
std::optional<std::pair<int, int64_t>> SmallerDataParallel(int dp, int64_t microbatches, int pp) {
  const int64_t global = int64_t{dp} * microbatches;
  for (int smaller = dp - 1; smaller >= 1; --smaller) {
    if (global % smaller == 0 && global / smaller >= pp) {
      return std::make_pair(smaller, global / smaller);
    }
  }
  return std::nullopt;
}

// Launch runs the job as processes: this binary again, once per rank, with the
// same arguments; returns the exit code (a failing rank's, named on stderr).
int LaunchRanks(const TrainJobOptions& o, int argc, char** argv) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    cli::PrintError("train", absl::StrCat("--transport shm: cannot find this binary: "
                                          "readlink(/proc/self/exe): ",
                                          StrError(errno)));
    return cli::kExitRuntime;
  }
  LaunchOptions launch;
  launch.num_ranks = JobWorldSize(o);
  launch.argv.push_back(std::string(self, static_cast<size_t>(n)));
  for (int i = 1; i < argc; ++i) launch.argv.push_back(argv[i]);
  launch.job_id = absl::GetFlag(FLAGS_job_id);
  if (launch.job_id.empty()) launch.job_id = GenerateJobId();
  // A restart resumes from the newest checkpoint of --checkpoint_dir (the later
  // flags win over the user's own --resume_from).
  RestartPolicy restarts;
  restarts.max_restarts = absl::GetFlag(FLAGS_max_restarts);
  restarts.restart_argv = launch.argv;
  restarts.restart_argv.push_back("--resume");
  restarts.restart_argv.push_back("--resume_from=");
  int dp = o.dp;
  int64_t microbatches = o.microbatches;
  restarts.on_restart = [&](int restart, const LaunchResult& failed, LaunchOptions* next) {
    std::cerr << Describe(failed);
    std::string mesh;
    if (absl::GetFlag(FLAGS_elastic_dp)) {
      // The failed rank's host is gone: fewer dp replicas, the same global batch.
      const std::optional<std::pair<int, int64_t>> smaller =
          SmallerDataParallel(dp, microbatches, o.pp);
      const int min_ranks = absl::GetFlag(FLAGS_min_ranks);
      if (!smaller.has_value() || smaller->first * o.tp * o.pp * o.cp < min_ranks) {
        std::cerr << absl::StrFormat(
            "train: no restart: --elastic_dp has no smaller dp for dp %d x %d microbatches "
            "with at least --min_ranks %d ranks\n",
            dp, microbatches, min_ranks);
        return false;
      }
      dp = smaller->first;
      microbatches = smaller->second;
      next->num_ranks = int64_t{dp} * o.tp * o.pp * o.cp;
      next->argv.push_back(absl::StrCat("--dp=", dp));
      next->argv.push_back(absl::StrCat("--microbatches=", microbatches));
      mesh = absl::StrFormat(" at dp %d (%d microbatches, %d ranks)", dp, microbatches,
                             next->num_ranks);
    }
    const absl::StatusOr<int64_t> step = LatestCheckpointStep(o.checkpoint_dir);
    std::cerr << absl::StrFormat(
        "train: restart %d of %d: rank %d %s; resuming from %s%s\n", restart, restarts.max_restarts,
        failed.first_failed_rank.value_or(-1), failed.first_failure,
        step.ok() ? absl::StrFormat("the checkpoint of step %d in %s", *step, o.checkpoint_dir)
                  : std::string("step 0 (no checkpoint yet)"),
        mesh);
    return true;
  };
  const absl::StatusOr<RestartedLaunch> result = LaunchWithRestarts(launch, restarts);
  // The launcher removed each job's segments (/dev/shm/loom.<job_id>.*, every
  // group's) and its directory.
  if (!result.ok()) return cli::Fail("train", result.status());
  if (result->last.ExitCode() != 0) std::cerr << Describe(result->last);
  if (result->restarts > 0) {
    std::cerr << absl::StrFormat("train: %d restart%s\n", result->restarts,
                                 result->restarts == 1 ? "" : "s");
  }
  return result->last.ExitCode();
}

// PlanFromFlags: --plan=N replaces the mesh, ZeRO stage, schedule, microbatching and
// recompute of `options` by the planner's first choice (training/job_plan.h) and
// prints it as the job's first line.
absl::Status PlanFromFlags(int argc, char** argv, const std::string& transport,
                           TrainJobOptions& options) {
  const int64_t world = absl::GetFlag(FLAGS_plan);
  const int64_t global_batch = absl::GetFlag(FLAGS_global_batch);
  if (world == 0) {
    if (global_batch != 0 || !absl::GetFlag(FLAGS_plan_calibration).empty()) {
      return absl::InvalidArgumentError("--global_batch and --plan_calibration go with --plan");
    }
    return absl::OkStatus();
  }
  if (world < 0) return absl::InvalidArgumentError(absl::StrCat("--plan is ", world));
  if (transport != "threads") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan is for --transport threads (one process measures and chooses), not ", transport));
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
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--plan_calibration ", path, ": cannot be read"));
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
  std::cout << job.line << std::endl;
  return absl::OkStatus();
}

// Run holds an MPI rank's session in `*mpi` so that main can end the job on a
// failure: MPI_Finalize would wait for peers that still wait on this rank.
absl::Status Run(int argc, char** argv, int* exit_code, std::unique_ptr<MpiSession>* mpi) {
  // Every flag is checked here, before any rank, process or mpirun starts.
  absl::StatusOr<TrainJobOptions> options = OptionsFromFlags();
  if (!options.ok()) return options.status();
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "threads" && transport != "shm" && transport != "mpi") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport ", transport, " is not threads, shm or mpi"));
  }
  if (absl::Status s = PlanFromFlags(argc, argv, transport, *options); !s.ok()) return s;
  if (absl::Status s = ValidateTrainJob(*options, transport); !s.ok()) return s;
  // --cp_comm auto: the variant the cost model prices lower (cp_comm_choice.h), on a
  // valid mesh; from the flags and the file alone, so every rank chooses the same.
  std::string cp_comm_why = "given by --cp_comm";
  if (absl::GetFlag(FLAGS_cp_comm) != "auto") {
    // The cost model's inputs decide nothing then: refused rather than ignored.
    for (const char* flag : {"cost_model", "attention_gflops"}) {
      const absl::CommandLineFlag* given = absl::FindCommandLineFlag(flag);
      if (given != nullptr && given->CurrentValue() != given->DefaultValue()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag, " is for --cp_comm=auto, not --cp_comm=", absl::GetFlag(FLAGS_cp_comm)));
      }
    }
  } else {
    CpCostInputs inputs;
    inputs.attention_flops_per_second = absl::GetFlag(FLAGS_attention_gflops) * 1e9;
    if (!(inputs.attention_flops_per_second > 0) ||
        !std::isfinite(inputs.attention_flops_per_second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--attention_gflops ", absl::GetFlag(FLAGS_attention_gflops), " must be > 0"));
    }
    if (const std::string path = absl::GetFlag(FLAGS_cost_model); !path.empty()) {
      absl::StatusOr<CostModel> model = CostModel::Load(path);
      if (!model.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--cost_model ", path, ": ", model.status().message()));
      }
      inputs.alpha = model->constants().alpha;
      inputs.beta = model->constants().beta;
      inputs.source = path;
    }
    absl::StatusOr<CpCommChoice> choice = ChooseCpComm(*options, inputs);
    if (!choice.ok()) return choice.status();
    options->cp_comm = choice->comm;
    cp_comm_why = absl::StrCat("auto, ", choice->why);
  }
  const TrainJobOptions& o = *options;
  if (const std::string job_id = absl::GetFlag(FLAGS_job_id); !job_id.empty()) {
    if (transport != "shm") {
      return absl::InvalidArgumentError(
          absl::StrCat("--job_id ", job_id, " is for --transport shm, not ", transport));
    }
    if (absl::Status s = ValidateJobId(job_id); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--job_id: ", s.message()));
    }
  }
  absl::Duration heartbeat_timeout;
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_heartbeat_timeout), &heartbeat_timeout)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--heartbeat_timeout ", absl::GetFlag(FLAGS_heartbeat_timeout), " is not a duration"));
  }
  if (absl::Status s = ValidateHeartbeatTimeout(heartbeat_timeout, "--heartbeat_timeout");
      !s.ok()) {
    return s;
  }
  if (absl::GetFlag(FLAGS_max_restarts) > 0 && transport != "shm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_restarts is for --transport shm (train "
                     "restarts the processes it launches), not ",
                     transport));
  }
  const int world = JobWorldSize(o);
  // The ranks sharing this host's CPUs: all of them, except under an mpirun the
  // user started across hosts, which says how many it placed here.
  int ranks_on_host = world;
  if (transport == "mpi" && LaunchedByMpirun()) {
    if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); local != nullptr) {
      int parsed = 0;
      if (absl::SimpleAtoi(local, &parsed) && parsed >= 1) ranks_on_host = parsed;
    }
  }
  LOOM_ASSIGN_OR_RETURN(const int threads_per_rank,
                        ResolveThreadsPerRank(o.threads_per_rank, ranks_on_host, UsableCpus()));
  const bool launches = (transport == "shm" && std::getenv("LOOM_JOB_ID") == nullptr) ||
                        (transport == "mpi" && !LaunchedByMpirun());
  if (transport == "threads" || launches) LOOM_RETURN_IF_ERROR(CheckPaths(o));
  if (transport == "shm" && std::getenv("LOOM_JOB_ID") == nullptr) {
    *exit_code = LaunchRanks(o, argc, argv);
    return absl::OkStatus();
  }
  if (transport == "mpi" && !LaunchedByMpirun()) {
    *exit_code = RunUnderMpirun(world, argc, argv);  // the job's exit code
    return absl::OkStatus();
  }
  // Ranks that are processes: this one's world rank and size, and how it joins the
  // groups of each mesh dimension.
  int rank = 0, size = world;
  GroupConnector connect;
  if (transport == "shm") {
    absl::StatusOr<ShmOptions> process = ShmOptionsFromEnvironment();
    if (!process.ok()) return process.status();
    rank = process->rank;
    size = process->size;
    process->heartbeat_timeout = heartbeat_timeout;
    connect = [process = *process](absl::string_view dimension, int group, int group_rank,
                                   int group_size) -> absl::StatusOr<std::unique_ptr<Transport>> {
      ShmOptions shm = process;
      shm.job_id = ShmGroupId(process.job_id, dimension, group);
      shm.rank = group_rank;
      shm.size = group_size;
      return ConnectShmTransport(shm);
    };
  } else if (transport == "mpi") {
    absl::StatusOr<std::unique_ptr<MpiSession>> session = MpiSession::Start(&argc, &argv);
    if (!session.ok()) return session.status();
    *mpi = std::move(*session);
    rank = (*mpi)->world_rank();
    size = (*mpi)->world_size();
    // Each line of a dimension is an MPI_Comm_split of the world: the group number
    // is the color, the rank in the group the key.
    MpiTransportOptions mpi_options;
    mpi_options.heartbeat_timeout = heartbeat_timeout;
    connect = [mpi_options](absl::string_view, int group, int group_rank,
                            int) -> absl::StatusOr<std::unique_ptr<Transport>> {
      return ConnectMpiTransportSplit(MPI_COMM_WORLD, group, group_rank, mpi_options);
    };
  }
  const bool prints = rank == 0;
  LOOM_RETURN_IF_ERROR(SetGemmThreads(threads_per_rank));
  // The MFU's denominator, measured before the ranks start (on an idle CPU).
  std::optional<FmaPeak> fma_peak;
  if (prints) {
    absl::StatusOr<FmaPeak> measured = MeasureFmaPeak(absl::Milliseconds(50));
    if (!measured.ok()) return measured.status();
    fma_peak = *measured;
  }
  // Under an mpirun the user started, rank 0 is the first to see the flags.
  if (prints && connect) LOOM_RETURN_IF_ERROR(CheckPaths(o));
  if (prints) {
    std::cout << absl::StrFormat(
        "train: dp=%d tp=%d pp=%d%s (%d %s), schedule %s, %d microbatches x %d "
        "sequences, zero %d%s, offload %s, %s, recompute %s\nmodel: %s\n",
        o.dp, o.tp, o.pp,
        o.cp > 1 ? absl::StrCat(" cp=", o.cp, " (", CpLayoutName(o.cp_layout), ")") : "", world,
        transport == "threads" ? "thread ranks"
                               : (transport == "shm" ? "processes over shm" : "processes over mpi"),
        PipelineScheduleName(o.schedule), o.microbatches, o.micro_batch, o.zero,
        o.zero > 0 && o.zero < 3 && EffectiveReshard(o) == Reshard::kBlock
            ? absl::StrCat(" (weights borrowed from the engine",
                           o.defer_reduce_scatter ? ", deferred reduce-scatter" : "", ")")
        : o.zero == 3
            ? absl::StrCat(" (reshard ", ReshardName(EffectiveReshard(o)),
                           o.defer_reduce_scatter ? ", deferred reduce-scatter" : "",
                           o.offload_params == OffloadKind::kNvme ? ", parameters on nvme" : "",
                           o.offload_grads == OffloadKind::kNvme ? ", gradients on nvme" : "",
                           o.param_budget > 0 ? absl::StrCat(", parameter budget ",
                                                             o.param_budget, " bytes")
                                              : "",
                           ")")
            : std::string(),
        OffloadName(o.offload), DTypeName(o.dtype), absl::GetFlag(FLAGS_recompute),
        o.model.ToString());
    if (const std::string spec = absl::GetFlag(FLAGS_offload_config); !spec.empty()) {
      // What the job does, in the library's terms; the budgets are the user's
      // (checked against this machine; the job itself does not allocate by them).
      OffloadConfig done = JobOffloadConfig(o);
      if (absl::StatusOr<OffloadConfig> given = ParseOffloadConfig(spec); given.ok()) {
        done.host_budget_bytes = given->host_budget_bytes;
        done.nvme_budget_bytes = given->nvme_budget_bytes;
      }
      std::cout << "offload config: " << FormatOffloadConfig(done) << "\n";
    }
    if (o.cp > 1) {
      // The causal attention work of the cp ranks (ring_attention.h's visible pairs).
      LOOM_ASSIGN_OR_RETURN(const double imbalance,
                            CpWorkImbalance(o.model.seq_len, o.cp, o.cp_layout));
      const CpLayout other =
          o.cp_layout == CpLayout::kZigzag ? CpLayout::kContiguous : CpLayout::kZigzag;
      LOOM_ASSIGN_OR_RETURN(const double other_imbalance,
                            CpWorkImbalance(o.model.seq_len, o.cp, other));
      std::cout << absl::StrFormat(
          "cp: %s layout, attention work of the busiest cp rank over the mean %.3f (%s: "
          "%.3f); attention over cp: %s (%s)\n",
          CpLayoutName(o.cp_layout), imbalance, CpLayoutName(other), other_imbalance,
          CpCommName(o.cp_comm), cp_comm_why);
    }
    // The groups are topology's: //tools:mesh prints the same for these flags.
    std::cout << "mesh: tp fastest, then cp, then pp, then dp (//tools:mesh " << JobMeshCommand(o)
              << ")\n";
    if (absl::GetFlag(FLAGS_print_mesh)) {
      LOOM_ASSIGN_OR_RETURN(const Mesh mesh, JobMeshOf(o));
      LOOM_ASSIGN_OR_RETURN(const NodeLayout nodes,
                            NodeLayout::Create(mesh.world_size(), mesh.world_size()));
      LOOM_ASSIGN_OR_RETURN(const std::string table, MeshReportTable(mesh, nodes, std::nullopt));
      std::cout << table;
    }
  }
  // --metrics: rank 0's file, one line per step. A resumed run first drops the
  // lines of the steps it is about to train again.
  std::optional<MetricsLog> metrics;
  absl::Status metrics_status;
  std::vector<MetricsLine> lines;
  const absl::Time run_start = absl::Now();
  if (const std::string path = absl::GetFlag(FLAGS_metrics); prints && !path.empty()) {
    absl::StatusOr<int64_t> resumed_at = absl::NotFoundError("no resume");
    if (!o.resume_dir.empty()) resumed_at = LatestCheckpointStep(o.resume_dir);
    absl::StatusOr<MetricsLog> log =
        resumed_at.ok() ? MetricsLog::OpenForResume(path, *resumed_at + 1) : MetricsLog::Open(path);
    if (!log.ok()) return log.status();
    metrics.emplace(std::move(*log));
  }
  auto print_step = [&](const StepReport& r) {
    std::cout << r.ToString() << "\n" << std::flush;
    MetricsLine line;
    line.step = r.step;
    line.loss = r.loss;
    line.lr = r.lr;
    line.eval_loss = r.eval_loss;
    line.tokens_per_second = r.tokens_per_second;
    line.bytes_sent = r.comm_bytes;
    line.seconds = absl::ToDoubleSeconds(absl::Now() - run_start);
    lines.push_back(line);
    if (metrics.has_value() && metrics_status.ok()) metrics_status = metrics->Append(line);
  };
  absl::StatusOr<TrainSummary> summary;
  // Threads with --offload nvme: a job directory of this process's own, and a
  // janitor that removes it and the offload directories if this process is killed.
  std::optional<Janitor> janitor;
  if (!connect && UsesDisk(o)) {
    const std::string job_id = GenerateJobId();
    absl::StatusOr<std::string> job_dir = CreateJobDirectory(job_id);
    if (!job_dir.ok()) return job_dir.status();
    absl::StatusOr<Janitor> started = StartJanitor(*job_dir, "");
    if (!started.ok()) {
      RemoveJobFiles(job_id).IgnoreError();
      return started.status();
    }
    janitor.emplace(std::move(*started));
    setenv("LOOM_JOB_DIR", job_dir->c_str(), 1);
  }
  if (connect) {
    absl::StatusOr<std::optional<TrainSummary>> mine =
        RunTrainJobProcess(o, rank, size, transport, connect, print_step);
    if (!mine.ok()) return mine.status();
    if (!mine->has_value()) return absl::OkStatus();  // not rank 0: nothing to report
    summary = std::move(**mine);
  } else {
    summary = RunTrainJob(o, print_step);
    if (janitor.has_value()) {
      janitor->Finish();  // removes the job directory and what was registered in it
      unsetenv("LOOM_JOB_DIR");
    }
  }
  if (!summary.ok()) return summary.status();
  const std::string floor =
      o.data.empty() ? absl::StrFormat(", the chain's entropy rate %.4f", summary->entropy_rate)
                     : std::string();
  std::cout << absl::StrFormat(
      "final loss %.4f (uniform guess log V = %.4f%s)\n"
      "model state per rank: %d bytes in memory (%d in the ZeRO engine) and %d on disk, peak "
      "activations per rank: %d bytes, sent per rank per step: %d bytes, %.0f tokens/s (%s "
      "build)\n",
      summary->final_loss, summary->uniform_loss, floor, summary->peak_model_state_bytes_per_rank,
      summary->sharded_state_bytes_per_rank, summary->disk_state_bytes_per_rank,
      summary->peak_activation_bytes_per_rank, summary->comm_bytes_per_rank_per_step,
      summary->tokens_per_second, BuildMode());
  // The estimate beside the measurement: memory and disk against
  // topology/memory_estimate's model (which holds both).
  const int64_t measured_state =
      summary->peak_model_state_bytes_per_rank + summary->disk_state_bytes_per_rank;
  const int64_t estimated_state = summary->estimated_model_state_bytes_per_rank;
  std::cout << absl::StrFormat(
      "model state per rank, estimated (topology/memory_estimate, zero %d): %d bytes; measured "
      "(memory and disk) %d bytes, %.2f times the estimate\n",
      o.zero, estimated_state, measured_state,
      estimated_state > 0 ? static_cast<double>(measured_state) / estimated_state : 0.0);
  // Activations against topology/memory_estimate's fused-attention formula.
  const int64_t estimated_activations = summary->estimated_activation_bytes_per_rank;
  std::cout << absl::StrFormat(
      "activations per rank, estimated (topology/memory_estimate, fused attention, %d of %d "
      "positions per sequence): %d bytes; measured %d bytes, %.2f times the estimate%s\n",
      (o.model.seq_len + o.cp - 1) / o.cp, o.model.seq_len, estimated_activations,
      summary->peak_activation_bytes_per_rank,
      estimated_activations > 0
          ? static_cast<double>(summary->peak_activation_bytes_per_rank) / estimated_activations
          : 0.0,
      o.schedule == PipelineScheduleKind::kZeroBubbleH1 ||
              o.schedule == PipelineScheduleKind::kZeroBubbleV
          ? " (the formula leaves out the weight-gradient work a zero-bubble schedule defers)"
          : "");
  if (o.device == ComputeDevice::kCuda) {
    std::cout << absl::StrFormat(
        "device: cuda (cuBLAS f32 on device 0), %d matrix products on the GPU for rank 0\n",
        summary->device_gemm_products);
  }
  const StepBreakdown& b = summary->step_breakdown_s;
  std::cout << absl::StrFormat(
      "time per step (mean over ranks): compute %.2f ms, parameter wait %.2f ms, dp comm %.2f ms, "
      "pp comm %.2f ms, optimizer %.2f ms, other %.2f ms\n",
      b.compute * 1e3, b.param_wait * 1e3, b.dp_comm * 1e3, b.pp_comm * 1e3, b.optimizer * 1e3,
      b.other * 1e3);
  // The rest of compute: element-wise passes and, with tp > 1, the layers' collectives.
  std::cout << absl::StrFormat(
      "compute per step: GEMM %.2f ms, attention %.2f ms, element-wise and tp collectives "
      "%.2f ms\n",
      b.gemm * 1e3, b.attention * 1e3, std::max(0.0, b.compute - b.gemm - b.attention) * 1e3);
  if (o.cp > 1 && o.cp_comm == CpComm::kRing) {
    // The ring's hops run beside the attention compute; what they did not cover.
    std::cout << absl::StrFormat(
        "cp ring per step: hops %.2f ms on the communication threads, %.2f ms of them "
        "exposed (%.0f%% hidden behind attention)\n",
        b.cp_hops * 1e3, b.cp_exposed * 1e3,
        b.cp_hops > 0 ? 100.0 * std::max(0.0, 1.0 - b.cp_exposed / b.cp_hops) : 0.0);
  }
  if (summary->host_cpu_busy >= 0) {
    // Waits cost time only where CPUs sit idle: with more busy threads than CPUs,
    // a rank's wait is the other ranks' compute.
    std::cout << absl::StrFormat(
        "host CPUs busy %.1f%% of the step (rank 0's host, %d CPUs, all processes)\n",
        summary->host_cpu_busy * 100, std::thread::hardware_concurrency());
  }
  const MfuReport mfu =
      ComputeMfu(o.model, summary->tokens_per_second, fma_peak.value_or(FmaPeak{}),
                 CoresUsed(ranks_on_host, threads_per_rank, UsableCpus(),
                           std::max(1, size / ranks_on_host)),
                 threads_per_rank, /*bf16_products=*/o.dtype == DType::kBF16);
  // On a GPU the products run there, so the CPU's peak is not the denominator.
  const bool on_cpu = o.device == ComputeDevice::kCpu;
  if (on_cpu) {
    std::cout << MfuLine(mfu) << "\n";
    // Where the blocks' and the head's products ran (the attention scores stay f32).
    const GemmPrecision precision =
        o.dtype == DType::kBF16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
    std::cout << "GEMM: " << GemmPrecisionName(precision) << " products on "
              << GemmBackendName(precision) << "\n";
  }
  if (summary->final_eval_loss.has_value()) {
    std::cout << absl::StrFormat("eval loss %.4f (held out, after step %d)\n",
                                 *summary->final_eval_loss, o.steps);
  }
  if (summary->resumed_from_step > 0) {
    std::cout << absl::StrFormat("resumed from the checkpoint of step %d in %s\n",
                                 summary->resumed_from_step, o.resume_dir);
  }
  if (!o.checkpoint_dir.empty()) {
    std::cout << absl::StrFormat("checkpoint: step %d in %s\n", o.steps, o.checkpoint_dir);
  }
  (void)exit_code;
  ReferenceComparison reference;
  double relative = 0;
  if (absl::GetFlag(FLAGS_compare_reference)) {
    absl::StatusOr<ReferenceComparison> compared = CompareWithReference(o, *summary);
    if (!compared.ok()) return compared.status();
    reference = *compared;
    relative = reference.max_abs_param > 0 ? reference.max_abs_param_diff / reference.max_abs_param
                                           : reference.max_abs_param_diff;
    std::cout << absl::StrFormat(
        "reference (1 rank, same seed and batch): final loss %.4f, largest parameter "
        "difference %.3g (%.3g of the largest parameter)\n",
        reference.reference_final_loss, reference.max_abs_param_diff, relative);
  }
  if (!metrics_status.ok()) return metrics_status;
  if (const std::string path = absl::GetFlag(FLAGS_metrics); !path.empty()) {
    std::cout << "metrics: " << path << "\n";
  }
  if (const std::string path = absl::GetFlag(FLAGS_plot); !path.empty()) {
    // The whole run, earlier runs of it included, when the metrics file has it.
    if (metrics.has_value()) {
      absl::StatusOr<std::vector<MetricsLine>> all = ReadMetricsFile(absl::GetFlag(FLAGS_metrics));
      if (!all.ok()) return all.status();
      lines = std::move(*all);
    }
    LossPlotOptions plot;
    plot.title =
        absl::StrFormat("train %s  dp=%d tp=%d pp=%d cp=%d", o.model.ToString(), o.dp, o.tp, o.pp,
                        o.cp);
    plot.reference_lines.push_back({"uniform guess log V", summary->uniform_loss});
    if (summary->entropy_rate > 0) {
      plot.reference_lines.push_back({"the chain's entropy rate", summary->entropy_rate});
    }
    absl::StatusOr<std::string> svg = LossPlotSvg(lines, plot);
    if (!svg.ok()) return svg.status();
    if (absl::Status s = WriteFileAtomically(path, *svg); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--plot: ", s.message()));
    }
    std::cout << "plot: " << path << "\n";
  }
  if (const std::string path = absl::GetFlag(FLAGS_trace); !path.empty()) {
    if (absl::Status s = WriteFile("--trace", path, summary->trace_json); !s.ok()) return s;
    std::cout << "trace: " << path << "\n";
  }
  if (const std::string path = absl::GetFlag(FLAGS_summary_json); !path.empty()) {
    const std::string json = absl::StrFormat(
        "{\"final_loss\": %.9g, \"final_eval_loss\": %s, \"reference_final_loss\": %s, "
        "\"max_abs_param_diff\": %s, "
        "\"peak_model_state_bytes_per_rank\": %d, \"model_state_disk_bytes_per_rank\": %d, "
        "\"estimated_model_state_bytes_per_rank\": %d, \"comm_bytes_per_rank_per_step\": %d, "
        "\"peak_activation_bytes_per_rank\": %d, \"estimated_activation_bytes_per_rank\": %d, "
        "\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"cp_comm\": \"%s\", "
        "\"zero\": %d, \"schedule\": \"%s\", \"microbatches\": %d, \"micro_batch\": %d, "
        "\"global_batch\": %d, \"recompute\": \"%s\", \"dtype\": \"%s\", "
        "\"layers\": %d, \"hidden\": %d, \"heads\": %d, \"seq_len\": %d, \"vocab\": %d, "
        "\"ffn\": %d, "
        "\"steps\": %d, \"tokens_per_second\": %.6g, \"build\": \"%s\", \"device\": \"%s\", "
        "\"device_gemm_products\": %d, \"host_cpu_busy\": %s, "
        "\"model_flops_per_token\": %.9g, \"achieved_gflops\": %.6g, \"peak_gflops\": %.6g, "
        "\"peak_gflops_per_core\": %.6g, \"cores_used\": %d, \"mfu\": %s, "
        "\"peak_kind\": \"%s\", \"mfu_f32_peak\": %s, "
        "\"threads_per_rank\": %d, \"cpu_model\": \"%s\", \"vector_target\": \"%s\", "
        "\"step_breakdown_s\": {\"compute\": %.6g, \"dp_comm\": %.6g, \"pp_comm\": %.6g, "
        "\"optimizer\": %.6g, \"other\": %.6g, \"param_wait\": %.6g, \"gemm\": %.6g, "
        "\"attention\": %.6g, \"cp_hops\": %.6g, \"cp_exposed\": %.6g}}\n",
        summary->final_loss,
        summary->final_eval_loss.has_value() ? absl::StrFormat("%.9g", *summary->final_eval_loss)
                                             : std::string("null"),
        absl::GetFlag(FLAGS_compare_reference)
            ? absl::StrFormat("%.9g", reference.reference_final_loss)
            : "null",
        absl::GetFlag(FLAGS_compare_reference)
            ? absl::StrFormat("%.9g", reference.max_abs_param_diff)
            : "null",
        summary->peak_model_state_bytes_per_rank, summary->disk_state_bytes_per_rank,
        summary->estimated_model_state_bytes_per_rank, summary->comm_bytes_per_rank_per_step,
        summary->peak_activation_bytes_per_rank, summary->estimated_activation_bytes_per_rank,
        o.dp, o.tp, o.pp, o.cp, CpCommName(o.cp_comm), o.zero, PipelineScheduleName(o.schedule),
        o.microbatches, o.micro_batch, int64_t{o.dp} * o.microbatches * o.micro_batch,
        o.recompute == Recompute::kFull ? "full" : "none", DTypeName(o.dtype), o.model.layers,
        o.model.hidden, o.model.heads, o.model.seq_len, o.model.vocab, o.model.ffn_size(),
        o.steps,
        summary->tokens_per_second, BuildMode(), absl::GetFlag(FLAGS_device),
        summary->device_gemm_products,
        summary->host_cpu_busy >= 0 ? absl::StrFormat("%.4g", summary->host_cpu_busy)
                                    : std::string("null"),
        mfu.flops_per_token, mfu.achieved_flops / 1e9, mfu.peak_flops / 1e9,
        mfu.peak_flops_per_core / 1e9, mfu.cores,
        on_cpu ? absl::StrFormat("%.4g", mfu.mfu) : std::string("null"), mfu.peak_kind,
        on_cpu ? absl::StrFormat("%.4g", mfu.mfu_f32_peak) : std::string("null"),
        mfu.threads_per_rank,
        JsonSafe(mfu.cpu_model), JsonSafe(mfu.vector_target), b.compute, b.dp_comm, b.pp_comm,
        b.optimizer, b.other, b.param_wait, b.gemm, b.attention, b.cp_hops, b.cp_exposed);
    if (absl::Status s = WriteFile("--summary_json", path, json); !s.ok()) return s;
    std::cout << "summary: " << path << "\n";
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a small GPT decoder over dp x tp x pp x cp ranks with ZeRO.\n"
      "  train [--dp=2 --tp=2 --pp=2 --cp=1 [--cp_layout=zigzag|contiguous] [--cp_comm=auto|ring|a2a]] [--zero=0|1|2|3] [--offload=none|cpu|nvme|gpu [--nvme_dir=D]] [--device=cpu|cuda]\n"
      "        [--dtype=f32|bf16] [--data=FILE[,FILE...] [--eval_fraction=0.05]]\n"
      "        [--schedule=1f1b] [--microbatches=4] [--recompute=none|full] [--steps=60]\n"
      "        [--trace=FILE] [--summary_json=FILE] [--nocompare_reference]\n"
      "        [--transport=threads|shm|mpi] [--job_id=ID]");
  const absl::StatusOr<std::vector<char*>> args = loom::cli::ParseFlags(argc, argv);
  if (!args.ok()) return loom::cli::Fail("train", args.status());
  if (absl::Status s = loom::cli::CheckNoArguments(*args); !s.ok()) {
    return loom::cli::Fail("train", s);
  }
  loom::ReportPeerFailuresAsTheyHappen();
  int exit_code = 0;
  std::unique_ptr<loom::MpiSession> mpi;
  const absl::Status status = loom::Run(argc, argv, &exit_code, &mpi);
  if (!status.ok()) {
    // A rank of a launched job tells the launcher why, and whether a peer caused it.
    loom::ReportRankFailure(status).IgnoreError();
    // An MPI rank names itself and its cause, then aborts the whole job.
    if (mpi != nullptr) mpi->AbortJob("train", status, loom::cli::ExitCode(status));
    exit_code = loom::cli::Fail("train", status);
  }
  mpi.reset();  // MPI_Finalize: a clean run only
  return exit_code;
}
