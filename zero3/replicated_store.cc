#include "zero3/replicated_store.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"

namespace loom {

namespace {

const char* PassName(ParameterPass pass) {
  switch (pass) {
    case ParameterPass::kForward: return "kForward";
    case ParameterPass::kBackward: return "kBackward";
    case ParameterPass::kRegather: return "kRegather";
    case ParameterPass::kGradients: return "kGradients";
  }
  return "unknown";
}

// The all-reduce buckets, as DDP's: runs of consecutive parameters of one unit
// (ParamSpec::unit; -1: a parameter alone), each unit cut from its last parameter
// backwards (the order a backward gives gradients) into buckets of at most
// `cap_bytes` f32 bytes, a larger parameter alone (0: one bucket per unit). Returns
// the first parameter of each bucket, then the parameter count.
std::vector<int> AllReduceBuckets(const std::vector<ParamSpec>& specs,
                                  const std::vector<int64_t>& offsets, int64_t cap_bytes) {
  const int n = static_cast<int>(specs.size());
  std::vector<int> unit_first;
  for (int p = 0; p < n; ++p) {
    const int unit = specs[static_cast<size_t>(p)].unit;
    if (p == 0 || unit < 0 || unit != specs[static_cast<size_t>(p - 1)].unit) {
      unit_first.push_back(p);
    }
  }
  unit_first.push_back(n);
  const auto bytes = [&offsets](int first, int end) {
    return (offsets[static_cast<size_t>(end)] - offsets[static_cast<size_t>(first)]) *
           static_cast<int64_t>(sizeof(float));
  };
  std::vector<int> first;
  for (size_t u = 0; u + 1 < unit_first.size(); ++u) {
    std::vector<int> cuts;  // this unit's bucket starts, last bucket first
    int end = unit_first[u + 1];
    for (int p = end - 1; p >= unit_first[u]; --p) {
      if (cap_bytes > 0 && p + 1 < end && bytes(p, end) > cap_bytes) {
        cuts.push_back(p + 1);
        end = p + 1;
      }
    }
    cuts.push_back(unit_first[u]);
    first.insert(first.end(), cuts.rbegin(), cuts.rend());
  }
  first.push_back(n);
  return first;
}

}  // namespace

ReplicatedStore::ReplicatedStore(std::vector<ParamSpec> specs, Communicator* dp,
                                 const ReplicatedStoreOptions& options)
    : specs_(std::move(specs)), dp_(dp), options_(options) {}

absl::StatusOr<std::unique_ptr<ReplicatedStore>> ReplicatedStore::Create(
    std::vector<ParamSpec> specs, Communicator* dp, absl::Span<const float> initial,
    const ReplicatedStoreOptions& options) {
  if (dp == nullptr) return absl::InvalidArgumentError("ReplicatedStore: null communicator");
  if (specs.empty()) return absl::InvalidArgumentError("ReplicatedStore: no parameters");
  if (options.compute_dtype != DType::kF32 && options.compute_dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReplicatedStore: compute_dtype ", DTypeName(options.compute_dtype),
                     " is neither f32 nor bf16"));
  }
  if (options.adamw_threads < 1 || options.adamw_threads > 256) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: adamw_threads ",
                                                   options.adamw_threads, " not in [1, 256]"));
  }
  if (options.grads_per_step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: grads_per_step ",
                                                   options.grads_per_step, " is below 1"));
  }
  if (options.bucket_cap_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: bucket_cap_bytes ",
                                                   options.bucket_cap_bytes, " is negative"));
  }
  auto store = std::unique_ptr<ReplicatedStore>(new ReplicatedStore(std::move(specs), dp, options));
  store->offsets_.push_back(0);
  for (const ParamSpec& spec : store->specs_) {
    int64_t numel = 1;
    for (const int64_t extent : spec.shape) {
      if (extent < 0) {
        return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: parameter \"", spec.name,
                                                       "\" has a negative extent ", extent));
      }
      numel *= extent;
    }
    store->offsets_.push_back(store->offsets_.back() + numel);
    LOOM_ASSIGN_OR_RETURN(AdamWState state, AdamWState::Create(numel));
    store->states_.push_back(std::move(state));
  }
  store->bucket_first_ = AllReduceBuckets(store->specs_, store->offsets_, options.bucket_cap_bytes);
  const int buckets = static_cast<int>(store->bucket_first_.size()) - 1;
  for (int b = 0; b < buckets; ++b) {
    for (int p = store->bucket_first_[static_cast<size_t>(b)];
         p < store->bucket_first_[static_cast<size_t>(b) + 1]; ++p) {
      store->bucket_of_.push_back(b);
    }
  }
  store->grad_adds_.assign(store->specs_.size(), 0);
  store->bucket_enqueued_.assign(static_cast<size_t>(buckets), false);
  store->bucket_ticket_.assign(static_cast<size_t>(buckets), 0);
  store->bucket_waiting_.resize(static_cast<size_t>(buckets));
  for (int b = 0; b < buckets; ++b) {
    store->bucket_waiting_[static_cast<size_t>(b)] =
        store->bucket_first_[static_cast<size_t>(b) + 1] - store->bucket_first_[static_cast<size_t>(b)];
  }
  const int64_t total = store->offsets_.back();
  if (static_cast<int64_t>(initial.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: ", initial.size(),
                                                   " initial values for ", total,
                                                   " parameter elements"));
  }
  store->weights_.assign(initial.begin(), initial.end());
  if (options.compute_dtype == DType::kBF16) {
    store->masters_.assign(initial.begin(), initial.end());
    store->weights16_.resize(initial.size());
    for (size_t i = 0; i < initial.size(); ++i) {
      store->weights16_[i] = ToBFloat16(initial[i]);
      store->weights_[i] = ToFloat(store->weights16_[i]);
    }
  }
  // The bucket is communication memory: shm peers map it, so the all-reduce reads
  // it without a kernel copy.
  LOOM_ASSIGN_OR_RETURN(store->gradient_memory_,
                        dp->AllocateBuffer(static_cast<size_t>(total) * sizeof(float)));
  store->gradient_ = store->gradient_memory_.As<float>();
  return store;
}

