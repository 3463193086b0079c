#include "tools/train_job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/checked_size.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "pipeline/executor/executor.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "tools/gpt/byte_corpus.h"
#include "tools/gpt/gpt_parameter.h"
#include "tools/gpt/gpt_stage_module.h"
#include "tools/gpt/markov_data.h"
#include "tools/job_files.h"
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

// Figures one rank reports for a step, gathered at world rank 0.
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
// averaged by one all-reduce of the flattened gradients (a bucket, as DDP's), and
// AdamW updates each parameter where it lives. In f32 the layers' weights are the
// master; in bf16 the weights hold the bf16 compute copy (widened) and an f32
// master is kept beside them, and the averaged f32 gradient is rounded once to
// bf16, as the ZeRO engine does, so that zero 0 and zero 1-3 agree.
class DataParallelOptimizer : public RankOptimizer {
 public:
  static absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> Create(
      const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp) {
    auto optimizer = std::unique_ptr<DataParallelOptimizer>(
        new DataParallelOptimizer(options, std::move(params), dp));
    const bool bf16 = options.dtype == DType::kBF16;
    int64_t total = 0;
    for (GptParameter& p : optimizer->params_) {
      const int64_t n = static_cast<int64_t>(p.values.size());
      total += n;
      LOOM_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(n));
      optimizer->states_.push_back(std::move(state));
      if (bf16) {
        optimizer->masters_.emplace_back(p.values.begin(), p.values.end());
        for (float& v : p.values) v = ToFloat(ToBFloat16(v));
      }
    }
    optimizer->flat_grad_.resize(static_cast<size_t>(total));
    return optimizer;
  }

  absl::Status BeforeStep() override { return absl::OkStatus(); }

  absl::Status AfterBackward(int64_t step) override {
    const bool bf16 = options_.dtype == DType::kBF16;
    size_t at = 0;
    for (const GptParameter& p : params_) {
      std::copy(p.grad.begin(), p.grad.end(), flat_grad_.begin() + at);
      at += p.grad.size();
    }
    if (dp_->size() > 1) {
      LOOM_RETURN_IF_ERROR(dp_->AllReduce(absl::MakeSpan(flat_grad_), ReduceOp::kAvg));
    }
    // bf16: the average of the f32 sums is rounded once into the bf16 gradient.
    if (bf16) {
      for (float& g : flat_grad_) g = ToFloat(ToBFloat16(g));
    }
    AdamWOptions adam;
    adam.threads = options_.offload == OffloadKind::kCpu ? options_.adamw_threads : 1;
    const AdamWHyper hyper = Hyper(options_, step);
    at = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      GptParameter& p = params_[k];
      const absl::Span<const float> grad =
          absl::MakeConstSpan(flat_grad_).subspan(at, p.grad.size());
      at += p.grad.size();
      if (!bf16) {
        LOOM_RETURN_IF_ERROR(AdamWStep(hyper, p.values, grad, states_[k], adam));
        continue;
      }
      half_values_.resize(p.values.size());
      LOOM_RETURN_IF_ERROR(AdamWStep(hyper, absl::MakeSpan(masters_[k]), grad, states_[k], adam,
                                     absl::MakeSpan(half_values_)));
      for (size_t i = 0; i < p.values.size(); ++i) p.values[i] = ToFloat(half_values_[i]);
    }
    return absl::OkStatus();
  }

  int64_t ShardedBytes() const override { return 0; }
  int64_t StateBytes() const override {
    // The layers' weights and gradients (f32 storage, 8 bytes per element), the
    // moments (8) and, in bf16, the f32 master (4). The gradient bucket is a
    // communication buffer, as the engine's are, and is not counted.
    int64_t bytes = 0;
    for (size_t k = 0; k < params_.size(); ++k) {
      const int64_t n = static_cast<int64_t>(params_[k].values.size());
      bytes += 8 * n + static_cast<int64_t>(states_[k].size_bytes());
      if (!masters_.empty()) bytes += static_cast<int64_t>(masters_[k].size() * sizeof(float));
    }
    return bytes;
  }

 private:
  DataParallelOptimizer(const TrainJobOptions& options, std::vector<GptParameter> params,
                        Communicator* dp)
      : options_(options), params_(std::move(params)), dp_(dp) {}

  TrainJobOptions options_;
  std::vector<GptParameter> params_;
  Communicator* dp_;
  std::vector<AdamWState> states_;          // per parameter
  std::vector<std::vector<float>> masters_;  // bf16: the f32 master per parameter
  std::vector<float> flat_grad_;            // the all-reduced bucket
  std::vector<BFloat16> half_values_;       // bf16: AdamW's compute-copy output
};

