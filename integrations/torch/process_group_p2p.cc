// LoomProcessGroup's point-to-point calls: send, recv and recvAnysource. They run on
// the transport directly, with PyTorch's tag in the transport tag
// (internal/p2p_tags.h), since Communicator::Send/Recv pair messages by order alone.
//
// Each runs on the progress thread like a collective, so a send waits there until its
// receiver has posted the matching receive (shm: messages up to 8 KiB are buffered
// and complete at once). Two ranks that both isend more than that to each other
// before their irecv would each wait on the other until the timeout; see README.md.
#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/status_macros.h"
#include "integrations/torch/call_args.h"
#include "integrations/torch/internal/p2p_tags.h"
#include "integrations/torch/internal/raise.h"
#include "integrations/torch/process_group.h"

namespace loom {
namespace pytorch {

using pytorch_internal::P2pTag;
using pytorch_internal::RaiseIfError;

namespace {

// How long a receive from any source listens to one peer before it tries the next.
constexpr absl::Duration kAnySourceSlice = absl::Milliseconds(2);

absl::Status CheckTag(int tag, absl::string_view call) {
  if (tag >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("loom ", call, ": tag ", tag, " is negative; tags are 0 .. 2^31-1"));
}

absl::Span<std::byte> Bytes(const at::Tensor& tensor) {
  return absl::Span<std::byte>(static_cast<std::byte*>(tensor.data_ptr()), tensor.nbytes());
}

}  // namespace

absl::Status LoomProcessGroup::PointToPoint(bool send, const at::Tensor& tensor, int peer, int tag,
                                            absl::Duration timeout) {
  Transport& transport = *connection_.transport;
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<Request> request = send ? transport.Send(peer, P2pTag(tag), Bytes(tensor))
                                         : transport.Recv(peer, P2pTag(tag), Bytes(tensor));
  if (!request.ok()) return request.status();
  return transport.Wait({*request}, deadline);
}

absl::StatusOr<int> LoomProcessGroup::ReceiveFromAny(const at::Tensor& tensor, int tag,
                                                     absl::Duration timeout) {
  Transport& transport = *connection_.transport;
  const absl::Time deadline = absl::Now() + timeout;
  // The transport matches messages by source, so this listens to each peer in turn
  // for a moment; a receive cancelled at its slice's end takes nothing (transport.h).
  for (int peer = (rank_ + 1) % size_;; peer = (peer + 1) % size_) {
    if (peer == rank_ && size_ > 1) continue;
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no message with tag ", tag, " from any rank within ", absl::FormatDuration(timeout)));
    }
    LOOM_ASSIGN_OR_RETURN(Request request, transport.Recv(peer, P2pTag(tag), Bytes(tensor)));
    const absl::Status status = transport.Wait({request}, std::min(deadline, now + kAnySourceSlice));
    if (status.ok()) return peer;
    if (!absl::IsDeadlineExceeded(status)) return status;
  }
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::send(std::vector<at::Tensor>& tensors,
                                                      int dst_rank, int tag) {
  RaiseIfError(CheckCount(tensors.size(), 1, "send", "tensor"));
  RaiseIfError(CheckRank(dst_rank, size_, "send", "destination"));
  RaiseIfError(CheckTag(tag, "send"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "send", "tensor"));
  const absl::Duration timeout = spec_.timeout;
  return Enqueue(c10d::OpType::SEND, "loom:send", "send",
                 absl::StrCat(DescribeTensor(tensor), " to rank ", dst_rank, ", tag ", tag),
                 {{tensor}, {}}, c10d::kUnsetTimeout, [this, dst_rank, tag, timeout](LoomWork& work) {
                   return PointToPoint(/*send=*/true, work.inputs()[0], dst_rank, tag, timeout);
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::recv(std::vector<at::Tensor>& tensors,
                                                      int src_rank, int tag) {
  RaiseIfError(CheckCount(tensors.size(), 1, "recv", "tensor"));
  RaiseIfError(CheckRank(src_rank, size_, "recv", "source"));
  RaiseIfError(CheckTag(tag, "recv"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "recv", "tensor"));
  const absl::Duration timeout = spec_.timeout;
  return Enqueue(c10d::OpType::RECV, "loom:recv", "recv",
                 absl::StrCat(DescribeTensor(tensor), " from rank ", src_rank, ", tag ", tag),
                 {{}, {tensor}}, c10d::kUnsetTimeout, [this, src_rank, tag, timeout](LoomWork& work) {
                   absl::Status status =
                       PointToPoint(/*send=*/false, work.outputs()[0], src_rank, tag, timeout);
                   if (status.ok()) work.SetSourceRank(src_rank);
                   return status;
                 });
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::recvAnysource(std::vector<at::Tensor>& tensors,
                                                               int tag) {
  RaiseIfError(CheckCount(tensors.size(), 1, "recv", "tensor"));
  RaiseIfError(CheckTag(tag, "recv"));
  const at::Tensor tensor = tensors[0];
  RaiseIfError(CheckDenseCpu(tensor, "recv", "tensor"));
  const absl::Duration timeout = spec_.timeout;
  return Enqueue(c10d::OpType::RECVANYSOURCE, "loom:recv_any_source", "recv",
                 absl::StrCat(DescribeTensor(tensor), " from any rank, tag ", tag),
                 {{}, {tensor}}, c10d::kUnsetTimeout, [this, tag, timeout](LoomWork& work) -> absl::Status {
                   LOOM_ASSIGN_OR_RETURN(const int source,
                                         ReceiveFromAny(work.outputs()[0], tag, timeout));
                   work.SetSourceRank(source);
                   return absl::OkStatus();
                 });
}

}  // namespace pytorch
}  // namespace loom
