// The ZeRO engine's per-bucket state and the buffers its caller's thread and its
// communication thread share (zero3/zero3_engine.h). Internal to zero3: the engine's
// parts (passes, gradients, step, disk homes) all work on these.
#ifndef LOOM_ZERO3_INTERNAL_BUCKET_STATE_H_
#define LOOM_ZERO3_INTERNAL_BUCKET_STATE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/comm_worker.h"
#include "collectives/communicator.h"
#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/mutex.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {
namespace zero3_internal {

// GatherBuffer: room for the largest bucket, gathered in the compute dtype, and
// (bf16) its f32 widening, which is what Acquire hands out. The gathered bucket is
// communication memory from the dp communicator's AllocateBuffer (shm: the peers
// map it, so the all-gathers skip the kernel copy); the widening stays private.
struct GatherBuffer {
  CommBuffer memory;             // holds f32 or bf16
  absl::Span<float> f32;         // f32 compute: the gathered bucket itself
  absl::Span<BFloat16> bf16;     // bf16 compute (stage 3): the gathered bucket
  std::vector<float> widened;    // bf16 compute: f32 copy of it
};

// GradBuffers: whole-bucket gradient buffers, from the dp communicator's
// AllocateBuffer and recycled (a fresh mapping per bucket and pass would cost the
// peers a new mapping each time). Taken on the caller's thread, given back on the
// communication thread once the bucket is reduced. All of one size, the largest
// bucket's; at most as many are kept as were ever live at once.
class GradBuffers {
 public:
  GradBuffers(Communicator* dp, size_t bytes) : dp_(dp), bytes_(bytes) {}

  absl::StatusOr<CommBuffer> Take() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        CommBuffer buffer = std::move(free_.back());
        free_.pop_back();
        return buffer;
      }
    }
    allocated_.fetch_add(static_cast<int64_t>(bytes_));
    return dp_->AllocateBuffer(bytes_);
  }
  // The bytes of every buffer ever allocated (the free ones stay allocated).
  int64_t allocated_bytes() const { return allocated_.load(); }
  void Give(CommBuffer buffer) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    free_.push_back(std::move(buffer));
  }

 private:
  Communicator* const dp_;
  const size_t bytes_;
  Mutex mu_;
  std::vector<CommBuffer> free_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> allocated_{0};
};

// BucketState: one bucket's shard (or, `replicated`, the persistent block whole)
// and what the current pass is doing with it.
struct BucketState {
  int index = -1;                  // bucket index; -1 for the persistent block
  bool replicated = false;
  int64_t numel = 0;               // elements held: shard_numel or PersistentNumel
  int64_t padded_numel = 0;        // gathered size (replicated: numel)
  // The f32 master weights (in f32 compute, the parameters): `master`, or in f32
  // at stages 1 and 2 this rank's block of `whole_f32`.
  absl::Span<float> weights;
  AlignedBuffer<float> master;
  // bf16 compute: the bf16 copy of `weights`, in `compute_shard` or (stages 1 and
  // 2) this rank's block of `whole_bf16`.
  absl::Span<BFloat16> compute;
  std::vector<BFloat16> compute_shard;
  // Stages 1 and 2: the whole bucket, on every rank, in the compute dtype.
  std::vector<float> whole_f32;
  std::vector<BFloat16> whole_bf16;
  // The gradient: this rank's shard (stages 2 and 3, and the persistent block), or
  // at stage 1 the whole bucket's, accumulated here until ReduceGradients reduces
  // it into this rank's block of it.
  std::vector<float> grad_f32;
  std::vector<BFloat16> grad_bf16;
  std::optional<AdamWState> adam;   // empty when it lives in optimizer_disk
  bool master_on_disk = false;      // bf16 with optimizer_disk: `master` is empty
  // param_disk: the compute-dtype shard is on disk (f32: `master` is empty too).
  bool params_on_disk = false;
  // grad_disk: the gradient shard is on disk (grad_f32 and grad_bf16 are empty),
  // and whether this step has stored one (else it is zero). The communication
  // thread sets grad_stored; the caller's thread reads and clears it after a wait.
  bool grads_on_disk = false;
  bool grad_stored = false;

