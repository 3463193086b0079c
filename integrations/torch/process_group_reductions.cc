// LoomProcessGroup's reductions: allreduce, allreduce_coalesced, reduce,
// reduce_scatter and _reduce_scatter_base.
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"
#include "integrations/torch/internal/raise.h"
#include "integrations/torch/process_group.h"
#include "integrations/torch/call_args.h"

namespace loom {
namespace pytorch {

using pytorch_internal::RaiseIfError;
using pytorch_internal::ValueOrRaise;

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  RaiseIfError(CheckCount(tensors.size(), 1, "all_reduce", "tensor"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "all_reduce", "tensor"));
  const BufferView view = ValueOrRaise(ReductionView(tensor, "all_reduce"));
  const ReduceOp op = ValueOrRaise(LoomReduceOp(opts.reduceOp, "all_reduce"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::ALLREDUCE, "loom:all_reduce", "all_reduce",
                 absl::StrCat(DescribeTensor(tensor), ", ", ReduceOpName(op)), {{}, {tensor}},
                 opts.timeout, [this, view, op, timeout](LoomWork&) {
                   return connection_.communicator->AllReduce(view, view, op, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty()) {
    RaiseIfError(absl::InvalidArgumentError("loom all_reduce_coalesced: no tensors given"));
  }
  RaiseIfError(CheckAllDenseCpu(tensors, tensors[0].scalar_type(), "all_reduce_coalesced", "tensor"));
  const ReduceOp op = ValueOrRaise(LoomReduceOp(opts.reduceOp, "all_reduce_coalesced"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  const DType dtype = ValueOrRaise(ReductionView(tensors[0], "all_reduce_coalesced")).dtype();
  int64_t total = 0;
  for (const at::Tensor& t : tensors) total += t.numel();
  // One all-reduce of the tensors laid end to end: one call's latency for them all.
  return Enqueue(c10d::OpType::ALLREDUCE_COALESCED, "loom:all_reduce_coalesced",
                 "all_reduce_coalesced",
                 absl::StrCat(tensors.size(), " tensors of ", DTypeName(dtype), ", ", total,
                              " elements, ", ReduceOpName(op)),
                 {{}, tensors}, opts.timeout, [this, dtype, op, timeout](LoomWork& work) {
                   const at::Tensor flat = Flatten(work.outputs());
                   const BufferView view(static_cast<std::byte*>(flat.data_ptr()),
                                         static_cast<size_t>(flat.numel()), dtype);
                   absl::Status status =
                       connection_.communicator->AllReduce(view, view, op, CallWithin(timeout));
                   if (status.ok()) Unflatten(flat, work.outputs());
                   return status;
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  RaiseIfError(CheckCount(tensors.size(), 1, "reduce", "tensor"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "reduce", "tensor"));
  const BufferView view = ValueOrRaise(ReductionView(tensor, "reduce"));
  const ReduceOp op = ValueOrRaise(LoomReduceOp(opts.reduceOp, "reduce"));
  RaiseIfError(CheckRank(opts.rootRank, size_, "reduce", "root"));
  const int root = static_cast<int>(opts.rootRank);
  const absl::Duration timeout = CallTimeout(opts.timeout);
  // Only the root's tensor is written; the others keep their values.
  const BufferView output = rank_ == root ? view : BufferView(nullptr, 0, view.dtype());
  return Enqueue(c10d::OpType::REDUCE, "loom:reduce", "reduce",
                 absl::StrCat(DescribeTensor(tensor), ", ", ReduceOpName(op), ", root ", root),
                 {{}, {tensor}}, opts.timeout, [this, view, output, op, root, timeout](LoomWork&) {
                   return connection_.communicator->Reduce(view, output, op, root, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const at::Tensor out = output;
  const at::Tensor in = input;
  RaiseIfError(CheckDenseCpu(out, "reduce_scatter_tensor", "output tensor"));
  RaiseIfError(CheckDenseCpu(in, "reduce_scatter_tensor", "input tensor"));
  RaiseIfError(CheckSameDType(in, out, "reduce_scatter_tensor"));
  if (in.numel() != out.numel() * size_) {
    RaiseIfError(absl::InvalidArgumentError(absl::StrCat(
        "loom reduce_scatter_tensor: input has ", in.numel(), " elements, expected ", size_,
        " ranks x ", out.numel(), " (the output's) = ", out.numel() * size_)));
  }
  const BufferView in_view = ValueOrRaise(ReductionView(in, "reduce_scatter_tensor"));
  const BufferView out_view = ValueOrRaise(ReductionView(out, "reduce_scatter_tensor"));
  const ReduceOp op = ValueOrRaise(LoomReduceOp(opts.reduceOp, "reduce_scatter_tensor"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "loom:reduce_scatter_tensor",
                 "reduce_scatter_tensor",
                 absl::StrCat(DescribeTensor(out), " per rank, ", ReduceOpName(op)), {{in}, {out}},
                 opts.timeout, [this, in_view, out_view, op, timeout](LoomWork&) {
                   return connection_.communicator->ReduceScatter(in_view, out_view, op,
                                                                  CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  RaiseIfError(CheckCount(outputs.size(), 1, "reduce_scatter", "output tensor"));
  RaiseIfError(CheckCount(inputs.size(), 1, "reduce_scatter", "input list"));
  const at::Tensor out = outputs[0];
  const std::vector<at::Tensor> ins = inputs[0];
  RaiseIfError(CheckDenseCpu(out, "reduce_scatter", "output tensor"));
  RaiseIfError(CheckCount(ins.size(), size_, "reduce_scatter", "input tensors (one per rank)"));
  RaiseIfError(CheckAllDenseCpu(ins, out.scalar_type(), "reduce_scatter", "input tensor"));
  RaiseIfError(CheckAllNumel(ins, out.numel(), "reduce_scatter", "input tensor"));
  const BufferView out_view = ValueOrRaise(ReductionView(out, "reduce_scatter"));
  const ReduceOp op = ValueOrRaise(LoomReduceOp(opts.reduceOp, "reduce_scatter"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::REDUCE_SCATTER, "loom:reduce_scatter", "reduce_scatter",
                 absl::StrCat(DescribeTensor(out), " per rank, ", ReduceOpName(op)), {ins, {out}},
                 opts.timeout, [this, out_view, op, timeout](LoomWork& work) {
                   const at::Tensor flat = Flatten(work.inputs());
                   const BufferView in_view(static_cast<std::byte*>(flat.data_ptr()),
                                            static_cast<size_t>(flat.numel()), out_view.dtype());
                   return connection_.communicator->ReduceScatter(in_view, out_view, op,
                                                                  CallWithin(timeout));
                 });
}

}  // namespace pytorch
}  // namespace loom