// Results travel from every rank to world rank 0 as bytes, so that ranks in other
// processes report the same way as threads. ByteWriter / ByteReader: host-order
// integers and floats (every rank is on this host).
class ByteWriter {
 public:
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void Str(absl::string_view s) {
    I64(static_cast<int64_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void I64s(absl::Span<const int64_t> v) {
    I64(static_cast<int64_t>(v.size()));
    Raw(v.data(), v.size() * sizeof(int64_t));
  }
  void F32s(absl::Span<const float> v) {
    I64(static_cast<int64_t>(v.size()));
    Raw(v.data(), v.size() * sizeof(float));
  }
  std::string Take() { return std::move(out_); }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}
  absl::StatusOr<int64_t> I64() {
    int64_t v = 0;
    LOOM_RETURN_IF_ERROR(Raw(&v, sizeof(v)));
    return v;
  }
  absl::StatusOr<std::string> Str() {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(1));
    std::string s(in_.substr(0, static_cast<size_t>(n)));
    in_.remove_prefix(static_cast<size_t>(n));
    return s;
  }
  absl::StatusOr<std::vector<int64_t>> I64s() {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(sizeof(int64_t)));
    std::vector<int64_t> v(static_cast<size_t>(n));
    LOOM_RETURN_IF_ERROR(Raw(v.data(), v.size() * sizeof(int64_t)));
    return v;
  }
  absl::StatusOr<std::vector<float>> F32s() {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(sizeof(float)));
    std::vector<float> v(static_cast<size_t>(n));
    LOOM_RETURN_IF_ERROR(Raw(v.data(), v.size() * sizeof(float)));
    return v;
  }

 private:
  absl::StatusOr<int64_t> Count(size_t element_bytes) {
    LOOM_ASSIGN_OR_RETURN(const int64_t n, I64());
    if (n < 0 || static_cast<uint64_t>(n) > in_.size() / element_bytes) {
      return absl::DataLossError(absl::StrCat("rank report: a count of ", n, " with ",
                                              in_.size(), " bytes left"));
    }
    return n;
  }
  absl::Status Raw(void* p, size_t n) {
    if (in_.size() < n) {
      return absl::DataLossError(
          absl::StrCat("rank report: ", n, " bytes wanted, ", in_.size(), " left"));
    }
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return absl::OkStatus();
  }
  absl::string_view in_;
};

// GatherBytes returns every rank's `mine`, in rank order, at rank 0 (empty elsewhere).
absl::StatusOr<std::vector<std::string>> GatherBytes(Communicator& world, const std::string& mine) {
  const int n = world.size();
  const int64_t my_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(world.Gather(ConstBufferView::Of(absl::MakeConstSpan(&my_size, 1)),
                                    BufferView::Of(absl::MakeSpan(sizes)), 0));
  auto bytes = [](std::string& s) {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(s.data()), s.size());
  };
  std::vector<std::string> out;
  if (world.rank() != 0) {
    std::string copy = mine;
    LOOM_RETURN_IF_ERROR(world.Send(ConstBufferView::Of(absl::MakeConstSpan(bytes(copy))), 0));
    return out;
  }
  out.resize(static_cast<size_t>(n));
  out[0] = mine;
  for (int r = 1; r < n; ++r) {
    out[r].resize(static_cast<size_t>(sizes[r]));
    LOOM_RETURN_IF_ERROR(world.Recv(BufferView::Of(bytes(out[r])), r));
  }
  return out;
}

std::string EncodeParameters(int tp_rank, const std::vector<GptParameter>& params) {
  ByteWriter w;
  w.I64(tp_rank);
  w.I64(static_cast<int64_t>(params.size()));
  for (const GptParameter& p : params) {
    w.Str(p.name);
    w.I64s(p.shape);
    w.I64s(p.full_shape);
    w.I64(static_cast<int64_t>(p.split));
    w.I64(p.parts);
    w.F32s(p.values);
  }
  return w.Take();
}

