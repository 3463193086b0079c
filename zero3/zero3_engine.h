// Zero3Engine: one data-parallel rank's ZeRO state and its traffic. At stage 3
// (the default) every rank keeps only its shard of the parameters, the gradients
// and the AdamW state, and whole parameters exist only while a pass uses them.
// Stages 1 and 2 (Zero3Options.stage) shard less: see Zero3Options.
//
// A step is a forward pass, a backward pass and Step():
//   - BeginPass(kForward) starts gathering buckets 0, 1, ... ahead of use, at most
//     `prefetch_depth` buckets past the one in use and never more than
//     max_live_gathered_bytes of them, on the engine's communication thread, so the
//     all-gathers overlap compute. Acquire(p) waits for p's bucket and returns the
//     whole parameter; acquiring a later bucket releases the earlier ones, except
//     those a lease holds (ParameterSource::LeaseUnit: a leased unit stays gathered,
//     and its gradients unreduced, until the lease ends; see HoldUnit).
//   - BeginPass(kBackward) gathers the buckets again in reverse order. AddGrad(p, g)
//     accumulates p's gradient into its bucket's buffer; when the pass moves past a
//     bucket its gradients are reduce-scattered (averaged over dp) into each rank's
//     gradient shard, overlapping the rest of the backward pass.
//   - EndPass finishes the pass: every bucket is gathered (and, backward, reduced) on
//     every rank even where this rank used none of it, so ranks that take different
//     branches still make the same collective calls (an unused parameter contributes
//     a zero gradient) and nothing hangs.
//   - ReduceGradients (optional: Step calls it when the caller did not) finishes
//     every reduction of the step, so that ReducedGradSquaredNorm can give the
//     global gradient norm for clipping before Step.
//   - Step runs AdamW on this rank's shard, bucket by bucket, with offload's fused
//     CPU AdamW (threads when the optimizer state is offloaded), and writes the
//     compute copy (bf16 in mixed precision) of the new shard.
// Several backward passes before a Step accumulate (averaged over the passes).
//
// Memory per rank (counted, Stats()): with Psi parameters in buckets, 16 * Psi / dp
// bytes of model state at stage 3 in both precisions — f32: param 4 + grad 4 + m 4
// + v 4; bf16: param 2 + grad 2 + f32 master 4 + m 4 + v 4. Stage 2 keeps the whole
// parameters (f32 4 Psi + 12 Psi / dp; bf16 2 Psi + 14 Psi / dp), stage 1 also the
// whole gradients (f32 8 Psi + 8 Psi / dp; bf16 4 Psi + 12 Psi / dp), whose own
// block holds the reduced shard from ReduceGradients to Step (the other blocks are
// dead by then, so the shard costs nothing more). Plus the padding of the last shard
// of each bucket, plus persistent (unsharded) parameters at 16 bytes each, plus
// buffers bounded by: live gathered buckets (at most prefetch_depth + 1 of the
// largest bucket, in the compute dtype, and an f32 copy of each in bf16) and the
// gradient buffers of buckets being reduced.
// Traffic per step and rank (read from the communicator's counters), at stage 3:
// all-gather twice and reduce-scatter once, each (dp - 1) / dp of the padded bucket
// bytes: 3 * Psi * (dp - 1) / dp elements, 1.5x plain data parallelism's all-reduce
// (2 * Psi * (dp - 1) / dp); at stages 1 and 2 one reduce-scatter and one all-gather
// (of the updated shards, in Step), 2 * Psi * (dp - 1) / dp. Persistent gradients
// add one all-reduce per backward pass. Gradient clipping adds the caller's
// all-reduce of one double.
//
// Example (each data-parallel rank runs this on its own thread or process):
//   LOOM_ASSIGN_OR_RETURN(Partition partition, Partition::Create(model.Specs(), {...}));
//   Zero3Options options;
//   options.compute_dtype = DType::kBF16;
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Engine> engine,
//                         Zero3Engine::Create(partition, dp_comm, init_flat, options));
//   for (int64_t step = 1; ...; ++step) {
//     LOOM_RETURN_IF_ERROR(engine->BeginPass(Zero3Pass::kForward));
//     for (int p : model.ForwardOrder()) {
//       LOOM_ASSIGN_OR_RETURN(absl::Span<const float> w, engine->Acquire(p));
//       ...compute with w...
//     }
//     LOOM_RETURN_IF_ERROR(engine->EndPass());
//     LOOM_RETURN_IF_ERROR(engine->BeginPass(Zero3Pass::kBackward));
//     for (int p : reversed order) { Acquire(p); ...; engine->AddGrad(p, dw); }
//     LOOM_RETURN_IF_ERROR(engine->EndPass());
//     // Global-norm clipping, each element of the model counted once over dp:
//     LOOM_RETURN_IF_ERROR(engine->ReduceGradients());
//     std::vector<float> weight(partition.num_params(), 1.0f);
//     LOOM_ASSIGN_OR_RETURN(double sq, engine->ReducedGradSquaredNorm(weight));
//     ...all-reduce (sum) sq over every rank of the job...
//     AdamWHyper hyper;
//     hyper.step = step;
//     hyper.grad_scale = std::min(1.0, max_norm / (std::sqrt(sq) + 1e-6));
//     LOOM_RETURN_IF_ERROR(engine->Step(hyper));
//   }
//   engine->Acquire(3);   // outside a pass:
//   // FailedPrecondition: "Zero3Engine rank 1: Acquire(3 \"fc.w\") outside a pass"
//
// The implementation is split by concern (README.md, "The engine's parts"):
// zero3_engine.cc (making it, its figures), zero3_passes.cc (the gather/release
// coordinator and leases), zero3_gradients.cc (the gradient reducer), zero3_step.cc
// (the step and the state's reads and writes), internal/disk_shards.h (NVMe homes).
#ifndef LOOM_ZERO3_ZERO3_ENGINE_H_
#define LOOM_ZERO3_ZERO3_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/parameter_source.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "zero3/partition.h"