absl::Status ReplicatedStore::CheckParam(const char* call, int param) const {
  if (param < 0 || param >= num_params()) {
    return absl::OutOfRangeError(absl::StrCat("ReplicatedStore: ", call, "(", param,
                                              "): the store has ", num_params(), " parameters"));
  }
  return absl::OkStatus();
}

absl::Span<float> ReplicatedStore::Slice(absl::Span<float> flat, int param) const {
  const size_t p = static_cast<size_t>(param);
  return flat.subspan(static_cast<size_t>(offsets_[p]),
                      static_cast<size_t>(offsets_[p + 1] - offsets_[p]));
}

absl::Span<const float> ReplicatedStore::Slice(absl::Span<const float> flat, int param) const {
  const size_t p = static_cast<size_t>(param);
  return flat.subspan(static_cast<size_t>(offsets_[p]),
                      static_cast<size_t>(offsets_[p + 1] - offsets_[p]));
}

absl::Status ReplicatedStore::BeginParameterPass(ParameterPass pass) {
  if (in_pass_) {
    return absl::FailedPreconditionError(absl::StrCat("ReplicatedStore: BeginParameterPass(",
                                                      PassName(pass), ") inside a ",
                                                      PassName(pass_), " pass"));
  }
  in_pass_ = true;
  pass_ = pass;
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> ReplicatedStore::Acquire(int param) {
  LOOM_RETURN_IF_ERROR(CheckParam("Acquire", param));
  if (!in_pass_ || pass_ == ParameterPass::kGradients) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ReplicatedStore: Acquire(", param, " \"", spec(param).name, "\") ",
        in_pass_ ? "in a kGradients pass, which lends nothing" : "outside a pass"));
  }
  return Slice(absl::MakeConstSpan(weights_), param);
}

absl::StatusOr<absl::Span<const BFloat16>> ReplicatedStore::AcquireBf16(int param) {
  LOOM_RETURN_IF_ERROR(Acquire(param).status());
  if (weights16_.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        "ReplicatedStore: AcquireBf16(", param, "): the store computes in f32, no bf16 copy"));
  }
  const size_t p = static_cast<size_t>(param);
  return absl::MakeConstSpan(weights16_).subspan(
      static_cast<size_t>(offsets_[p]), static_cast<size_t>(offsets_[p + 1] - offsets_[p]));
}