absl::StatusOr<RankParameters> DecodeParameters(absl::string_view bytes) {
  ByteReader r(bytes);
  RankParameters out;
  LOOM_ASSIGN_OR_RETURN(const int64_t tp_rank, r.I64());
  LOOM_ASSIGN_OR_RETURN(const int64_t count, r.I64());
  out.tp_rank = static_cast<int>(tp_rank);
  for (int64_t i = 0; i < count; ++i) {
    GptParameter p;
    LOOM_ASSIGN_OR_RETURN(p.name, r.Str());
    LOOM_ASSIGN_OR_RETURN(p.shape, r.I64s());
    LOOM_ASSIGN_OR_RETURN(p.full_shape, r.I64s());
    LOOM_ASSIGN_OR_RETURN(const int64_t split, r.I64());
    p.split = static_cast<TpSplit>(split);
    LOOM_ASSIGN_OR_RETURN(p.parts, r.I64());
    LOOM_ASSIGN_OR_RETURN(std::vector<float> values, r.F32s());
    out.params.push_back(std::move(p));
    out.values.push_back(std::move(values));
  }
  return out;
}

// A rank's last pipeline execution, for the trace: each action's name and its
// start and end in nanoseconds since the Unix epoch (one clock for every process).
std::string EncodeExecution(const RankExecution& execution) {
  ByteWriter w;
  w.I64(static_cast<int64_t>(execution.actions.size()));
  for (const ExecutedAction& a : execution.actions) {
    w.Str(a.action.ToString());
    w.I64(absl::ToUnixNanos(a.start));
    w.I64(absl::ToUnixNanos(a.end));
  }
  return w.Take();
}

struct TraceEvent {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
};

absl::StatusOr<std::vector<TraceEvent>> DecodeExecution(absl::string_view bytes) {
  ByteReader r(bytes);
  LOOM_ASSIGN_OR_RETURN(const int64_t count, r.I64());
  std::vector<TraceEvent> events;
  for (int64_t i = 0; i < count; ++i) {
    TraceEvent e;
    LOOM_ASSIGN_OR_RETURN(e.name, r.Str());
    LOOM_ASSIGN_OR_RETURN(e.start_ns, r.I64());
    LOOM_ASSIGN_OR_RETURN(e.end_ns, r.I64());
    events.push_back(std::move(e));
  }
  return events;
}

std::string TraceEvents(const std::vector<std::vector<TraceEvent>>& ranks) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& events : ranks) {
    for (const TraceEvent& e : events) origin = std::min(origin, e.start_ns);
  }
  std::string out = "{\"traceEvents\":[";
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StrAppend(&out, r == 0 ? "" : ",",
                    absl::StrFormat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                                    "\"args\":{\"name\":\"rank %d\"}}",
                                    r, r));
    for (const TraceEvent& e : ranks[r]) {
      absl::StrAppend(
          &out, ",",
          absl::StrFormat("{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                          "\"dur\":%.3f}",
                          e.name, r, static_cast<double>(e.start_ns - origin) / 1e3,
                          static_cast<double>(e.end_ns - e.start_ns) / 1e3));
    }
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

// One rank's figures for a step, gathered at world rank 0 as doubles (exact for
// the byte counts involved, below 2^53).
constexpr int kStepFigures = 7;
std::array<double, kStepFigures> Pack(const RankStep& s) {
  return {s.holds_loss ? 1.0 : 0.0,
          s.loss,
          static_cast<double>(s.state_bytes),
          static_cast<double>(s.sharded_bytes),
          static_cast<double>(s.disk_bytes),
          static_cast<double>(s.comm_bytes),
          static_cast<double>(s.peak_activation_bytes)};
}
RankStep Unpack(const double* f) {
  RankStep s;
  s.holds_loss = f[0] != 0.0;
  s.loss = f[1];
  s.state_bytes = static_cast<int64_t>(f[2]);
  s.sharded_bytes = static_cast<int64_t>(f[3]);
  s.disk_bytes = static_cast<int64_t>(f[4]);
  s.comm_bytes = static_cast<int64_t>(f[5]);
  s.peak_activation_bytes = static_cast<int64_t>(f[6]);
  return s;
}
}  // namespace