namespace loom {

class CommWorker;  // collectives/comm_worker.h

namespace zero3_internal {
struct BucketState;
struct EngineShared;
class DiskShards;
}  // namespace zero3_internal

// kGradients: a backward pass that gathers nothing, for callers that kept the
// parameters from the forward pass (a pipeline stage holding its weights for a
// whole step): gradients arrive and are reduce-scattered as in kBackward, and a
// step costs one all-gather and one reduce-scatter instead of two and one.
// kRegather: a backward pass that gathers (in reverse order) and reduces nothing,
// for callers that keep this step's gradients themselves and hand them over in
// one kGradients pass at its end (the deferred reduce-scatter, whose bits are
// plain data parallelism's).
enum class Zero3Pass { kNone, kForward, kBackward, kGradients, kRegather };

struct Zero3Options {
  // What is sharded over dp (the ZeRO stages): 1 the optimizer state (f32 master,
  // m, v), 2 also the gradients, 3 also the parameters. At stages 1 and 2 every
  // rank keeps the whole parameters in the compute dtype (Acquire gathers nothing)
  // and Step all-gathers the updated shards into them; stage 1 also keeps the whole
  // gradient, accumulated locally and reduce-scattered once per step, by
  // ReduceGradients.
  int stage = 3;
  // kF32: parameters and gradients in f32 (the master weights are the parameters).
  // kBF16: gathered and reduced in bf16, an f32 master shard for the optimizer.
  DType compute_dtype = DType::kF32;
  // Buckets gathered ahead of the one in use, >= 0.
  int prefetch_depth = 2;
  // Bound on gathered bytes alive at once (compute dtype plus, for bf16, the f32
  // copy Acquire returns); 0: only prefetch_depth bounds it. Must hold at least
  // one bucket.
  int64_t max_live_gathered_bytes = 0;
  // Bound on whole-bucket gradient buffers alive at once (each the largest
  // bucket's padded size in f32), >= 1: a backward pass that needs one more while
  // the earlier buckets' reduce-scatters still hold theirs waits for the oldest
  // (DeepSpeed's reduce_bucket_size). 2 lets one bucket accumulate while the last
  // one is reduced; 1 serializes them.
  int max_grad_buffers = 2;
  // Optimizer state in host memory, the step on `adamw_threads` threads (offload's
  // ZeRO-Offload path). Otherwise the step runs on the calling thread.
  bool offload_optimizer = false;
  int adamw_threads = 1;
  // NVMe offload (ZeRO-Infinity): when set, each bucket's AdamW moments (and, in
  // bf16, its f32 master) live between steps in this DiskTier as one tensor named
  // "<disk_prefix>.r<rank>.b<bucket>"; Step reads one bucket's, steps it and writes
  // it back (durable when Step returns), reading the next bucket ahead. Only the
  // persistent block's state stays in memory. Not owned; it must outlive the
  // engine, which removes its tensors when destroyed. Several engines may share one
  // DiskTier under distinct prefixes.
  DiskTier* optimizer_disk = nullptr;
  std::string disk_prefix = "zero3";
  // Parameter offload to NVMe (ZeRO-Infinity's offload_param), stage 3 only: each
  // bucket's parameter shard, in the compute dtype, lives in this DiskTier as
  // "<disk_prefix>.r<rank>.b<bucket>.w" instead of memory. A gather reads it on
  // the communication thread just before its all-gather (so prefetching reads
  // ahead of use too); Step reads it (f32: it is the master), steps and writes it
  // back, durable when Step returns. The persistent block stays in memory. May be
  // the optimizer_disk; not owned, must outlive the engine, which removes its
  // tensors when destroyed.
  DiskTier* param_disk = nullptr;
  // Gradient offload to NVMe, stages 2 and 3: each bucket's gradient shard, in the
  // compute dtype, lives in this DiskTier as "<disk_prefix>.r<rank>.b<bucket>.g"
  // instead of memory. Each reduce-scatter's average is added into it on the
  // communication thread (read, add, write; nothing to read for the step's first),
  // ReducedGradSquaredNorm and Step read it, and after Step it is zero again
  // (nothing is read until the next reduce-scatter). The persistent block keeps
  // its gradient in memory. May be the optimizer_disk or param_disk; not owned,
  // must outlive the engine, which removes its tensors when destroyed. The bits
  // are those of the gradients in memory.
  DiskTier* grad_disk = nullptr;
  // Whether Step averages the gradient over the backward passes since the last
  // Step (each pass the gradient of a whole mean loss). False: they are summed (a
  // model whose microbatch losses are already scaled by 1 / microbatches, with one
  // pass per microbatch and pipeline stage).
  bool average_passes = true;
  // How long any wait for a collective may take.
  absl::Duration timeout = absl::Minutes(5);
  // Agreement check: at the start of each pass, at ReduceGradients (or Step) and
  // at GatherAll, the dp ranks exchange where they stand (steps taken, the pass,
  // backward passes since the step: one small all-to-all on the communication
  // thread, ahead of the pass's gathers). Ranks that disagree (one ran a
  // microbatch more) all fail with FailedPrecondition naming both positions, at
  // the next wait, instead of pairing the wrong collectives.
  bool check_agreement = true;
  // With check_agreement: every dp rank must use the same buckets in each pass; a
  // rank that skipped one (acquired none of its parameters and gave them no
  // gradient) fails the next check, naming the bucket and the ranks. False: an
  // unused bucket contributes a zero gradient (ranks may take different branches).
  bool require_same_use = false;
};

// Zero3Stats: what the engine holds and has moved, in bytes.
struct Zero3Stats {
  int64_t model_state_bytes = 0;       // shards: params, grads, master, m, v
  int64_t persistent_state_bytes = 0;  // unsharded parameters' state, same four parts
  int64_t host_state_bytes = 0;        // the part of both in host (offload) memory
  int64_t disk_state_bytes = 0;        // optimizer_disk, param_disk, grad_disk: there, not above
  int64_t param_disk_reads = 0;        // param_disk: shards read for gathers
  int64_t live_gathered_bytes = 0;     // now
  int64_t peak_gathered_bytes = 0;     // since Create
  int64_t peak_grad_buffer_bytes = 0;  // since Create
  // Communication memory the engine holds now: the gather pool (allocated at
  // Create) and every gradient buffer allocated so far (recycled, never freed).
  int64_t buffer_bytes = 0;
  // Seconds the caller's thread waited for the communication thread: for a
  // gathered bucket (Acquire, or a pass moving past an unused one), and for a
  // gradient buffer to come back (max_grad_buffers), since Create.
  double gather_wait_seconds = 0;
  double grad_buffer_wait_seconds = 0;
  int64_t agreement_checks = 0;        // check_agreement exchanges
  int64_t gathers = 0;                 // all-gather calls
  // Buckets a pass took over still gathered from the pass before it (the last
  // units of a forward are the first of the backward after it), and their padded
  // elements: at stage 3 all-gathers saved, at stages 1 and 2 in bf16 widenings.
  // Only while the weights stay the same (no Step or WriteShard in between).
  int64_t gathers_kept = 0;
  int64_t gathered_numel_kept = 0;
  int64_t reduce_scatters = 0;         // reduce-scatter calls
  int64_t steps = 0;
  // bf16 compute: elements widened to f32 for Acquire since Create, on demand (a
  // parameter's first Acquire in a pass) or, for a shard read from disk, a whole
  // bucket at its gather. A parameter only multiplied in bf16 (AcquireBf16) adds none.
  int64_t widened_numel = 0;
};

// A Zero3Engine is a ParameterSource (core/parameter_source.h): a model that
// borrows its weights (GptModel::UseParameterSource) drives its passes, gathering
// each unit just before use and releasing it after (FSDP's reshard after forward).
class Zero3Engine : public ParameterSource {
 public:
  // Create takes this rank's shard of `initial` (the whole model, flat: parameters
  // in order, Partition::TotalNumel() elements, the same on every rank) for the
  // partition laid out over `dp` (dp->size() == partition's dp_size; `dp` must
  // outlive the engine and be driven by nobody else while it lives).
  // InvalidArgument naming the values for a size mismatch or bad options.
  static absl::StatusOr<std::unique_ptr<Zero3Engine>> Create(const Partition& partition,
                                                             Communicator* dp,
                                                             absl::Span<const float> initial,
                                                             const Zero3Options& options = {});
  ~Zero3Engine() override;
  Zero3Engine(const Zero3Engine&) = delete;
  Zero3Engine& operator=(const Zero3Engine&) = delete;