absl::Status ReplicatedStore::AddGrad(int param, absl::Span<const float> grad) {
  LOOM_RETURN_IF_ERROR(CheckParam("AddGrad", param));
  const bool takes = in_pass_ &&
                     (pass_ == ParameterPass::kBackward || pass_ == ParameterPass::kGradients);
  if (!takes) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicatedStore: AddGrad(", param, " \"", spec(param).name, "\") ",
                     in_pass_ ? absl::StrCat("in a ", PassName(pass_), " pass") : "outside a pass",
                     "; gradients come in kBackward or kGradients passes"));
  }
  if (reduced_) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicatedStore: AddGrad(", param, " \"", spec(param).name,
                     "\") after ReduceGradients and before Step"));
  }
  const absl::Span<float> into = Slice(gradient_, param);
  if (grad.size() != into.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: AddGrad(", param, " \"",
                                                   spec(param).name, "\") got ", grad.size(),
                                                   " elements for ", into.size()));
  }
  int64_t& adds = grad_adds_[static_cast<size_t>(param)];
  if (options_.reducer != nullptr && adds >= options_.grads_per_step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ReplicatedStore: AddGrad(", param, " \"", spec(param).name, "\") a ", adds + 1,
        "th time this step, past grads_per_step ", options_.grads_per_step,
        ": its bucket's all-reduce has started"));
  }
  // On the rank's threads (core/parallel_for.h): each element is one addition, so the
  // bits do not depend on the split.
  // Raw pointers: Debian's Abseil is hardened, so Span's operator[] checks every
  // index and keeps the loop scalar.
  float* const dst = into.data();
  const float* const src = grad.data();
  ParallelForEach(static_cast<int64_t>(into.size()), kElementwiseGrain,
                  [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] += src[i];
  });
  if (++adds == options_.grads_per_step && options_.reducer != nullptr) {
    const int bucket = bucket_of_[static_cast<size_t>(param)];
    if (--bucket_waiting_[static_cast<size_t>(bucket)] == 0) EnqueueBucket(bucket);
  }
  return absl::OkStatus();
}

void ReplicatedStore::EnqueueBucket(int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  bucket_enqueued_[b] = true;
  const int64_t begin = offsets_[static_cast<size_t>(bucket_first_[b])];
  const int64_t end = offsets_[static_cast<size_t>(bucket_first_[b + 1])];
  if (end == begin || dp_->size() == 1) return;
  last_ticket_ = options_.reducer->Enqueue(
      gradient_.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
  bucket_ticket_[b] = last_ticket_;
}

void ReplicatedStore::EnqueueRemainingBuckets() {
  // The buckets whose gradients did not all come (fewer backward passes than
  // grads_per_step, or parameters without one), in bucket order on every rank.
  for (int b = 0; b < num_buckets(); ++b) {
    if (!bucket_enqueued_[static_cast<size_t>(b)]) EnqueueBucket(b);
  }
}

absl::Status ReplicatedStore::WaitInStep(int64_t ticket) {
  if (ticket == 0) return absl::OkStatus();
  const absl::Time start = absl::Now();
  const absl::Status status = options_.reducer->Wait(ticket);
  step_wait_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
  return status;
}

void ReplicatedStore::RoundToBf16(int64_t begin, int64_t end) {
  if (options_.compute_dtype != DType::kBF16) return;
  for (int64_t i = begin; i < end; ++i) {
    gradient_[static_cast<size_t>(i)] = ToFloat(ToBFloat16(gradient_[static_cast<size_t>(i)]));
  }
}

absl::Status ReplicatedStore::EndPass() {
  if (!in_pass_) return absl::FailedPreconditionError("ReplicatedStore: EndPass outside a pass");
  in_pass_ = false;
  return absl::OkStatus();
}

absl::Status ReplicatedStore::ReduceGradients() {
  if (in_pass_) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicatedStore: ReduceGradients inside a ", PassName(pass_), " pass"));
  }
  if (reduced_) return absl::OkStatus();
  if (options_.reducer != nullptr) {
    EnqueueRemainingBuckets();
    LOOM_RETURN_IF_ERROR(options_.reducer->Wait(last_ticket_));
  } else if (dp_->size() > 1) {
    LOOM_RETURN_IF_ERROR(dp_->AllReduce(gradient_, ReduceOp::kAvg));
  }
  // bf16: the average of the f32 sums is rounded once into the bf16 gradient.
  RoundToBf16(0, total_numel());
  reduced_ = true;
  return absl::OkStatus();
}

