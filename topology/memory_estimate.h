// Memory estimates per rank: model states (parameters, gradients, optimizer states)
// under ZeRO stages 0-3, and activations of a transformer stage under tensor,
// sequence and context parallelism and a pipeline schedule's in-flight microbatches.
// This replaces the prototypes' "1024 MB per layer" guess with the published models:
//  - model states as in the ZeRO paper (Rajbhandari et al., 2020): mixed-precision
//    Adam keeps 2 (fp16/bf16 params) + 2 (grads) + 12 (fp32 master, m, v) = 16 bytes
//    per parameter; ZeRO-1 shards the 12, ZeRO-2 also the gradients, ZeRO-3 all 16;
//  - activations as in "Reducing Activation Recomputation in Large Transformer
//    Models" (Korthikanti et al., 2022): s*b*h*(34 + 5*a*s/h) bytes per layer with
//    16-bit activations, and its tensor/sequence-parallel and recompute variants.
//
// Example (the ZeRO paper's worked case: 7.5B parameters, Nd = 64):
//   ModelStateOptions opts;
//   opts.num_parameters = 7'500'000'000;
//   opts.dp = 64;
//   opts.zero_stage = 0;  EstimateModelStateBytes(opts)->total();   // 120e9 bytes
//   opts.zero_stage = 1;  EstimateModelStateBytes(opts)->total();   // 31.4e9
//   opts.zero_stage = 2;  EstimateModelStateBytes(opts)->total();   // 16.6e9
//   opts.zero_stage = 3;  EstimateModelStateBytes(opts)->total();   // 1.9e9
#ifndef LOOM_TOPOLOGY_MEMORY_ESTIMATE_H_
#define LOOM_TOPOLOGY_MEMORY_ESTIMATE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "topology/parallel_config.h"
#include "topology/recompute.h"

namespace loom {

enum class PrecisionPolicy {
  kMixedPrecisionAdam,  // bf16/fp16 params 2 + grads 2 + fp32 master/m/v 12 bytes.
  kFp32Adam,            // fp32 params 4 + grads 4 + m/v 8 bytes.
  // bf16 arithmetic on f32 storage (Loom's CPU job at zero 0: bf16-rounded weights
  // and gradients in f32 arrays, beside the weights' bf16 compute copy that the
  // products read) with an fp32 master, m and v: params 4 + 2 + grads 4 +
  // master/m/v 12 bytes.
  kBf16InF32Adam,
};

// Bytes per parameter of each model state under `policy`.
struct BytesPerParameter {
  int64_t parameters;
  int64_t gradients;
  int64_t optimizer_states;
};
BytesPerParameter BytesPerParameterOf(PrecisionPolicy policy);

// ZeroBuffers: what a ZeRO rank holds beyond its shards, which the paper's bytes
// per parameter leave out (DeepSpeed bounds the same with
// stage3_max_live_parameters / stage3_prefetch_bucket_size and reduce_bucket_size):
// gathered units (the one in use and those prefetched) and whole-unit gradient
// buffers while their reduce-scatters run.
struct ZeroBuffers {
  int64_t unit_numel = 0;      // elements of the largest unit (bucket), padded
  int64_t gathered_units = 0;  // units gathered at once
  // Bytes per gathered element: 4 in f32; 6 in bf16 (gathered in bf16, widened to
  // f32 for the compute); 4 at stages 1 and 2 in bf16 (only the widening).
  int64_t gathered_bytes_per_element = 4;
  int64_t gradient_units = 0;  // whole-unit f32 gradient buffers alive at once
  // Optimizer state on NVMe: the bytes per element of the largest unit's shard
  // (unit_numel / dp) that the step keeps in memory to stage it: two read buffers
  // of the stored state and one AdamW state, 24 in f32 (m, v), 32 in bf16 (m, v
  // and the f32 master). 0 without NVMe.
  int64_t disk_staging_bytes_per_element = 0;
};

struct ModelStateOptions {
  int64_t num_parameters = 0;  // Whole model, Psi.
  PrecisionPolicy precision = PrecisionPolicy::kMixedPrecisionAdam;
  int zero_stage = 0;          // 0 (plain data parallel) to 3.
  int64_t dp = 1;              // Nd: the data-parallel degree ZeRO shards over.
  // Tensor and pipeline parallelism split the parameters evenly (an approximation:
  // replicated layer norms and uneven embedding stages are not modelled).
  int64_t tp = 1;
  int64_t pp = 1;
  // ZeRO's communication buffers (zero_stage >= 1; all zero: not counted).
  ZeroBuffers buffers;
  // Bytes per local parameter the model keeps itself beside ZeRO's state for the
  // whole step: 8 for whole f32 weights and gradients (a model that does not
  // borrow its weights: Loom's --reshard=step), 4 for whole f32 gradients (one
  // that borrows them but keeps the step's gradient sums: a deferred
  // reduce-scatter). zero_stage >= 1.
  int64_t resident_bytes_per_parameter = 0;
};

// Model-state bytes held by one rank; sharded states are rounded up per rank.
struct ModelStateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t buffers = 0;   // ZeroBuffers
  int64_t resident = 0;  // resident_bytes_per_parameter
  int64_t total() const { return parameters + gradients + optimizer_states + buffers + resident; }
};