  const Partition& partition() const { return partition_; }
  const Zero3Options& options() const { return options_; }
  int rank() const { return rank_; }
  // The bounds of the communication buffers (Stats().buffer_bytes), from the
  // options and the partition: buckets gathered at once (the pool), bytes per
  // gathered element (0 where Acquire needs no buffer: stages 1 and 2 in f32), and
  // whole-bucket gradient buffers (max_grad_buffers, at most one per bucket; one
  // at stage 1, which adds each into its whole gradient at once).
  int gather_buffers() const;
  int64_t gathered_bytes_per_element() const { return BufferBytes(1); }
  int grad_buffers() const;
  // With optimizer_disk, the bytes per element of the largest bucket's shard the
  // step keeps to stage that state (two read buffers and one AdamW state: 24 in
  // f32, 32 in bf16); 0 without.
  int64_t disk_staging_bytes_per_element() const;

  // BeginPass starts a pass (FailedPrecondition inside one);
  // BeginParameterPass is the same for ParameterSource's pass kinds.
  absl::Status BeginPass(Zero3Pass pass);
  absl::Status BeginParameterPass(ParameterPass pass) override;
  // Acquire returns parameter `param`, whole, valid until its bucket is released
  // (the pass moves past it, or ends). FailedPrecondition outside a pass or for a
  // bucket this pass already released (parameters are used in pass order);
  // (or in a kGradients pass); OutOfRange for a bad index; the collective's error
  // if its gather failed.
  absl::StatusOr<absl::Span<const float>> Acquire(int param) override;
  // AcquireBf16: in bf16 compute, the bf16 values Acquire's are widened from (the
  // compute shard at one rank, the gathered bucket at stage 3, the whole bf16 copy
  // at stages 1 and 2), valid as long as Acquire's view, so that a bf16 product
  // multiplies them without rounding Acquire's values again (the same bits: the
  // widening is exact). It makes Acquire's checks and waits but not its widening:
  // in bf16 compute a parameter is widened to f32 by its first Acquire of the pass
  // (WidensOnDemand), so a projection the model only multiplies in bf16 is never
  // widened. Unimplemented
  // in f32, for a persistent parameter and for a shard read from disk (staged for
  // one bucket only): the caller rounds Acquire's values.
  absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param) override;
  // AddGrad adds `grad` (the parameter's numel elements) to `param`'s gradient in
  // a kBackward or kGradients pass. Gradients arrive in reverse partition order:
  // reaching a bucket moves the pass past the later ones (their reduce-scatters
  // start), as Acquire does. FailedPrecondition outside a backward pass or after
  // the parameter's bucket was reduced; InvalidArgument for a wrong size.
  absl::Status AddGrad(int param, absl::Span<const float> grad) override;
  // GradientSlot (core/parameter_source.h): the parameter's range of its bucket's
  // gradient buffer, for its first gradient of the pass, with AddGrad's checks and
  // bookkeeping; empty for a persistent parameter and for a second gradient.
  absl::StatusOr<absl::Span<float>> GradientSlot(int param) override;
  // EndPass finishes the pass's collectives (see the top of this file) and returns
  // the first error of the pass, if any.
  absl::Status EndPass() override;
  // ReduceGradients finishes every reduction of the gradients accumulated since the
  // last Step; call it after the step's last backward pass. At stage 1 it
  // reduce-scatters (averages over dp) the whole gradient, bucket by bucket, into
  // this rank's shard (in bf16 rounded once, as the other stages round theirs); at
  // stages 2 and 3 it waits for the reductions still running. Collective at stage
  // 1: every rank calls it or leaves it to Step, which calls it when the caller did
  // not. A second call before Step does nothing; a backward pass after it is
  // refused until Step. FailedPrecondition inside a pass or without a backward pass
  // since the last Step; the collective's error if a reduction failed.
  absl::Status ReduceGradients();
  // ReducedGradSquaredNorm returns, in double, the sum over the gradient elements
  // this rank owns of g * g * param_weight[p]: g is the gradient as Step hands it
  // to AdamW before hyper.grad_scale, reduced (averaged over dp; in bf16 the bf16
  // value, widened) and divided by the backward passes (here in double).
  // Persistent parameters' gradients, the same on every rank, count on rank 0 only,
  // so the sum over the dp group counts each element of the model once.
  // `param_weight` has one entry per parameter: 1 counts it, 0 leaves it out (a
  // parameter replicated over tensor parallelism, on tp ranks other than 0).
  // Non-finite gradients give a non-finite result. It communicates nothing: the
  // caller sums it over every rank of the job. Between ReduceGradients and Step,
  // outside a pass. InvalidArgument for a wrong size or a weight that is negative
  // or not finite; FailedPrecondition inside a pass or before ReduceGradients.
  absl::StatusOr<double> ReducedGradSquaredNorm(absl::Span<const float> param_weight) const;
  // Step applies AdamW to this rank's shard with the gradients accumulated since
  // the last Step, averaged over the backward passes (hyper.grad_scale is
  // multiplied by 1 / passes); it calls ReduceGradients first if the caller did
  // not, with the same result to the bit. FailedPrecondition inside a pass or
  // without one; ReduceGradients' errors.
  absl::Status Step(const AdamWHyper& hyper);

