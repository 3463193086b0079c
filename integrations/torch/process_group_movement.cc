// LoomProcessGroup's calls that move data without reducing it: broadcast, allgather,
// _allgather_base, gather, scatter, alltoall_base, alltoall, and barrier. Tensors of
// any dtype travel (as bytes when Loom does not know the dtype).
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/buffer_view.h"
#include "integrations/torch/call_args.h"
#include "integrations/torch/internal/raise.h"
#include "integrations/torch/process_group.h"

namespace loom {
namespace pytorch {

using pytorch_internal::RaiseIfError;
using pytorch_internal::ValueOrRaise;

namespace {

// A new contiguous tensor of `count` elements like `like` (dtype, device).
at::Tensor Scratch(const at::Tensor& like, int64_t count) { return at::empty({count}, like.options()); }

}  // namespace

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  RaiseIfError(CheckCount(tensors.size(), 1, "broadcast", "tensor"));
  RaiseIfError(CheckRank(opts.rootRank, size_, "broadcast", "root"));
  RaiseIfError(CheckRank(opts.rootTensor, 1, "broadcast", "root tensor"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "broadcast", "tensor"));
  const BufferView view = MovementView(tensor);
  const int root = static_cast<int>(opts.rootRank);
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::BROADCAST, "loom:broadcast", "broadcast",
                 absl::StrCat(DescribeTensor(tensor), ", root ", root), {{}, {tensor}},
                 opts.timeout, [this, view, root, timeout](LoomWork&) {
                   return connection_.communicator->Broadcast(view, view, root, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  const at::Tensor out = output;
  const at::Tensor in = input;
  RaiseIfError(CheckDenseCpu(out, "all_gather_into_tensor", "output tensor"));
  RaiseIfError(CheckDenseCpu(in, "all_gather_into_tensor", "input tensor"));
  RaiseIfError(CheckSameDType(in, out, "all_gather_into_tensor"));
  if (out.numel() != in.numel() * size_) {
    RaiseIfError(absl::InvalidArgumentError(absl::StrCat(
        "loom all_gather_into_tensor: output has ", out.numel(), " elements, expected ", size_,
        " ranks x ", in.numel(), " (the input's) = ", in.numel() * size_)));
  }
  const BufferView in_view = MovementView(in);
  const BufferView out_view = MovementView(out);
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::_ALLGATHER_BASE, "loom:all_gather_into_tensor",
                 "all_gather_into_tensor", absl::StrCat(DescribeTensor(in), " per rank"),
                 {{in}, {out}}, opts.timeout, [this, in_view, out_view, timeout](LoomWork&) {
                   return connection_.communicator->AllGather(in_view, out_view, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  RaiseIfError(CheckCount(inputs.size(), 1, "all_gather", "input tensor"));
  RaiseIfError(CheckCount(outputs.size(), 1, "all_gather", "output list"));
  const at::Tensor in = inputs[0];
  const std::vector<at::Tensor> outs = outputs[0];
  RaiseIfError(CheckDenseCpu(in, "all_gather", "input tensor"));
  RaiseIfError(CheckCount(outs.size(), size_, "all_gather", "output tensors (one per rank)"));
  RaiseIfError(CheckAllDenseCpu(outs, in.scalar_type(), "all_gather", "output tensor"));
  RaiseIfError(CheckAllNumel(outs, in.numel(), "all_gather", "output tensor"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::ALLGATHER, "loom:all_gather", "all_gather",
                 absl::StrCat(DescribeTensor(in), " per rank"), {{in}, outs}, opts.timeout,
                 [this, timeout](LoomWork& work) {
                   const at::Tensor& input = work.inputs()[0];
                   const at::Tensor flat = Scratch(input, input.numel() * size_);
                   absl::Status status = connection_.communicator->AllGather(
                       MovementView(input), MovementView(flat), CallWithin(timeout));
                   if (status.ok()) Unflatten(flat, work.outputs());
                   return status;
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  RaiseIfError(CheckCount(inputs.size(), 1, "gather", "input tensor"));
  RaiseIfError(CheckRank(opts.rootRank, size_, "gather", "root"));
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor in = inputs[0];
  RaiseIfError(CheckDenseCpu(in, "gather", "input tensor"));
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    RaiseIfError(CheckCount(outputs.size(), 1, "gather", "output list on the root"));
    outs = outputs[0];
    RaiseIfError(CheckCount(outs.size(), size_, "gather", "output tensors on the root (one per rank)"));
    RaiseIfError(CheckAllDenseCpu(outs, in.scalar_type(), "gather", "output tensor"));
    RaiseIfError(CheckAllNumel(outs, in.numel(), "gather", "output tensor"));
  } else {
    RaiseIfError(CheckCount(outputs.size(), 0, "gather", "output lists off the root"));
  }
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::GATHER, "loom:gather", "gather",
                 absl::StrCat(DescribeTensor(in), " per rank, root ", root), {{in}, outs},
                 opts.timeout, [this, root, timeout](LoomWork& work) {
                   const at::Tensor& input = work.inputs()[0];
                   const at::Tensor flat = Scratch(input, rank_ == root ? input.numel() * size_ : 0);
                   absl::Status status = connection_.communicator->Gather(
                       MovementView(input), MovementView(flat), root, CallWithin(timeout));
                   if (status.ok() && rank_ == root) Unflatten(flat, work.outputs());
                   return status;
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  RaiseIfError(CheckCount(outputs.size(), 1, "scatter", "output tensor"));
  RaiseIfError(CheckRank(opts.rootRank, size_, "scatter", "root"));
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor out = outputs[0];
  RaiseIfError(CheckDenseCpu(out, "scatter", "output tensor"));
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    RaiseIfError(CheckCount(inputs.size(), 1, "scatter", "input list on the root"));
    ins = inputs[0];
    RaiseIfError(CheckCount(ins.size(), size_, "scatter", "input tensors on the root (one per rank)"));
    RaiseIfError(CheckAllDenseCpu(ins, out.scalar_type(), "scatter", "input tensor"));
    RaiseIfError(CheckAllNumel(ins, out.numel(), "scatter", "input tensor"));
  } else {
    RaiseIfError(CheckCount(inputs.size(), 0, "scatter", "input lists off the root"));
  }
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::SCATTER, "loom:scatter", "scatter",
                 absl::StrCat(DescribeTensor(out), " per rank, root ", root), {ins, {out}},
                 opts.timeout, [this, root, timeout](LoomWork& work) {
                   const at::Tensor& output = work.outputs()[0];
                   const at::Tensor flat =
                       rank_ == root ? Flatten(work.inputs()) : Scratch(output, 0);
                   return connection_.communicator->Scatter(MovementView(flat), MovementView(output),
                                                            root, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const at::Tensor out = output;
  const at::Tensor in = input;
  RaiseIfError(CheckDenseCpu(out, "all_to_all_single", "output tensor"));
  RaiseIfError(CheckDenseCpu(in, "all_to_all_single", "input tensor"));
  RaiseIfError(CheckSameDType(in, out, "all_to_all_single"));
  const std::vector<size_t> send_counts = ValueOrRaise(
      SplitCounts(in, input_split_sizes, size_, "all_to_all_single", "input"));
  const std::vector<size_t> recv_counts = ValueOrRaise(
      SplitCounts(out, output_split_sizes, size_, "all_to_all_single", "output"));
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::ALLTOALL_BASE, "loom:all_to_all_single", "all_to_all_single",
                 absl::StrCat(DescribeTensor(in), " in, ", DescribeTensor(out), " out"),
                 {{in}, {out}}, opts.timeout,
                 [this, in_view = MovementView(in), out_view = MovementView(out), send_counts,
                  recv_counts, timeout](LoomWork&) {
                   return connection_.communicator->AllToAllV(in_view, send_counts, out_view,
                                                              recv_counts, CallWithin(timeout));
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  RaiseIfError(CheckCount(inputs.size(), size_, "all_to_all", "input tensors (one per rank)"));
  RaiseIfError(CheckCount(outputs.size(), size_, "all_to_all", "output tensors (one per rank)"));
  const at::ScalarType dtype = inputs[0].scalar_type();
  RaiseIfError(CheckAllDenseCpu(inputs, dtype, "all_to_all", "input tensor"));
  RaiseIfError(CheckAllDenseCpu(outputs, dtype, "all_to_all", "output tensor"));
  std::vector<size_t> send_counts, recv_counts;
  int64_t send_total = 0, recv_total = 0;
  for (int i = 0; i < size_; ++i) {
    send_counts.push_back(MovementUnits(inputs[i], inputs[i].numel()));
    recv_counts.push_back(MovementUnits(outputs[i], outputs[i].numel()));
    send_total += inputs[i].numel();
    recv_total += outputs[i].numel();
  }
  const std::vector<at::Tensor> ins = inputs;
  const std::vector<at::Tensor> outs = outputs;
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::ALLTOALL, "loom:all_to_all", "all_to_all",
                 absl::StrCat(c10::toString(dtype), ", ", send_total, " elements in, ", recv_total,
                              " out"),
                 {ins, outs}, opts.timeout,
                 [this, send_counts, recv_counts, recv_total, timeout](LoomWork& work) {
                   const at::Tensor flat_in = Flatten(work.inputs());
                   const at::Tensor flat_out = Scratch(work.outputs()[0], recv_total);
                   absl::Status status = connection_.communicator->AllToAllV(
                       MovementView(flat_in), send_counts, MovementView(flat_out), recv_counts,
                       CallWithin(timeout));
                   if (status.ok()) Unflatten(flat_out, work.outputs());
                   return status;
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::barrier(const c10d::BarrierOptions& opts) {
  const absl::Duration timeout = CallTimeout(opts.timeout);
  return Enqueue(c10d::OpType::BARRIER, "loom:barrier", "barrier", "", {{}, {}}, opts.timeout,
                 [this, timeout](LoomWork&) {
                   return connection_.communicator->Barrier(CallWithin(timeout));
                 });
}

}  // namespace pytorch
}  // namespace loom
