// ReplicatedStore: ZeRO stage 0, plain data parallelism, as a ParameterSource
// (core/parameter_source.h). Every data-parallel rank keeps the whole model: its
// weights, one gradient bucket (communication memory from the dp communicator, as
// DDP's), and AdamW's state. A model that borrows its weights
// (GptModel::UseParameterSource) reads them here and adds its gradients into the
// bucket; ReduceGradients averages the bucket over dp with one all-reduce, and Step
// runs AdamW where the weights live. It is Zero3Engine's counterpart for zero 0, so
// that a training job has one way to hold parameters whatever the ZeRO stage.
//
// Precision: in f32 the weights are the master. In bf16 (compute_dtype kBF16) the
// weights are the bf16 compute copy, kept as bf16 (AcquireBf16, what the layers'
// bf16 products read) and widened to f32 (Acquire), and an f32 master sits beside
// them; the averaged f32 gradient is rounded once to bf16 before the step, as
// Zero3Engine rounds its reduced gradients, so stage 0 and stages 1-3 agree to the
// bit given the same gradient sums.
//
// Memory per rank (StateBytes): 16 bytes per parameter in f32 (weights 4,
// gradient 4, m 4, v 4), 22 in bf16 (the f32 master 4 and the bf16 copy 2 more). Traffic per step:
// one all-reduce of the bucket, 2 * Psi * (dp - 1) / dp elements per rank on a ring
// (with a reducer, the same elements as one all-reduce per bucket, overlapped).
//
// Gradients of the backward passes since the last Step are summed (a model whose
// microbatch losses are already scaled by 1 / microbatches), then averaged over dp.
//
// Example (each data-parallel rank, on its own thread or process):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ReplicatedStore> store,
//                         ReplicatedStore::Create(specs, dp_comm, initial_flat, {}));
//   LOOM_RETURN_IF_ERROR(model.UseParameterSource(store.get(), GradientHome::kSource));
//   for (int64_t step = 1; ...; ++step) {
//     ...model forward and backward (they acquire and add gradients here)...
//     LOOM_RETURN_IF_ERROR(store->ReduceGradients());
//     LOOM_ASSIGN_OR_RETURN(double sq, store->ReducedGradSquaredNorm(weights));
//     AdamWHyper hyper;
//     hyper.step = step;
//     LOOM_RETURN_IF_ERROR(store->Step(hyper));
//   }
//   store->Acquire(0);  // outside a pass: FailedPrecondition naming the parameter
#ifndef LOOM_ZERO3_REPLICATED_STORE_H_
#define LOOM_ZERO3_REPLICATED_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/parameter_source.h"
#include "offload/adamw/cpu_adamw.h"
#include "zero3/gradient_all_reducer.h"
#include "zero3/partition.h"

namespace loom {

struct ReplicatedStoreOptions {
  // kF32: the weights are the master. kBF16: the weights are the bf16 compute copy
  // of an f32 master. Nothing else.
  DType compute_dtype = DType::kF32;
  // Threads for AdamW's step (offload's CPU AdamW), in [1, 256].
  int adamw_threads = 1;
  // Overlap (DDP's bucketed all-reduce): with a reducer over the store's `dp`,
  // each bucket of the gradient is all-reduced on the reducer's thread as soon as
  // each of its parameters has had `grads_per_step` AddGrads this step (one per
  // microbatch's backward), beside the rest of the backward; ReduceGradients then
  // enqueues the buckets not yet complete and waits. A bucket is a run of
  // consecutive parameters of one unit (specs with one ParamSpec::unit; a
  // unit-less parameter alone), the unit cut from its last parameter backwards (the
  // order a backward gives them) at `bucket_cap_bytes` of f32 gradient, a larger
  // parameter alone; 0: one bucket per unit. A parameter given more than
  // `grads_per_step` is FailedPrecondition (its all-reduce may be running). Null
  // reducer: ReduceGradients all-reduces the whole gradient at once. Either way
  // every element is averaged by the same all-reduce operation, and at dp 2 (or
  // with a deterministic communicator) the bits are the same.
  std::shared_ptr<GradientAllReducer> reducer;
  int64_t grads_per_step = 1;  // >= 1
  int64_t bucket_cap_bytes = 0;  // >= 0
};

class ReplicatedStore : public ParameterSource {
 public:
  // Create keeps `initial` (every parameter of `specs` back to back, f32) as the
  // weights, allocates the gradient bucket from `dp` (not owned; it must outlive the
  // store and be driven by nobody else while it lives) and zeroed AdamW state.
  // InvalidArgument naming the values for no parameters, a size mismatch or bad
  // options; the transport's error if the bucket cannot be allocated.
  static absl::StatusOr<std::unique_ptr<ReplicatedStore>> Create(
      std::vector<ParamSpec> specs, Communicator* dp, absl::Span<const float> initial,
      const ReplicatedStoreOptions& options = {});

  // ParameterSource. Acquire works in every pass but kGradients and returns the
  // weights (the compute copy), valid until the next Step or WriteState; AddGrad
  // adds into the bucket in a kBackward or kGradients pass, and is refused after
  // ReduceGradients until Step. EndPass communicates nothing.
  absl::Status BeginParameterPass(ParameterPass pass) override;
  absl::StatusOr<absl::Span<const float>> Acquire(int param) override;
  // AcquireBf16: in bf16, the weights as bf16 (Acquire's values before widening),
  // under Acquire's conditions; Unimplemented in f32.
  absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param) override;
  absl::Status AddGrad(int param, absl::Span<const float> grad) override;
  absl::Status EndPass() override;