absl::StatusOr<double> ReplicatedStore::ReducedGradSquaredNorm(
    absl::Span<const float> param_weight) const {
  if (param_weight.size() != specs_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: ReducedGradSquaredNorm got ",
                                                   param_weight.size(), " weights for ",
                                                   specs_.size(), " parameters"));
  }
  if (!reduced_) {
    return absl::FailedPreconditionError(
        "ReplicatedStore: ReducedGradSquaredNorm before ReduceGradients");
  }
  // Every dp rank holds the same averaged gradient: rank 0 counts it.
  if (dp_->rank() != 0) return 0.0;
  double sum = 0;
  for (int p = 0; p < num_params(); ++p) {
    double part = 0;
    for (const float g : Slice(absl::MakeConstSpan(gradient_), p)) {
      part += static_cast<double>(g) * static_cast<double>(g);
    }
    sum += part * static_cast<double>(param_weight[static_cast<size_t>(p)]);
  }
  return sum;
}

void ReplicatedStore::ZeroGradient() {
  std::fill(gradient_.begin(), gradient_.end(), 0.0f);
  reduced_ = false;
  std::fill(grad_adds_.begin(), grad_adds_.end(), 0);
  std::fill(bucket_enqueued_.begin(), bucket_enqueued_.end(), false);
  std::fill(bucket_ticket_.begin(), bucket_ticket_.end(), 0);
  for (size_t b = 0; b < bucket_waiting_.size(); ++b) {
    bucket_waiting_[b] = bucket_first_[b + 1] - bucket_first_[b];
  }
}

absl::Status ReplicatedStore::Step(const AdamWHyper& hyper) {
  if (in_pass_) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicatedStore: Step inside a ", PassName(pass_), " pass"));
  }
  if (reduced_ || options_.reducer == nullptr) {
    if (!reduced_) {
      const absl::Time start = absl::Now();
      const absl::Status status = ReduceGradients();
      step_wait_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
      LOOM_RETURN_IF_ERROR(status);
    }
    LOOM_RETURN_IF_ERROR(StepParameters(hyper, 0, num_params()));
    ZeroGradient();
    return absl::OkStatus();
  }
  // Overlapped: each bucket is stepped as soon as its own all-reduce is done, in
  // the order they were enqueued, while the later ones still run (buckets without
  // a ticket, empty or at dp 1, first). AdamW is elementwise, so the bits are
  // those of stepping after one wait for everything.
  EnqueueRemainingBuckets();
  std::vector<int> order(static_cast<size_t>(num_buckets()));
  for (int b = 0; b < num_buckets(); ++b) order[static_cast<size_t>(b)] = b;
  std::stable_sort(order.begin(), order.end(), [this](int a, int b) {
    return bucket_ticket_[static_cast<size_t>(a)] < bucket_ticket_[static_cast<size_t>(b)];
  });
  for (const int b : order) {
    const size_t bucket = static_cast<size_t>(b);
    LOOM_RETURN_IF_ERROR(WaitInStep(bucket_ticket_[bucket]));
    const int first = bucket_first_[bucket];
    const int end = bucket_first_[bucket + 1];
    RoundToBf16(offsets_[static_cast<size_t>(first)], offsets_[static_cast<size_t>(end)]);
    LOOM_RETURN_IF_ERROR(StepParameters(hyper, first, end));
  }
  ZeroGradient();
  return absl::OkStatus();
}