// EstimateModelStateBytes returns the per-rank model-state bytes. InvalidArgument
// for a negative parameter count, a zero stage outside 0..3, a degree below 1, a
// negative buffer field, or buffers or resident bytes at zero stage 0.
absl::StatusOr<ModelStateBytes> EstimateModelStateBytes(const ModelStateOptions& options);

struct ActivationOptions {
  int64_t hidden_size = 0;       // h
  int64_t seq_len = 0;           // s (whole sequence; cp splits it)
  int64_t micro_batch_size = 0;  // b
  int64_t num_heads = 0;         // a
  int64_t layers = 0;            // Transformer layers held by this rank (all its stages).
  // Microbatches whose activations are alive at the same time on this rank, at the
  // peak; see InFlightMicrobatches.
  int64_t in_flight_microbatches = 1;
  int64_t tp = 1;
  int64_t cp = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
};

// ActivationBytesPerLayer returns the bytes one layer keeps for one microbatch
// (16-bit activations, 1-byte dropout masks, 4h MLP), with s the local sequence s/cp.
// InvalidArgument for sizes below 1, heads or tp not dividing what they split, or
// sequence parallelism when the local sequence does not split over tp.
absl::StatusOr<int64_t> ActivationBytesPerLayer(const ActivationOptions& options);

// EstimateActivationBytes returns ActivationBytesPerLayer * layers *
// in_flight_microbatches: the peak activation memory of the rank.
absl::StatusOr<int64_t> EstimateActivationBytes(const ActivationOptions& options);

// FusedAttentionActivationOptions: a GPT stage as Loom's models/gpt keeps it for its
// backward, which Korthikanti et al.'s formula does not fit: f32 activations, no
// dropout, fused attention (the s x s scores are recomputed; each head keeps only its
// output and log-sum-exp); one microbatch of one stage model (a schedule holds as
// many as it keeps in flight: FusedAttentionStageBytes below). Bytes per local
// position and layer, with t = tp, a = heads:
//   16h + 16 + (52h + 4a) / t         f32 linear inputs
//   12h + 16 + (42h + 4a) / t         bf16 linear inputs (GemmPrecision::kBf16)
// (block input and mid-block residual 4h each, their layer-norm mean and rstd 16;
// the qkv and fc inputs 4h each, or 2h; per tp rank: Q, K, V 12h/t, the heads'
// context 4h/t and its copy as the out projection's input 4h/t (or 2h/t), the
// log-sum-exp 4a/t, the MLP's pre-GELU 16h/t and GELU output 16h/t (or 8h/t)).
// The first stage adds its token ids (8 bytes per position); the last adds the
// final layer norm's input and statistics 4h + 8, the head's input 4h (or 2h), the
// local softmax 4V/t and the targets 8 (V/t rounded up: a vocabulary that does not
// divide tp is split as evenly as it goes, the busiest rank holding ceil(V/t)). Recompute::kFull keeps each block's input
// (4h) and, while a block is recomputed, one block's state.
// Under context parallelism the busiest rank holds ceil(s / cp) positions of each
// sequence (zigzag and contiguous layouts alike).
//
// Example (2 layers, h 64, 4 heads, V 64, s 1024, b 1, one stage):
//   FusedAttentionActivationOptions o;
//   o.hidden_size = 64; o.num_heads = 4; o.vocab = 64; o.seq_len = 1024;
//   o.micro_batch_size = 1; o.layers = 2; o.embedding = o.head = true;
//   EstimateFusedAttentionActivationBytes(o);   // 9,560 B per position: 9,789,440
//   o.cp = 4;
//   EstimateFusedAttentionActivationBytes(o);   // 2,447,360: a quarter
struct FusedAttentionActivationOptions {
  int64_t hidden_size = 0;       // h
  int64_t num_heads = 0;         // a
  int64_t vocab = 0;             // V (the head's softmax; used when head is true)
  int64_t seq_len = 0;           // s (whole sequence; cp splits it)
  int64_t micro_batch_size = 0;  // b
  int64_t layers = 0;            // transformer blocks of this stage model (0 allowed)
  bool embedding = false;        // the stage holds the token embedding
  bool head = false;             // the stage holds the final norm, head and loss
  int64_t tp = 1;
  int64_t cp = 1;
  bool bf16_linear_inputs = false;
  Recompute recompute = Recompute::kNone;  // kNone or kFull
};