  // ReadShard copies this rank's master weights (f32, Partition::ShardNumel()
  // elements, bucket by bucket) and the persistent block into the spans; ReadMoments
  // the same for AdamW's m and v. WriteShard / WriteMoments restore them (the
  // compute copies are refreshed; at stages 1 and 2 the next BeginPass all-gathers
  // the whole parameters again, so every rank must call WriteShard). InvalidArgument
  // for wrong sizes.
  absl::Status ReadShard(absl::Span<float> sharded, absl::Span<float> persistent) const;
  absl::Status WriteShard(absl::Span<const float> sharded, absl::Span<const float> persistent);
  absl::Status ReadMoments(absl::Span<float> m_sharded, absl::Span<float> m_persistent,
                           absl::Span<float> v_sharded, absl::Span<float> v_persistent) const;
  absl::Status WriteMoments(absl::Span<const float> m_sharded,
                            absl::Span<const float> m_persistent,
                            absl::Span<const float> v_sharded,
                            absl::Span<const float> v_persistent);
  // GatherAll collectively gathers the whole model (flat, TotalNumel()) on every
  // rank: for evaluation and tests. Outside a pass.
  absl::StatusOr<std::vector<float>> GatherAll();

  Zero3Stats Stats() const;

 protected:
  // A lease (ParameterSource::LeaseUnit) pins its unit's bucket: the pass may move
  // on past it, but its buffer stays gathered and (backward) its reduce-scatter
  // waits until the last lease on it ends. A persistent unit pins nothing.
  // FailedPrecondition outside an acquiring pass, or for a unit this pass already
  // released (passed with no lease held), naming the unit and the pass.
  absl::StatusOr<int64_t> HoldUnit(const ParameterUnit& unit) override;
  void ReleaseUnit(const ParameterUnit& unit, int64_t ticket) override;