std::string StepReport::ToString() const {
  return absl::StrFormat(
      "step %4d  loss %.4f  %7.1f ms  %9.0f tokens/s  model state %s/rank  sent %s/rank",
      step, loss, seconds * 1e3, tokens_per_second,
      absl::StrFormat("%.2f MiB", static_cast<double>(model_state_bytes) / (1 << 20)),
      absl::StrFormat("%.2f MiB", static_cast<double>(comm_bytes) / (1 << 20)));
}

namespace {

// StagesPerRank: interleaved 1F1B runs two model chunks per rank here, and ZB-V
// always places two stages per rank (its V); the others one.
int64_t StagesPerRank(PipelineScheduleKind schedule) {
  return schedule == PipelineScheduleKind::kInterleaved1F1B ||
                 schedule == PipelineScheduleKind::kZeroBubbleV
             ? 2
             : 1;
}

}  // namespace

namespace {

// RanksWord says what the job's ranks are, as the header line does.
std::string RanksWord(absl::string_view transport) {
  if (transport == "threads") return "thread ranks";
  return absl::StrCat("processes over ", transport);
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

namespace {

absl::StatusOr<ByteCorpus> OpenCorpus(const TrainJobOptions& o) {
  ByteCorpusOptions corpus;
  corpus.paths = o.data;
  corpus.seq_len = o.model.seq_len;
  corpus.eval_fraction = o.eval_fraction;
  corpus.seed = o.data_seed;
  return ByteCorpus::Open(corpus);
}

}  // namespace

absl::Status ValidateTrainJob(const TrainJobOptions& o) { return ValidateTrainJob(o, "threads"); }

absl::Status ValidateTrainJob(const TrainJobOptions& o, absl::string_view transport) {
  if (o.dp < 1 || o.pp < 1 || o.tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp ", o.dp, " --pp ", o.pp, " --tp ", o.tp, ": each must be >= 1"));
  }
  const absl::StatusOr<int64_t> world =
      CheckedMul({{"--dp", o.dp}, {"--pp", o.pp}, {"--tp", o.tp}});
  if (!world.ok() || *world > kMaxTrainRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dp ", o.dp, " x --pp ", o.pp, " x --tp ", o.tp, " = ",
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
  const int64_t stages_per_rank = StagesPerRank(o.schedule);
  const int64_t stages = o.pp * stages_per_rank;
  if (o.model.layers % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layers ", o.model.layers, " is not divisible by the ", stages,
        " pipeline stages (--pp ", o.pp,
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
  if (o.adamw_threads < 1 || o.adamw_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("--adamw_threads ", o.adamw_threads, " is not in [1, 256]"));
  }
  if (!o.data.empty()) {
    if (o.model.vocab != 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data is byte-level text, which needs --vocab 256, not ", o.model.vocab));
    }
    // Opened here, before any rank starts, so that a bad file is one line at once.
    absl::StatusOr<ByteCorpus> corpus = OpenCorpus(o);
    if (!corpus.ok()) {
      return absl::Status(corpus.status().code(),
                          absl::StrCat("--data: ", corpus.status().message()));
    }
  }
  return CheckJobSizes(o);
}

namespace {

// What every rank of a job builds the same way: the schedule, its executor and
// the data.
struct JobSetup {
  Schedule schedule;
  std::optional<PipelineExecutor> executor;
  // The training data: the Markov chain, or text (with TrainJobOptions::data).
  std::optional<MarkovData> markov;
  std::optional<ByteCorpus> text;
  BatchLayout batch;
  int64_t tokens_per_step = 0;
};

absl::StatusOr<std::unique_ptr<JobSetup>> Setup(const TrainJobOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateTrainJob(options));
  auto setup = std::make_unique<JobSetup>();
  absl::StatusOr<Schedule> schedule = MakeSchedule(
      options.schedule, options.pp, options.microbatches, StagesPerRank(options.schedule));
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", schedule.status().message()));
  }
  setup->schedule = std::move(*schedule);
  ExecutorOptions executor_options;
  executor_options.timeout = kTimeout;
  LOOM_ASSIGN_OR_RETURN(PipelineExecutor executor,
                        PipelineExecutor::Create(setup->schedule, executor_options));
  setup->executor.emplace(std::move(executor));
  if (options.data.empty()) {
    MarkovOptions markov;
    markov.vocab = options.model.vocab;
    markov.seq_len = options.model.seq_len;
    markov.branching = options.markov_branching;
    markov.seed = options.data_seed;
    LOOM_ASSIGN_OR_RETURN(MarkovData data, MarkovData::Create(markov));
    setup->markov.emplace(std::move(data));
  } else {
    LOOM_ASSIGN_OR_RETURN(ByteCorpus text, OpenCorpus(options));
    setup->text.emplace(std::move(text));
  }
  setup->batch.micro_batch = options.micro_batch;
  setup->batch.num_microbatches = options.microbatches;
  setup->batch.dp_size = options.dp;
  setup->tokens_per_step =
      options.dp * options.microbatches * options.micro_batch * options.model.seq_len;
  return setup;
}

// A DiskTier for --offload nvme. With no --nvme_dir, a fresh directory under
// $TMPDIR that `made` names (for the caller to remove once the tier is gone); with
// one, `subdirectory` (if any) is made inside each named directory, for processes
// that must not share one.
absl::StatusOr<std::unique_ptr<DiskTier>> OpenDisk(const TrainJobOptions& options,
                                                   const std::string& subdirectory,
                                                   std::vector<std::string>* made) {
  DiskTierOptions disk_options;
  // Inside a launched job (LOOM_JOB_DIR), the default directory lives in the job's
  // directory and whatever is made elsewhere is registered with it, so that the
  // launcher, or its janitor if the launcher is killed, removes it after any end.
  const char* job_dir = std::getenv("LOOM_JOB_DIR");
  const bool in_job = job_dir != nullptr && *job_dir == '/';
  if (options.nvme_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = in_job
                              ? absl::StrCat(job_dir, "/nvme.",
                                             subdirectory.empty() ? "all" : subdirectory, ".XXXXXX")
                              : absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                             "/loom_train_nvme.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("--offload nvme: mkdtemp ", pattern, ": ", std::strerror(errno)));
    }
    made->push_back(pattern);
    disk_options.directories = {pattern};
  } else {
    for (absl::string_view dir : absl::StrSplit(options.nvme_dir, ':', absl::SkipEmpty())) {
      std::string path(dir);
      if (!subdirectory.empty()) {
        path = absl::StrCat(dir, "/", subdirectory);
        if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
          return absl::NotFoundError(
              absl::StrCat("--nvme_dir: mkdir ", path, ": ", std::strerror(errno)));
        }
        made->push_back(path);
        if (in_job && path[0] == '/') {
          if (absl::Status s = RegisterOwnedPath(path); !s.ok()) return s;
        }
      }
      disk_options.directories.push_back(path);
    }
  }
  absl::StatusOr<std::unique_ptr<DiskTier>> disk = DiskTier::Create(disk_options);
  if (!disk.ok()) {
    return absl::Status(disk.status().code(),
                        absl::StrCat("--nvme_dir: ", disk.status().message()));
  }
  return std::move(*disk);
}

