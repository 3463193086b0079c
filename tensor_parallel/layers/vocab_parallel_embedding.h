// VocabParallelEmbedding: an embedding table [vocab, hidden] split by rows
// (vocabulary) across the tensor-parallel group, as in Megatron-LM. Each rank looks
// up the ids that fall in its vocabulary range, writes zeros for the others (the
// mask), and the partial results are all-reduced, so each id's row comes from the
// one rank that owns it. Backward scatters the output gradient into the local rows;
// it needs no communication.
//
// Sequence parallelism (options.sequence_parallel): the partial results are
// reduce-scattered along dimension 0 of the ids (the sequence) instead, so each rank
// gets its piece ShardExtentOf(ids_shape[0], tp, rank, rule); the backward pass
// all-gathers the output gradient first.
//
// Example (tp = 2, vocab = 5, hidden = 3; rank 0 owns ids 0..2, rank 1 ids 3..4):
//   LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding emb,
//                         VocabParallelEmbedding::Create(table /*[5,3]*/, tp, {}));
//   std::vector<int64_t> ids = {4, 0, 2};
//   LOOM_ASSIGN_OR_RETURN(Tensor y, emb.Forward(ids));   // [3,3]: rows 4, 0, 2
//   LOOM_RETURN_IF_ERROR(emb.Backward(dy /*[3,3]*/));    // emb.weight_grad(): [3,3] / [2,3]
//   emb.Forward({7});   // InvalidArgument: "VocabParallelEmbedding: id 7 at position 0
//                       //   is outside the vocabulary [0, 5)"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {

struct VocabParallelEmbeddingOptions {
  bool sequence_parallel = false;
  // How the vocabulary (and the sequence, under sequence parallelism) is split.
  ShardRule rule = ShardRule::kBalanced;
  // Storage of the table shard: f32 or bf16.
  DType weight_dtype = DType::kF32;
};

class VocabParallelEmbedding {
 public:
  // Create takes this rank's rows of `full_table` [vocab, hidden]. InvalidArgument
  // naming the shape for a table that is not 2-D, or a storage dtype other than
  // f32/bf16.
  static absl::StatusOr<VocabParallelEmbedding> Create(
      const Tensor& full_table, Communicator& tp, const VocabParallelEmbeddingOptions& options);

  VocabParallelEmbedding(VocabParallelEmbedding&&) = default;
  VocabParallelEmbedding& operator=(VocabParallelEmbedding&&) = default;

  // Forward returns the rows of `ids` (of shape `ids_shape`; empty means
  // {ids.size()}), shape ids_shape + [hidden], or this rank's piece of dimension 0
  // under sequence parallelism. Every rank passes the same ids. InvalidArgument
  // naming the id and its position for an id outside [0, vocab), or naming both
  // for a shape whose element count differs from ids.size(); otherwise a
  // collective's error.
  absl::StatusOr<Tensor> Forward(absl::Span<const int64_t> ids,
                                 absl::Span<const int64_t> ids_shape = {});

  // Backward takes dL/dy (the shape Forward returned) and sets weight_grad()
  // [vocab_local, hidden] (repeated ids accumulate). FailedPrecondition before any
  // Forward; InvalidArgument naming both shapes for a mismatched gradient;
  // otherwise a collective's error.
  absl::Status Backward(const Tensor& grad_output);

  // Split backward (weight_grad_work.h). The ids have no gradient, so all of an
  // embedding's backward is weight gradient: BackwardInput does the communication
  // part (the all-gather under sequence parallelism), moves the ids and the output
  // gradient into `work` and forgets the forward; BackwardWeight sets weight_grad()
  // from a work this layer filled, bitwise as Backward would have, even after other
  // Forwards. Errors as Backward; BackwardWeight is InvalidArgument naming the sizes
  // for a work of another shape.
  absl::Status BackwardInput(const Tensor& grad_output, WeightGradWork& work);
  absl::Status BackwardWeight(const WeightGradWork& work);

  const Tensor& weight() const { return weight_; }
  const Tensor& weight_grad() const { return weight_grad_; }
  // The vocabulary rows this rank owns.
  ShardExtent vocab_extent() const { return extent_; }

  // Borrowed weights (ZeRO-3 and parameter offload), as ColumnParallelLinear's:
  // BorrowWeights makes Forward look rows up in `table` (f32, this rank's
  // vocab_extent() rows) until ReturnWeights; DropOwnedWeights frees the layer's
  // own shard for good. InvalidArgument naming the counts for another size.
  absl::Status BorrowWeights(absl::Span<const float> table);
  void ReturnWeights() { borrowed_ = {false, borrowed_.owned_dropped, {}, {}, {}}; }
  void DropOwnedWeights() {
    weight_ = Tensor();
    borrowed_.owned_dropped = true;
  }
  // ReleaseWeightGradients frees weight_grad().
  void ReleaseWeightGradients() { weight_grad_ = Tensor(); }

  // saved_activation_bytes returns the bytes Forward keeps for Backward (the ids).
  // ReleaseActivations frees them; Backward then returns FailedPrecondition until
  // the next Forward.
  size_t saved_activation_bytes() const { return state_.bytes(); }
  void ReleaseActivations() { state_ = ForwardState(); }

  // ForwardState: what one Forward keeps for its Backward, a microbatch's context
  // (TakeForwardState / RestoreForwardState as ColumnParallelLinear's).
  struct ForwardState {
    std::vector<int64_t> ids, ids_shape, output_shape;
    bool valid = false;
    size_t bytes() const { return ids.capacity() * sizeof(int64_t); }
  };
  ForwardState TakeForwardState() { return std::exchange(state_, ForwardState()); }
  void RestoreForwardState(ForwardState state) { state_ = std::move(state); }

  // comm_tally returns the collective payloads this layer has issued since Create.
  const CommTally& comm_tally() const { return tally_; }

 private:
  VocabParallelEmbedding() = default;

  // WholeGradient checks grad_output and returns the output gradient of every id:
  // a view of grad_output, or of `storage` when it was gathered (sequence
  // parallelism). ScatterGradient sets weight_grad() from ids and their gradient
  // rows.
  absl::StatusOr<absl::Span<const float>> WholeGradient(const Tensor& grad_output,
                                                        std::vector<float>& storage);
  absl::Status ScatterGradient(absl::Span<const int64_t> ids, absl::Span<const float> g);

  Communicator* tp_ = nullptr;
  CommTally tally_;
  int rank_ = 0;
  VocabParallelEmbeddingOptions options_;
  int64_t vocab_ = 0;
  int64_t hidden_ = 0;
  ShardExtent extent_;
  Tensor weight_, weight_grad_;
  tp_layers_internal::BorrowedWeights borrowed_;
  ForwardState state_;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_EMBEDDING_H_