absl::Status ReplicatedStore::StepParameters(const AdamWHyper& hyper, int first, int end) {
  AdamWOptions adam;
  adam.threads = options_.adamw_threads;
  const bool bf16 = options_.compute_dtype == DType::kBF16;
  for (int p = first; p < end; ++p) {
    const absl::Span<const float> grad = Slice(absl::MakeConstSpan(gradient_), p);
    const absl::Span<float> weights = Slice(absl::MakeSpan(weights_), p);
    if (!bf16) {
      LOOM_RETURN_IF_ERROR(AdamWStep(hyper, weights, grad, states_[static_cast<size_t>(p)], adam));
      continue;
    }
    const absl::Span<BFloat16> half = absl::MakeSpan(weights16_).subspan(
        static_cast<size_t>(offsets_[static_cast<size_t>(p)]), weights.size());
    LOOM_RETURN_IF_ERROR(AdamWStep(hyper, Slice(absl::MakeSpan(masters_), p), grad,
                                   states_[static_cast<size_t>(p)], adam, half));
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = ToFloat(half[i]);
  }
  return absl::OkStatus();
}

absl::Status ReplicatedStore::StepWith(const ExternalStep& step) {
  if (!step) return absl::InvalidArgumentError("ReplicatedStore: StepWith given a null step");
  if (options_.compute_dtype != DType::kF32) {
    return absl::FailedPreconditionError(
        "ReplicatedStore: StepWith needs f32 compute (the weights are the master)");
  }
  LOOM_RETURN_IF_ERROR(ReduceGradients());
  std::vector<absl::Span<float>> weights;
  for (int p = 0; p < num_params(); ++p) weights.push_back(Slice(absl::MakeSpan(weights_), p));
  LOOM_RETURN_IF_ERROR(step(weights, gradient_));
  ZeroGradient();
  return absl::OkStatus();
}

absl::Status ReplicatedStore::ReadState(int param, absl::Span<float> master, absl::Span<float> m,
                                        absl::Span<float> v) const {
  LOOM_RETURN_IF_ERROR(CheckParam("ReadState", param));
  const absl::Span<const float> from =
      Slice(absl::MakeConstSpan(masters_.empty() ? weights_ : masters_), param);
  if (master.size() != from.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: ReadState(", param,
                                                   ") given ", master.size(), " elements for ",
                                                   from.size()));
  }
  std::copy(from.begin(), from.end(), master.begin());
  return states_[static_cast<size_t>(param)].ReadMoments(m, v);
}

absl::Status ReplicatedStore::WriteState(int param, absl::Span<const float> master,
                                         absl::Span<const float> m, absl::Span<const float> v) {
  LOOM_RETURN_IF_ERROR(CheckParam("WriteState", param));
  if (in_pass_) {
    return absl::FailedPreconditionError(
        absl::StrCat("ReplicatedStore: WriteState inside a ", PassName(pass_), " pass"));
  }
  const absl::Span<float> weights = Slice(absl::MakeSpan(weights_), param);
  if (master.size() != weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ReplicatedStore: WriteState(", param,
                                                   ") given ", master.size(), " elements for ",
                                                   weights.size()));
  }
  LOOM_RETURN_IF_ERROR(states_[static_cast<size_t>(param)].WriteMoments(m, v));
  if (masters_.empty()) {
    std::copy(master.begin(), master.end(), weights.begin());
    return absl::OkStatus();
  }
  // bf16: the weights are the master's compute copy, as AdamW writes it.
  std::copy(master.begin(), master.end(), Slice(absl::MakeSpan(masters_), param).begin());
  const absl::Span<BFloat16> half = absl::MakeSpan(weights16_).subspan(
      static_cast<size_t>(offsets_[static_cast<size_t>(param)]), weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    half[i] = ToBFloat16(master[i]);
    weights[i] = ToFloat(half[i]);
  }
  return absl::OkStatus();
}

int64_t ReplicatedStore::StateBytes() const {
  int64_t bytes = static_cast<int64_t>((weights_.size() + masters_.size() + gradient_.size()) *
                                           sizeof(float) +
                                       weights16_.size() * sizeof(BFloat16));
  for (const AdamWState& state : states_) bytes += static_cast<int64_t>(state.size_bytes());
  return bytes;
}

}  // namespace loom