void RemoveDirectories(const std::vector<std::string>& dirs) {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) rmdir(it->c_str());
}

// RunRank trains one rank. World rank 0 collects every rank's figures each step
// (through the world communicator, so ranks may be threads or processes), calls
// `on_step` and fills `*summary` (null on the other ranks).
absl::Status RunRank(const TrainJobOptions& options, const JobSetup& setup, RankWiring& w,
                     DiskTier* disk, const std::function<void(const StepReport&)>& on_step,
                     TrainSummary* summary) {
  const absl::Time job_start = absl::Now();
  GptStageModuleOptions module_options;
  module_options.micro_batch = options.micro_batch;
  module_options.num_microbatches = options.microbatches;
  module_options.recompute = options.recompute;
  const BatchLayout batch = setup.batch;
  const int d = w.d;
  GptMicrobatchFn data_fn = [&setup, batch, d](int64_t step, int64_t mb) {
    return setup.text.has_value() ? setup.text->Microbatch(batch, step, mb, d)
                                  : setup.markov->Microbatch(batch, step, mb, d);
  };
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> module,
                        GptStageModule::Create(options.model, setup.schedule.layout, w.s, *w.tp,
                                               data_fn, module_options));
  std::unique_ptr<RankOptimizer> optimizer;
  if (options.zero > 0) {
    LOOM_ASSIGN_OR_RETURN(
        optimizer, ShardedOptimizer::Create(options, module->Parameters(), w.dp.get(), disk,
                                            absl::StrCat("train.s", w.s, ".t", w.t)));
  } else {
    LOOM_ASSIGN_OR_RETURN(optimizer,
                          DataParallelOptimizer::Create(options, module->Parameters(), w.dp.get()));
  }
  const int world = w.world->size();
  std::vector<double> gathered(static_cast<size_t>(world * kStepFigures));
  RankExecution last_execution;
  uint64_t sent_before = 0;
  for (int64_t step = 0; step < options.steps; ++step) {
    const absl::Time start = absl::Now();
    module->BeginStep(step);
    LOOM_RETURN_IF_ERROR(optimizer->BeforeStep());
    LOOM_ASSIGN_OR_RETURN(last_execution, setup.executor->Run(*w.pp, *module));
    LOOM_RETURN_IF_ERROR(optimizer->AfterBackward(step + 1));
    const uint64_t sent = SentBytes(*w.tp) + SentBytes(*w.dp);
    RankStep report;
    report.holds_loss = module->holds_loss();
    report.loss = report.holds_loss ? static_cast<double>(module->loss()) : 0.0;
    report.state_bytes = optimizer->StateBytes();
    report.sharded_bytes = optimizer->ShardedBytes();
    report.disk_bytes = optimizer->DiskBytes();
    report.comm_bytes = static_cast<int64_t>(sent - sent_before);
    report.peak_activation_bytes = static_cast<int64_t>(module->peak_activation_bytes());
    sent_before = sent;
    const std::array<double, kStepFigures> mine = Pack(report);
    LOOM_RETURN_IF_ERROR(w.world->Gather(ConstBufferView::Of(absl::MakeConstSpan(mine)),
                                         BufferView::Of(absl::MakeSpan(gathered)), 0));
    if (summary == nullptr) continue;
    StepReport line;
    line.step = step + 1;
    int losses = 0;
    for (int r = 0; r < world; ++r) {
      const RankStep s = Unpack(gathered.data() + r * kStepFigures);
      if (s.holds_loss && s.loss == s.loss) {
        line.loss += s.loss;
        ++losses;
      }
      line.model_state_bytes = std::max(line.model_state_bytes, s.state_bytes);
      line.comm_bytes = std::max(line.comm_bytes, s.comm_bytes);
      summary->sharded_state_bytes_per_rank =
          std::max(summary->sharded_state_bytes_per_rank, s.sharded_bytes);
      summary->disk_state_bytes_per_rank =
          std::max(summary->disk_state_bytes_per_rank, s.disk_bytes);
      summary->peak_activation_bytes_per_rank =
          std::max(summary->peak_activation_bytes_per_rank, s.peak_activation_bytes);
    }
    // The last stage's tp ranks all hold the same loss: average over them and dp.
    line.loss /= std::max(losses, 1);
    line.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    line.tokens_per_second = static_cast<double>(setup.tokens_per_step) / line.seconds;
    summary->steps.push_back(line);
    if (on_step) on_step(line);
  }
  LOOM_RETURN_IF_ERROR(optimizer->BeforeStep());  // zero 3: the final weights
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> params,
                        GatherBytes(*w.world, EncodeParameters(w.t, module->Parameters())));
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> executions,
                        GatherBytes(*w.world, EncodeExecution(last_execution)));
  if (summary == nullptr) return absl::OkStatus();
  std::vector<std::vector<TraceEvent>> trace;
  for (int r = 0; r < world; ++r) {
    LOOM_ASSIGN_OR_RETURN(RankParameters rank, DecodeParameters(params[r]));
    summary->final_params.push_back(std::move(rank));
    LOOM_ASSIGN_OR_RETURN(std::vector<TraceEvent> events, DecodeExecution(executions[r]));
    trace.push_back(std::move(events));
  }
  summary->trace_json = TraceEvents(trace);
  summary->uniform_loss = std::log(static_cast<double>(options.model.vocab));
  summary->entropy_rate = setup.markov.has_value() ? setup.markov->EntropyRate() : 0.0;
  summary->final_loss = summary->steps.back().loss;
  int64_t comm = 0;
  for (const StepReport& line : summary->steps) {
    summary->peak_model_state_bytes_per_rank =
        std::max(summary->peak_model_state_bytes_per_rank, line.model_state_bytes);
    comm += line.comm_bytes;
  }
  summary->comm_bytes_per_rank_per_step = comm / static_cast<int64_t>(summary->steps.size());
  summary->tokens_per_second = static_cast<double>(setup.tokens_per_step * options.steps) /
                               absl::ToDoubleSeconds(absl::Now() - job_start);
  return absl::OkStatus();
}