 private:
  Zero3Engine(const Partition& partition, Communicator* dp, const Zero3Options& options);
  absl::Status Init(absl::Span<const float> initial);
  std::string Who() const;
  // CheckParam: OutOfRange naming `call` for a parameter index outside the model.
  absl::Status CheckParam(absl::string_view call, int param) const;
  absl::Time Deadline() const;
  // WaitTimed waits (with the deadline) for the worker's job `ticket` and adds the
  // seconds waited to `*waited`.
  absl::Status WaitTimed(int64_t ticket, double* waited);
  // Positions count buckets in pass order: forward 0..B-1, backward B-1..0.
  int BucketAt(int position) const;
  int PositionOf(int bucket) const;
  bool Reducing() const;  // a kBackward or kGradients pass
  bool UsesBuffers() const;
  // LendsShard: whether Acquire lends `bucket`'s own f32 shard instead of a gathered
  // copy: stage 3, f32 compute, one rank (its shard is the whole bucket), the shard
  // in memory. The pool buffer is still taken and freed, so the window's bookkeeping
  // and every rank's calls stay as they are; it is just never written.
  bool LendsShard(const zero3_internal::BucketState& bucket) const;
  // WidensOwnShard: whether a bf16 bucket at stage 3 is widened from this rank's own
  // shard (one rank, whose shard is the whole bucket), not from an all-gather into
  // its pool buffer. EnqueueGathers and AcquireBf16 decide by it alike.
  bool WidensOwnShard(const zero3_internal::BucketState& bucket) const;
  // WidensOnDemand: whether a bf16 bucket's f32 values are widened per parameter
  // by the first Acquire of each in the pass, rather than whole by EnqueueGathers:
  // bf16 compute with its bf16 values in memory for the pass (stages 1 and 2: the
  // whole copy; stage 3: the gathered buffer or the one rank's own shard; not a
  // shard read from disk into staging the next bucket reuses). A bf16 product
  // multiplies the bf16 copy (AcquireBf16), so only the parameters the model
  // reads in f32 (layer norms, biases, embeddings) are widened at all.
  bool WidensOnDemand(const zero3_internal::BucketState& bucket) const;
  // Bf16Values: the bf16 values the bucket's f32 ones are widened from, whole
  // (see AcquireBf16); Unimplemented naming `param` for a shard read from disk.
  absl::StatusOr<absl::Span<const BFloat16>> Bf16Values(const zero3_internal::BucketState& bucket,
                                                        int param) const;
  // AcquireChecked is Acquire's checks, waits and bookkeeping; `widen` (Acquire,
  // not AcquireBf16) widens the parameter on demand first (WidensOnDemand).
  absl::StatusOr<absl::Span<const float>> AcquireChecked(int param, bool widen);
  int64_t BufferBytes(int64_t numel) const;  // one pool buffer's bytes for `numel`
  void EnqueueGathers();
  // KeepForNextPass marks the buckets of the pass's last window as kept: still
  // gathered after EndPass. TakeOverKept (BeginPass) lets the new pass use those
  // its first window needs and frees the rest; DropKept frees them all (their
  // weights changed).
  void TakeOverKept();
  void DropKept();
  void FreeBuffer(zero3_internal::BucketState& bucket);
  void GatherWhole(zero3_internal::BucketState& bucket);
  absl::Status ReleaseBefore(int position);
  absl::Status EnqueueReduce(zero3_internal::BucketState& bucket);
  // ReduceWhole (stage 1) submits the reduce-scatter of the bucket's whole gradient
  // into its own block of it.
  void ReduceWhole(zero3_internal::BucketState& bucket);
  // ReducedShardStart: where this rank's reduced gradient shard starts in the
  // bucket's gradient (stage 1: its block of the whole gradient; otherwise 0).
  int64_t ReducedShardStart(const zero3_internal::BucketState& bucket) const;
  absl::Status RecordError(absl::Status status);
  // SubmitAgreement queues an agreement check of this rank's position (a
  // zero3_internal::SyncPoint of `kind`; `pass` for a pass start) on the worker.
  void SubmitAgreement(int64_t kind, Zero3Pass pass);
  void MarkUsed(int bucket);
  absl::Status RefreshComputeCopies();
  absl::Status CheckShardSpans(absl::string_view what, size_t sharded, size_t persistent) const;
  void CountGathered(int64_t delta);
  // TakeGradBuffer gives `bucket` a whole-bucket gradient buffer (recycled
  // communication memory, not zeroed: AddGrad writes a parameter's first gradient
  // and ZeroUnwritten, before the reduce, zeroes the padding and the parameters
  // no gradient reached); AllocatePersistentGrad the persistent block's, once.
  absl::Status TakeGradBuffer(zero3_internal::BucketState& bucket);
  void ZeroUnwritten(zero3_internal::BucketState& bucket);
  // GradientRange: AddGrad's checks for `numel` elements of `param` (`call` names
  // it in errors), the bucket's release and buffer; its range of the buffer.
  absl::StatusOr<absl::Span<float>> GradientRange(const char* call, int param, size_t numel);
  absl::Status AllocatePersistentGrad();
  void CountGradBuffer(int64_t bytes);
  // AddIntoStoredGrad adds a reduce-scatter's average into the bucket's gradient
  // shard on grad_disk (on the communication thread).
  absl::Status AddIntoStoredGrad(absl::Span<const float> average,
                                 zero3_internal::BucketState& bucket);
  // FinishRelease gives back a bucket the pass has moved past (its buffer to the
  // pool, or kept for the next pass when it is in the pass's last window at
  // `position`) and, in a backward pass, submits its reduce-scatter.
  absl::Status FinishRelease(zero3_internal::BucketState& bucket, int position,
                             const absl::Status& gathered);
  // The bucket holding unit `unit` (its parameters' bucket), or -1 when the unit is
  // persistent; InvalidArgument for a unit that is not one of the partition's.
  absl::StatusOr<int> BucketOfUnit(const ParameterUnit& unit) const;
  // NoBufferError: FailedPrecondition for a bucket whose turn came with every
  // pool buffer held by leases kept past their turn, naming them.
  absl::Status NoBufferError(const zero3_internal::BucketState& bucket) const;
  // ReadStateAhead submits the read of bucket b's optimizer state from
  // optimizer_disk into its staging buffer on the disk thread.
  void ReadStateAhead(int b);
  // StepBucket runs AdamW on one bucket's shard (the step's body).
  absl::Status StepBucket(zero3_internal::BucketState& bucket, const AdamWHyper& averaged,
                          std::vector<float>& widened);

