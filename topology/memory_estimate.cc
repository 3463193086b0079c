#include "topology/memory_estimate.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace loom {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

absl::Status CheckPositive(absl::string_view name, int64_t value) {
  if (value < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", value, " must be >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

BytesPerParameter BytesPerParameterOf(PrecisionPolicy policy) {
  switch (policy) {
    case PrecisionPolicy::kMixedPrecisionAdam: return {2, 2, 12};
    case PrecisionPolicy::kFp32Adam: return {4, 4, 8};
    case PrecisionPolicy::kBf16InF32Adam: return {6, 4, 12};
  }
  return {0, 0, 0};
}

absl::StatusOr<ModelStateBytes> EstimateModelStateBytes(const ModelStateOptions& options) {
  if (options.num_parameters < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_parameters=", options.num_parameters, " is negative"));
  }
  if (options.zero_stage < 0 || options.zero_stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero_stage=", options.zero_stage, " is not one of 0, 1, 2, 3"));
  }
  LOOM_RETURN_IF_ERROR(CheckPositive("dp", options.dp));
  LOOM_RETURN_IF_ERROR(CheckPositive("tp", options.tp));
  LOOM_RETURN_IF_ERROR(CheckPositive("pp", options.pp));
  const BytesPerParameter per = BytesPerParameterOf(options.precision);
  if (options.num_parameters > (int64_t{1} << 50)) {  // Keeps bytes well inside int64_t.
    return absl::InvalidArgumentError(
        absl::StrCat("num_parameters=", options.num_parameters, " exceeds 2^50"));
  }
  // Parameters held by this model-parallel rank before ZeRO sharding.
  const int64_t local = CeilDiv(options.num_parameters, options.tp * options.pp);
  const int64_t nd = options.dp;
  ModelStateBytes bytes;
  bytes.parameters = per.parameters * (options.zero_stage >= 3 ? CeilDiv(local, nd) : local);
  bytes.gradients = per.gradients * (options.zero_stage >= 2 ? CeilDiv(local, nd) : local);
  bytes.optimizer_states =
      per.optimizer_states * (options.zero_stage >= 1 ? CeilDiv(local, nd) : local);
  const ZeroBuffers& b = options.buffers;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"buffers.unit_numel", b.unit_numel},
        {"buffers.gathered_units", b.gathered_units},
        {"buffers.gathered_bytes_per_element", b.gathered_bytes_per_element},
        {"buffers.gradient_units", b.gradient_units},
        {"buffers.disk_staging_bytes_per_element", b.disk_staging_bytes_per_element},
        {"resident_bytes_per_parameter", options.resident_bytes_per_parameter}}) {
    if (value < 0 || value > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", value, " is not in [0, 2^40]"));
    }
  }
  const bool any_buffers = b.unit_numel > 0 && (b.gathered_units > 0 || b.gradient_units > 0 ||
                                                 b.disk_staging_bytes_per_element > 0);
  if (options.zero_stage == 0 && (any_buffers || options.resident_bytes_per_parameter > 0)) {
    return absl::InvalidArgumentError(
        "buffers and resident_bytes_per_parameter describe ZeRO (zero_stage 1-3); zero_stage=0 "
        "has none");
  }
  bytes.buffers = b.unit_numel * (b.gathered_units * b.gathered_bytes_per_element +
                                  b.gradient_units * int64_t{4}) +
                  CeilDiv(b.unit_numel, nd) * b.disk_staging_bytes_per_element;
  bytes.resident = options.resident_bytes_per_parameter * local;
  return bytes;
}