// Aborting every endpoint of a failed rank tells its peers in each group at once,
// instead of at their deadlines.
void AbortRank(RankWiring& w, const absl::Status& reason) {
  for (const std::shared_ptr<Transport>& endpoint : w.endpoints) endpoint->Abort(reason);
  if (w.pp != nullptr) w.pp->Abort(reason);
}

// The coordinates of world rank `rank`: tp fastest, then pp, then dp.
void PlaceRank(const TrainJobOptions& o, int rank, RankWiring& w) {
  w.rank = rank;
  w.t = rank % o.tp;
  w.s = (rank / o.tp) % o.pp;
  w.d = rank / (o.tp * o.pp);
}

}  // namespace

absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, Setup(options));
  const int dp = options.dp, pp = options.pp, tp = options.tp;
  const int world = dp * pp * tp;
  // One inproc group per line of each dimension, plus the world. Separate
  // transports for each dimension, since the ZeRO engine drives dp from its own
  // thread while the layers drive tp and the executor drives pp.
  std::vector<std::shared_ptr<InprocGroup>> tp_groups, pp_groups, dp_groups;
  for (const auto& [groups, count, size] :
       {std::make_tuple(&tp_groups, dp * pp, tp), std::make_tuple(&pp_groups, dp * tp, pp),
        std::make_tuple(&dp_groups, pp * tp, dp)}) {
    for (int i = 0; i < count; ++i) {
      LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(size));
      groups->push_back(std::move(group));
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> world_group, InprocGroup::Create(world));
  std::vector<RankWiring> wiring(world);
  CommunicatorOptions comm_options;
  comm_options.timeout = kTimeout;
  for (int rank = 0; rank < world; ++rank) {
    RankWiring& w = wiring[rank];
    PlaceRank(options, rank, w);
    auto make = [&](const std::shared_ptr<InprocGroup>& g,
                    int r) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, g->Endpoint(r));
      w.endpoints.push_back(std::move(endpoint));
      return Communicator::Create(w.endpoints.back(), comm_options);
    };
    LOOM_ASSIGN_OR_RETURN(w.tp, make(tp_groups[w.d * pp + w.s], w.t));
    LOOM_ASSIGN_OR_RETURN(w.dp, make(dp_groups[w.s * tp + w.t], w.d));
    LOOM_ASSIGN_OR_RETURN(w.world, make(world_group, w.rank));
    LOOM_ASSIGN_OR_RETURN(w.pp, pp_groups[w.d * tp + w.t]->Endpoint(w.s));
  }
  // --offload nvme: one DiskTier for every rank (names carry the rank's stage, tp
  // and dp coordinates).
  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  if (options.offload == OffloadKind::kNvme) {
    // A directory of this job's own under --nvme_dir, so that its removal removes
    // nothing of the user's.
    LOOM_ASSIGN_OR_RETURN(disk, OpenDisk(options, absl::StrCat("train.", getpid()), &made_dirs));
  }

  TrainSummary summary;
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] = RunRank(options, *setup, wiring[r], disk.get(), on_step,
                           r == 0 ? &summary : nullptr);
      if (!results[r].ok()) AbortRank(wiring[r], results[r]);
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
  return summary;
}