  // This pass.
  int buffer = -1;                      // GatherBuffer in use, or -1
  CommWorker::Ticket gather_ticket = 0;
  bool gather_waited = false;
  // Still gathered after its pass ended (in its last window), for the next pass.
  bool kept = false;
  // Whole bucket, f32, while gradients arrive (empty: none yet), in grad_memory:
  // from GradBuffers (buckets) or kept across passes (the persistent block).
  absl::Span<float> grad_buffer;
  CommBuffer grad_memory;
  bool reduced = false;                 // its reduce-scatter was submitted
  // Leases held on its unit (ParameterSource::LeaseUnit), and whether the pass
  // moved past it while one was: its release (the buffer back to the pool, and
  // in a backward pass its reduce-scatter) waits for the last lease to end.
  int leases = 0;
  bool release_deferred = false;

  int64_t StateBytes() const {
    return static_cast<int64_t>(master.size() * sizeof(float) +
                                compute_shard.size() * sizeof(BFloat16) +
                                whole_f32.size() * sizeof(float) +
                                whole_bf16.size() * sizeof(BFloat16) +
                                grad_f32.size() * sizeof(float) +
                                grad_bf16.size() * sizeof(BFloat16)) +
           static_cast<int64_t>(adam.has_value() ? adam->size_bytes() : 0);
  }
};

// EngineShared: the gather buffers (the pool and its free list are used by the
// caller's thread only; the worker writes into buffers it was handed) and the
// gradient-buffer byte counters, which the worker updates.
struct EngineShared {
  EngineShared(Communicator* dp, size_t grad_bytes) : grads(dp, grad_bytes) {}
  std::vector<GatherBuffer> pool;
  std::vector<int> free_buffers;
  GradBuffers grads;
  // param_disk: a shard read from disk just before its all-gather. One is enough:
  // the communication thread runs one gather at a time.
  std::vector<std::byte> staged;
  // grad_disk: the gradient shard being added into, on the communication thread.
  std::vector<float> grad_staged_f32;
  std::vector<BFloat16> grad_staged_bf16;
  int64_t grad_staged_bytes = 0;  // reserved at Init (the worker never grows them)
  std::atomic<int64_t> live_grad_bytes{0};
  std::atomic<int64_t> peak_grad_bytes{0};
};


inline int64_t DTypeBytes(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }

// AddInto adds src to a gradient shard held in the compute dtype, `f32` or (when
// that is empty) `bf16`: widened, added in f32, rounded once. The bf16 shard goes a
// block at a time through core/half_convert's vector kernels, which give the scalar
// ToFloat and ToBFloat16's bits: one element at a time it took 6% of the samples of a
// one-rank bf16 training step (issue 56's model, 2 cores, zero 3), on the
// communication thread beside the compute.
inline void AddInto(absl::Span<const float> src, std::vector<float>& f32,
                    std::vector<BFloat16>& bf16) {
  // Raw pointers in the loops: Debian's Abseil is built hardened, so Span's
  // operator[] checks every index, which kept these loops scalar (4.8% of the
  // samples of that bf16 step, on the communication thread).
  const float* const in = src.data();
  if (!f32.empty()) {
    float* const acc = f32.data();
    for (size_t i = 0; i < src.size(); ++i) acc[i] += in[i];
    return;
  }
  constexpr size_t kBlock = 1024;
  float sum[kBlock];
  for (size_t start = 0; start < src.size(); start += kBlock) {
    const absl::Span<BFloat16> out =
        absl::MakeSpan(bf16).subspan(start, std::min(kBlock, src.size() - start));
    const absl::Span<float> block = absl::MakeSpan(sum, out.size());
    // The spans are of one size, so neither conversion can fail.
    ConvertBF16ToF32(out, block).IgnoreError();
    for (size_t i = 0; i < out.size(); ++i) sum[i] += in[start + i];
    ConvertF32ToBF16(block, out).IgnoreError();
  }
}

inline void AddInto(absl::Span<const float> src, BucketState& bucket) {
  AddInto(src, bucket.grad_f32, bucket.grad_bf16);
}

}  // namespace zero3_internal
}  // namespace loom

#endif  // LOOM_ZERO3_INTERNAL_BUCKET_STATE_H_