absl::StatusOr<int64_t> ActivationBytesPerLayer(const ActivationOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckPositive("hidden_size", o.hidden_size));
  LOOM_RETURN_IF_ERROR(CheckPositive("seq_len", o.seq_len));
  LOOM_RETURN_IF_ERROR(CheckPositive("micro_batch_size", o.micro_batch_size));
  LOOM_RETURN_IF_ERROR(CheckPositive("num_heads", o.num_heads));
  LOOM_RETURN_IF_ERROR(CheckPositive("tp", o.tp));
  LOOM_RETURN_IF_ERROR(CheckPositive("cp", o.cp));
  if (o.seq_len % o.cp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len=", o.seq_len, " does not split over cp=", o.cp));
  }
  if (o.num_heads % o.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads=", o.num_heads, " does not split over tp=", o.tp));
  }
  const int64_t s = o.seq_len / o.cp;  // Each context-parallel rank holds s/cp tokens.
  if (o.sequence_parallel && s % o.tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("sequence parallelism splits the local ",
                                                   "sequence ", s, " over tp=", o.tp,
                                                   ", which does not divide it"));
  }
  const int64_t b = o.micro_batch_size;
  const int64_t h = o.hidden_size;
  const int64_t a = o.num_heads;
  const int64_t t = o.tp;
  const int64_t sbh = s * b * h;
  // Korthikanti et al., per layer: 10sbh of the activations (layer-norm inputs and
  // dropout masks) are replicated across tp unless sequence parallelism splits them;
  // 24sbh are split by tp; the attention scores/softmax/dropout cost 5as^2b, split
  // by tp (heads) and removed by selective recompute.
  switch (o.recompute) {
    case Recompute::kFull:
      return o.sequence_parallel ? CeilDiv(2 * sbh, t) : 2 * sbh;
    case Recompute::kSelective:
      return o.sequence_parallel ? CeilDiv(34 * sbh, t) : 10 * sbh + CeilDiv(24 * sbh, t);
    case Recompute::kNone:
      break;
  }
  const int64_t attention = 5 * a * s * s * b;
  if (o.sequence_parallel) return CeilDiv(34 * sbh + attention, t);
  return 10 * sbh + CeilDiv(24 * sbh + attention, t);
}

absl::StatusOr<int64_t> EstimateActivationBytes(const ActivationOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckPositive("layers", options.layers));
  LOOM_RETURN_IF_ERROR(CheckPositive("in_flight_microbatches", options.in_flight_microbatches));
  LOOM_ASSIGN_OR_RETURN(const int64_t per_layer, ActivationBytesPerLayer(options));
  return per_layer * options.layers * options.in_flight_microbatches;
}

namespace {

// FusedBytes: one microbatch of a stage model, term by term (the header's
// formulas): the state per local position of a block, of the head and of the
// embedding, the weight work of a block, of the head and of the embedding
// (per position, plus what does not scale with positions), and the positions.
struct FusedBytes {
  int64_t positions = 0;
  int64_t block = 0, head = 0, embedding = 0;  // forward state per position
  int64_t checkpoint = 0;                      // a block's input, per position
  int64_t block_work = 0, head_work = 0, embedding_work = 0;  // whole, for `positions`
};

absl::StatusOr<FusedBytes> FusedTerms(const FusedAttentionActivationOptions& o) {
  LOOM_RETURN_IF_ERROR(CheckPositive("hidden_size", o.hidden_size));
  LOOM_RETURN_IF_ERROR(CheckPositive("num_heads", o.num_heads));
  LOOM_RETURN_IF_ERROR(CheckPositive("seq_len", o.seq_len));
  LOOM_RETURN_IF_ERROR(CheckPositive("micro_batch_size", o.micro_batch_size));
  LOOM_RETURN_IF_ERROR(CheckPositive("tp", o.tp));
  LOOM_RETURN_IF_ERROR(CheckPositive("cp", o.cp));
  if (o.layers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("layers=", o.layers, " is negative"));
  }
  if (o.num_heads % o.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads=", o.num_heads, " does not split over tp=", o.tp));
  }
  if (o.head) LOOM_RETURN_IF_ERROR(CheckPositive("vocab", o.vocab));
  if (o.seq_len < o.cp) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len=", o.seq_len, " is shorter than cp=", o.cp));
  }
  if (o.recompute == Recompute::kSelective) {
    return absl::InvalidArgumentError(
        "selective recompute: the fused-attention model has none (none or full)");
  }
  const int64_t h = o.hidden_size, t = o.tp;
  const int64_t linear_in = o.bf16_linear_inputs ? 2 : 4;  // bytes per saved linear input
  FusedBytes f;
  f.positions = CeilDiv(o.seq_len, o.cp) * o.micro_batch_size;
  // One block, per local position (see the header for each term).
  const int64_t replicated = 4 * h + 4 * h + 16 + linear_in * h * 2;
  const int64_t split = 12 * h + 4 * h + linear_in * h + 4 * o.num_heads + 16 * h +
                        linear_in * 4 * h;
  f.block = replicated + split / t;
  // The vocabulary splits over tp as evenly as it goes (VocabParallelEmbedding's
  // balanced split, no padding rows): the busiest rank holds ceil(V / t).
  const int64_t vocab_local = CeilDiv(o.vocab, t);
  f.head = o.head ? 4 * h + 8 + linear_in * h + 4 * vocab_local + 8 : 0;
  f.embedding = o.embedding ? 8 : 0;
  f.checkpoint = 4 * h;
  // Weight works: each linear layer's input and output gradient, both kept in the
  // products' precision.
  f.block_work = linear_in * (4 * h + 12 * h / t) * f.positions + 16 * h +
                 (o.bf16_linear_inputs ? 4 * (2 * h + 7 * h / t) : 0);
  f.head_work = o.head ? linear_in * (h + vocab_local) * f.positions + 8 * h : 0;
  f.embedding_work = o.embedding ? (8 + 4 * h) * f.positions : 0;
  return f;
}

}  // namespace