// EstimateFusedAttentionActivationBytes returns the peak bytes one stage model keeps
// for its backward, by the formula above. InvalidArgument for sizes below 1 (layers
// below 0), heads not splitting over tp, seq_len below cp, or
// Recompute::kSelective (Loom's model has none).
absl::StatusOr<int64_t> EstimateFusedAttentionActivationBytes(
    const FusedAttentionActivationOptions& options);

// FusedAttentionStageBytes: what one microbatch of a stage model holds at each
// point a schedule may stop it at (GptStageModule keeps every in-flight
// microbatch's state in a context of its own):
//   forward_peak  the most during its forward (EstimateFusedAttentionActivationBytes);
//   context       what it keeps from its forward to its backward: forward_peak,
//                 except under Recompute::kFull, where it is the blocks' inputs, the
//                 token ids and the head's state (no block's state);
//   weight_work   what a split backward (zero-bubble schedules) keeps from its
//                 input-gradient pass to its weight pass, per local position: each
//                 linear layer's input and output gradient (4 bytes an element,
//                 2 under bf16_linear_inputs, L): a block L(4h + 12h/t), the head
//                 L(h + V/t), the embedding 8 + 4h (ids and f32 gradient); per
//                 block also its layer norms' gradients 16h and, in bf16, its
//                 biases' 4(2h + 7h/t); the final norm's 8h;
//   backward_input_peak  the most during that input-gradient pass: the larger of
//                 forward_peak and weight_work; under Recompute::kFull the first
//                 block recomputed on top of every later block's work and the
//                 head's (its input and state, the token ids), if larger.
// A schedule's peak on a rank walks its actions: a forward adds context (peaking
// at forward_peak above what is held), a backward removes it (peaking at
// forward_peak), an input-gradient pass trades it for weight_work (peaking at
// backward_input_peak), the weight pass removes that. InvalidArgument as
// EstimateFusedAttentionActivationBytes.
struct FusedAttentionStageBytes {
  int64_t forward_peak = 0;
  int64_t context = 0;
  int64_t weight_work = 0;
  int64_t backward_input_peak = 0;
};
absl::StatusOr<FusedAttentionStageBytes> EstimateFusedAttentionStageBytes(
    const FusedAttentionActivationOptions& options);

// InFlightMicrobatches returns, for pipeline rank `rank` of `pp`, the most
// (model-chunk, microbatch) activations a schedule keeps alive at once, in units of
// one chunk's activations for one microbatch (a chunk is layers / virtual_stages):
//   GPipe: m.  1F1B and ZB-H1: min(pp - rank, m).
//   Interleaved 1F1B (Megatron): min((pp - rank - 1) * 2 + (v - 1) * pp + 1, m * v).
//   ZB-V: min(2 * pp, 2 * m) chunk-microbatches (half-size chunks: 1F1B's peak).
// InvalidArgument for rank outside [0, pp) or counts below 1.
absl::StatusOr<int64_t> InFlightMicrobatches(PipelineScheduleKind schedule, int64_t pp,
                                             int64_t rank, int64_t num_microbatches,
                                             int64_t virtual_stages = 1);

// FormatBytes renders bytes in decimal units, as the ZeRO paper does: "31.4 GB".
std::string FormatBytes(int64_t bytes);

}  // namespace loom

#endif  // LOOM_TOPOLOGY_MEMORY_ESTIMATE_H_
