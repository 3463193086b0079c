#include "collectives/native.h"

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

using collectives_internal::CallContext;
using collectives_internal::CollectiveArgs;

absl::StatusOr<NativeCollectives*> Native(const CallContext& ctx) {
  NativeCollectives* native = ctx.transport->native();
  if (native == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "algorithm native: the ", ctx.transport->name(),
        " transport has no collectives of its own (the mpi transport has; a split "
        "communicator's group has none)"));
  }
  return native;
}

absl::Status NativeAllReduce(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->AllReduce(a.input.data(), a.output.data(), a.count, a.input.dtype(), a.op);
}

absl::Status NativeReduceScatter(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->ReduceScatter(a.input.data(), a.output.data(), a.count, a.input.dtype(), a.op);
}

absl::Status NativeAllGather(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->AllGather(a.input.data(), a.output.data(), a.count, a.input.dtype());
}

absl::Status NativeBroadcast(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->Broadcast(a.input.data(), a.output.data(), a.count, a.output.dtype(), a.root);
}

absl::Status NativeReduce(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->Reduce(a.input.data(), a.output.data(), a.count, a.input.dtype(), a.op, a.root);
}

absl::Status NativeAllToAll(const CallContext& ctx, const CollectiveArgs& a) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->AllToAll(a.input.data(), a.output.data(), a.count, a.input.dtype());
}

absl::Status NativeBarrier(const CallContext& ctx, const CollectiveArgs&) {
  auto native = Native(ctx);
  if (!native.ok()) return native.status();
  return (*native)->Barrier();
}

}  // namespace

absl::StatusOr<NativeFn> FindNative(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return NativeAllReduce;
    case CollectiveKind::kReduceScatter: return NativeReduceScatter;
    case CollectiveKind::kAllGather: return NativeAllGather;
    case CollectiveKind::kBroadcast: return NativeBroadcast;
    case CollectiveKind::kReduce: return NativeReduce;
    case CollectiveKind::kAllToAll: return NativeAllToAll;
    case CollectiveKind::kBarrier: return NativeBarrier;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      CollectiveKindName(kind), " has no native algorithm (all_reduce, reduce_scatter, "
                                "all_gather, broadcast, reduce, all_to_all and barrier have)"));
}

}  // namespace loom