std::string ShmGroupId(absl::string_view job_id, absl::string_view dimension, int group) {
  // "<job>.<dimension><group>": every segment of the job starts with
  // /dev/shm/loom.<job>., which the launcher and its janitor remove. Launcher job ids
  // hold no dot and are at most 64 characters: this fits ShmOptions' 96.
  return absl::StrCat(job_id, ".", dimension, group);
}

std::vector<std::string> ShmGroupIds(const TrainJobOptions& o, absl::string_view job_id) {
  std::vector<std::string> ids = {ShmGroupId(job_id, "w", 0)};
  for (int i = 0; i < o.dp * o.pp; ++i) ids.push_back(ShmGroupId(job_id, "t", i));
  for (int i = 0; i < o.pp * o.tp; ++i) ids.push_back(ShmGroupId(job_id, "d", i));
  for (int i = 0; i < o.dp * o.tp; ++i) ids.push_back(ShmGroupId(job_id, "p", i));
  return ids;
}

absl::StatusOr<std::optional<TrainSummary>> RunTrainJobRank(
    const TrainJobOptions& options, const ShmOptions& process,
    const std::function<void(const StepReport&)>& on_step) {
  // One shm group per line of each dimension, as with threads.
  auto connect = [&](absl::string_view dimension, int group, int rank,
                     int size) -> absl::StatusOr<std::unique_ptr<Transport>> {
    ShmOptions shm = process;
    shm.job_id = ShmGroupId(process.job_id, dimension, group);
    shm.rank = rank;
    shm.size = size;
    return ConnectShmTransport(shm);
  };
  return RunTrainJobProcess(options, process.rank, process.size, "shm", connect, on_step);
}