  Partition partition_;
  Communicator* dp_;
  Zero3Options options_;
  int rank_ = 0;
  int slots_ = 1;  // buckets that may be gathered at once
  std::vector<std::unique_ptr<zero3_internal::BucketState>> buckets_;
  std::unique_ptr<zero3_internal::BucketState> persistent_;
  std::vector<float> persistent_view_;  // bf16 compute: the persistent block widened
  // WidensOnDemand: per parameter, whether its bucket's pool buffer holds its f32
  // widening; cleared for a bucket's parameters when a buffer is filled for it.
  std::vector<char> widened_;
  // Per parameter: whether AddGrad wrote its part of its bucket's gradient buffer
  // since the buffer was taken (TakeGradBuffer clears a bucket's parameters).
  std::vector<char> grad_written_;
  std::unique_ptr<zero3_internal::EngineShared> shared_;
  std::unique_ptr<CommWorker> worker_;
  // Where buckets' state lives on NVMe (the optimizer_disk, param_disk and
  // grad_disk homes).
  std::unique_ptr<zero3_internal::DiskShards> disk_;
  // optimizer_disk: the step's disk thread and its memory, made once and reused
  // by every step: two staging buffers (one bucket's stored state steps while the
  // next is read into the other) and one AdamW state of the largest bucket's size.
  std::unique_ptr<CommWorker> disk_worker_;
  std::vector<float> nvme_stage_[2];
  std::optional<AdamWState> nvme_adam_;
  int64_t nvme_read_ = 0;  // disk_worker_ ticket: the read into the next staging buffer

  Zero3Pass pass_ = Zero3Pass::kNone;
  int64_t pass_serial_ = 0;  // BeginPass count: a lease's ticket names its pass
  int position_ = 0;        // the pass's current bucket, as a position in pass order
  int next_gather_ = 0;     // the next position to gather
  int passes_since_step_ = 0;
  // Gradient buffers taken on this thread whose return is not yet known, and the
  // tickets of the reduce-scatters that give them back, oldest first.
  int grad_buffers_held_ = 0;
  // The agreement check: buckets this pass used (a bitmap), the last pass ended.
  std::vector<uint64_t> used_;
  Zero3Pass previous_pass_ = Zero3Pass::kNone;
  std::vector<std::string> bucket_names_;  // for its messages
  std::deque<int64_t> reduce_tickets_;
  bool grads_reduced_ = false;  // ReduceGradients ran since the last Step
  bool whole_stale_ = false;  // stages 1, 2: WriteShard ran; BeginPass re-gathers
  absl::Status pass_error_;
  Zero3Stats stats_;
};

}  // namespace loom

#endif  // LOOM_ZERO3_ZERO3_ENGINE_H_
