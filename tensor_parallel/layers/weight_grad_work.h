// WeightGradWork: what a layer's weight gradient needs from one backward pass,
// taken out of the layer so that the layer can run other forwards before the
// weight gradient is computed.
//
// Zero-bubble pipeline schedules split a backward pass B into I (the input
// gradient, which the previous stage waits for) and W (the weight gradient, which
// nobody waits for and which fills what would be bubbles). For a linear layer
// y = x W^T + b with output gradient g, I is dx = g W and W is dW = g^T x,
// db = sum of g's rows: W needs x and g, and nothing else. Each layer's
// BackwardInput computes dx, moves its saved forward input and the output
// gradient into a WeightGradWork and forgets the forward; its BackwardWeight(work)
// later sets weight_grad() (and bias_grad()) to bitwise what Backward would have.
//
// Example (a column-parallel layer, two microbatches in flight):
//   fc.Forward(x0);
//   WeightGradWork w0;
//   LOOM_ASSIGN_OR_RETURN(Tensor dx0, fc.BackwardInput(dy0, w0));  // no dW yet
//   fc.Forward(x1);                                               // w0 stays valid
//   LOOM_RETURN_IF_ERROR(fc.BackwardWeight(w0));                  // dW of microbatch 0
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_WEIGHT_GRAD_WORK_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_WEIGHT_GRAD_WORK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/half.h"

namespace loom {

struct WeightGradWork {
  // Linear layers: the forward input as the weight product used it, [rows, in]
  // (gathered under sequence parallelism).
  AlignedBuffer<float> input;
  // Embeddings: the ids looked up, one per row.
  std::vector<int64_t> ids;
  // The output gradient this rank's weight needs, [rows, out] (this rank's
  // features for a column-parallel layer, gathered under sequence parallelism).
  // An AlignedBuffer: the LM head's is [tokens, vocab], whose large block the job's
  // core/large_block_cache.h reuses (a std::vector's glibc maps and unmaps anew).
  AlignedBuffer<float> grad_output;
  // A linear layer that multiplies in bf16 keeps its input and output gradient only
  // as their bf16 rounding (what its weight product would round them to, in half
  // the memory): these, with `input` and `grad_output` then empty.
  std::vector<BFloat16> input_bf16, grad_output_bf16;
  // With grad_output_bf16: the bias gradient, summed from the f32 output gradient
  // before it was rounded (empty without a bias, and when grad_output is f32).
  std::vector<float> bias_grad;
  int64_t rows = 0;

  // bytes returns the memory held until BackwardWeight.
  size_t bytes() const {
    return input.size_bytes() + ids.capacity() * sizeof(int64_t) +
           grad_output.size_bytes() +
           (input_bf16.capacity() + grad_output_bf16.capacity()) * sizeof(BFloat16) +
           bias_grad.capacity() * sizeof(float);
  }
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_WEIGHT_GRAD_WORK_H_