absl::StatusOr<std::optional<TrainSummary>> RunTrainJobProcess(
    const TrainJobOptions& options, int rank, int size, absl::string_view transport,
    const GroupConnector& connect, const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, Setup(options));
  const int world = options.dp * options.pp * options.tp;
  if (size != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport ", transport, ": the job has ", size, " processes, --dp ",
                     options.dp, " x --pp ", options.pp, " x --tp ", options.tp, " needs ",
                     world));
  }
  RankWiring w;
  PlaceRank(options, rank, w);
  CommunicatorOptions comm_options;
  comm_options.timeout = kTimeout;
  auto make = [&](absl::StatusOr<std::unique_ptr<Transport>> endpoint)
      -> absl::StatusOr<std::unique_ptr<Communicator>> {
    if (!endpoint.ok()) return endpoint.status();
    w.endpoints.push_back(std::move(*endpoint));
    return Communicator::Create(w.endpoints.back(), comm_options);
  };
  const int dp = options.dp, pp = options.pp, tp = options.tp;
  LOOM_ASSIGN_OR_RETURN(w.world, make(connect("w", 0, w.rank, world)));
  LOOM_ASSIGN_OR_RETURN(w.tp, make(connect("t", w.d * pp + w.s, w.t, tp)));
  LOOM_ASSIGN_OR_RETURN(w.dp, make(connect("d", w.s * tp + w.t, w.d, dp)));
  LOOM_ASSIGN_OR_RETURN(w.pp, connect("p", w.d * tp + w.t, w.s, pp));

  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  std::optional<TrainSummary> summary;
  if (w.rank == 0) summary.emplace();
  absl::Status status;
  if (options.offload == OffloadKind::kNvme) {
    absl::StatusOr<std::unique_ptr<DiskTier>> opened =
        OpenDisk(options, absl::StrCat("rank", w.rank), &made_dirs);
    status = opened.status();
    if (opened.ok()) disk = std::move(*opened);
  }
  if (status.ok()) {
    status = RunRank(options, *setup, w, disk.get(), on_step,
                     summary.has_value() ? &*summary : nullptr);
  }
  if (!status.ok()) {
    AbortRank(w, status);
    return absl::Status(status.code(), absl::StrCat("rank ", w.rank, ": ", status.message()));
  }
  return summary;
}

absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary) {
  TrainJobOptions one = options;
  one.dp = 1;
  one.pp = 1;
  one.tp = 1;
  // Plain one-rank training (bf16 keeps its f32 master beside the weights); the
  // optimizer state stays in memory.
  one.zero = 0;
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