absl::StatusOr<int64_t> EstimateFusedAttentionActivationBytes(
    const FusedAttentionActivationOptions& o) {
  LOOM_ASSIGN_OR_RETURN(const FusedBytes f, FusedTerms(o));
  int64_t per_position = 0;
  if (o.recompute == Recompute::kFull) {
    // Every block's input, and one block's state (the one recomputed, or the last
    // one's forward) or the head's, whichever is larger.
    per_position = f.embedding + f.checkpoint * o.layers +
                   std::max(o.layers > 0 ? f.block : 0, f.head);
  } else {
    per_position = f.embedding + f.block * o.layers + f.head;
  }
  return per_position * f.positions;
}

absl::StatusOr<FusedAttentionStageBytes> EstimateFusedAttentionStageBytes(
    const FusedAttentionActivationOptions& o) {
  LOOM_ASSIGN_OR_RETURN(const FusedBytes f, FusedTerms(o));
  FusedAttentionStageBytes bytes;
  LOOM_ASSIGN_OR_RETURN(bytes.forward_peak, EstimateFusedAttentionActivationBytes(o));
  bytes.weight_work = o.layers * f.block_work + f.head_work + f.embedding_work;
  bytes.context = bytes.forward_peak;
  bytes.backward_input_peak = std::max(bytes.forward_peak, bytes.weight_work);
  if (o.recompute == Recompute::kFull) {
    bytes.context = (f.embedding + f.checkpoint * o.layers + f.head) * f.positions;
    // The split backward recomputes each block on top of the works of the blocks
    // after it: the most is at the first block (its input and state, the token
    // ids, every later block's work and the head's), or the whole work at the end.
    const int64_t first_block =
        o.layers > 0 ? (f.embedding + f.checkpoint + f.block) * f.positions +
                           (o.layers - 1) * f.block_work + f.head_work
                     : 0;
    bytes.backward_input_peak =
        std::max({bytes.context, first_block, bytes.weight_work});
  }
  return bytes;
}

absl::StatusOr<int64_t> InFlightMicrobatches(PipelineScheduleKind schedule, int64_t pp,
                                             int64_t rank, int64_t num_microbatches,
                                             int64_t virtual_stages) {
  LOOM_RETURN_IF_ERROR(CheckPositive("pp", pp));
  LOOM_RETURN_IF_ERROR(CheckPositive("num_microbatches", num_microbatches));
  LOOM_RETURN_IF_ERROR(CheckPositive("virtual_stages", virtual_stages));
  if (rank < 0 || rank >= pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline rank ", rank, " is outside [0, pp=", pp, ")"));
  }
  const int64_t m = num_microbatches;
  switch (schedule) {
    case PipelineScheduleKind::kGPipe:
      return m;
    case PipelineScheduleKind::k1F1B:
    case PipelineScheduleKind::kZeroBubbleH1:
      return std::min(pp - rank, m);
    case PipelineScheduleKind::kInterleaved1F1B: {
      const int64_t v = virtual_stages;
      const int64_t warmup = (pp - rank - 1) * 2 + (v - 1) * pp;
      return std::min(warmup + 1, m * v);
    }
    case PipelineScheduleKind::kZeroBubbleV:
      return std::min(2 * pp, 2 * m);
  }
  return absl::InternalError("unhandled pipeline schedule");
}

std::string FormatBytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= 1'000'000'000'000) return absl::StrFormat("%.1f TB", b / 1e12);
  if (bytes >= 1'000'000'000) return absl::StrFormat("%.1f GB", b / 1e9);
  if (bytes >= 1'000'000) return absl::StrFormat("%.1f MB", b / 1e6);
  if (bytes >= 1'000) return absl::StrFormat("%.1f kB", b / 1e3);
  return absl::StrCat(bytes, " B");
}

}  // namespace loom