  // ReduceGradients averages the bucket over dp (one all-reduce; in bf16 then
  // rounded once to bf16). Collective. A second call before Step does nothing.
  // FailedPrecondition inside a pass; the collective's error.
  absl::Status ReduceGradients();
  // ReducedGradSquaredNorm: the averaged gradient's squared L2 norm, parameter p's
  // elements weighted by param_weight[p] (one entry per parameter), on dp rank 0;
  // 0 on the others (every rank holds the same gradient), so that its sum over the
  // dp group counts each element once. FailedPrecondition before ReduceGradients;
  // InvalidArgument for a wrong count.
  absl::StatusOr<double> ReducedGradSquaredNorm(absl::Span<const float> param_weight) const;
  // Step runs AdamW on every parameter with the averaged gradient and zeroes the
  // bucket for the next step. With a reducer and no ReduceGradients before it, it
  // steps each bucket as soon as that bucket's all-reduce is done, while the later
  // ones still run (the optimizer overlapped with the communication, as PyTorch's
  // optimizer-in-backward; the bits are the same); otherwise it reduces first. Call
  // ReduceGradients first only where the whole averaged gradient is needed before
  // the step (clipping by its norm). The collective's error; after one, the buckets
  // not yet stepped keep their weights (the communicator is broken: end the job).
  // FailedPrecondition inside a pass.
  absl::Status Step(const AdamWHyper& hyper);
  // ExternalStep: an optimizer that runs elsewhere (a GPU AdamW) updates `weights`
  // (one span per parameter, the f32 weights, f32 compute only) from `gradient`
  // (the averaged bucket, parameters back to back). StepWith runs it in place of
  // AdamW, then zeroes the bucket as Step does; FailedPrecondition in bf16.
  using ExternalStep = std::function<absl::Status(absl::Span<const absl::Span<float>> weights,
                                                  absl::Span<const float> gradient)>;
  absl::Status StepWith(const ExternalStep& step);

  // ReadState copies parameter p's f32 master and AdamW moments (its element count
  // each); WriteState replaces them, the weights following. Outside a pass;
  // OutOfRange for a bad index, InvalidArgument for wrong sizes.
  absl::Status ReadState(int param, absl::Span<float> master, absl::Span<float> m,
                         absl::Span<float> v) const;
  absl::Status WriteState(int param, absl::Span<const float> master, absl::Span<const float> m,
                          absl::Span<const float> v);

  int num_params() const { return static_cast<int>(specs_.size()); }
  // The buckets the gradient is all-reduced by (with a reducer; one call each).
  int num_buckets() const { return static_cast<int>(bucket_first_.size()) - 1; }
  int64_t total_numel() const { return static_cast<int64_t>(weights_.size()); }
  const ParamSpec& spec(int param) const { return specs_[static_cast<size_t>(param)]; }
  // The gradient bucket (after ReduceGradients: the averaged gradient).
  absl::Span<const float> gradient() const { return gradient_; }
  // Bytes held: weights, gradient bucket, moments and (bf16) the master and the
  // bf16 copy.
  int64_t StateBytes() const;
  // Seconds Step has waited for the gradient's reduction since Create (overlapped:
  // for the buckets' all-reduces still running, the communication neither the
  // backward nor the step hid; else the reduction Step ran itself); the rest of
  // Step's time is AdamW's.
  double StepWaitSeconds() const { return step_wait_seconds_; }

 private:
  ReplicatedStore(std::vector<ParamSpec> specs, Communicator* dp,
                  const ReplicatedStoreOptions& options);
  absl::Status CheckParam(const char* call, int param) const;
  absl::Span<float> Slice(absl::Span<float> flat, int param) const;
  absl::Span<const float> Slice(absl::Span<const float> flat, int param) const;
  void ZeroGradient();
  // Overlap: every parameter of `bucket` has all its gradients; enqueue its
  // all-reduce.
  void EnqueueBucket(int bucket);
  // Overlap: enqueue the buckets not yet enqueued, in bucket order.
  void EnqueueRemainingBuckets();
  // Overlap: Step's wait for the reducer up to `ticket` (0: nothing), timed.
  absl::Status WaitInStep(int64_t ticket);
  // bf16: rounds elements [begin, end) of the averaged gradient once to bf16.
  void RoundToBf16(int64_t begin, int64_t end);
  // AdamW on parameters [first, end) with the averaged gradient.
  absl::Status StepParameters(const AdamWHyper& hyper, int first, int end);

  // Buckets: bucket b is parameters [bucket_first_[b], bucket_first_[b + 1]).
  std::vector<int> bucket_first_;
  std::vector<int> bucket_of_;  // per parameter
  // This step's AddGrads per parameter, parameters still short of grads_per_step
  // per bucket, whether each bucket's all-reduce is enqueued, and the last ticket.
  std::vector<int64_t> grad_adds_;
  std::vector<int> bucket_waiting_;
  std::vector<bool> bucket_enqueued_;
  std::vector<int64_t> bucket_ticket_;  // the reducer's ticket of each bucket (0: none)
  int64_t last_ticket_ = 0;
  double step_wait_seconds_ = 0;

  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;  // num_params() + 1: where each parameter starts
  Communicator* dp_;
  ReplicatedStoreOptions options_;
  std::vector<float> weights_;     // the compute copy (f32: the master)
  std::vector<float> masters_;     // bf16: the f32 master; empty in f32
  std::vector<AdamWState> states_;  // per parameter
  CommBuffer gradient_memory_;     // from dp->AllocateBuffer
  absl::Span<float> gradient_;     // the bucket, in it
  std::vector<BFloat16> weights16_;  // bf16: the compute copy itself; empty in f32
  bool in_pass_ = false;
  ParameterPass pass_ = ParameterPass::kForward;
  bool reduced_ = false;
};

}  // namespace loom

#endif  // LOOM_ZERO3_REPLICATED_STORE_H_
