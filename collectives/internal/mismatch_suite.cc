#include "collectives/internal/mismatch_suite.h"

#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

constexpr size_t kCount = 64;  // f32 and i32 elements: 256 bytes

// Distinct per rank and position, so a call that wrongly went through would show.
template <typename T>
std::vector<T> Inputs(const Communicator& comm, size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(1 + i + 100 * comm.rank());
  return values;
}

absl::Status AllReduceF32(Communicator& comm, ReduceOp op) {
  std::vector<float> in = Inputs<float>(comm, kCount), out(kCount);
  return comm.AllReduce(ConstBufferView::Of(absl::MakeConstSpan(in)),
                        BufferView::Of(absl::MakeSpan(out)), op);
}

absl::Status AllReduceI32(Communicator& comm) {
  std::vector<int32_t> in = Inputs<int32_t>(comm, kCount), out(kCount);
  return comm.AllReduce(ConstBufferView::Of(absl::MakeConstSpan(in)),
                        BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum);
}

absl::Status AllReduceBf16(Communicator& comm) {
  // 128 bf16 elements: the same 256 bytes as the f32 calls.
  std::vector<uint16_t> in(2 * kCount, 0x3F80), out(2 * kCount);  // 1.0
  return comm.AllReduce(ConstBufferView(reinterpret_cast<const std::byte*>(in.data()), in.size(),
                                        DType::kBF16),
                        BufferView(reinterpret_cast<std::byte*>(out.data()), out.size(),
                                   DType::kBF16),
                        ReduceOp::kSum);
}

absl::Status BroadcastFrom(Communicator& comm, int root) {
  std::vector<float> data = Inputs<float>(comm, kCount);
  const BufferView view = BufferView::Of(absl::MakeSpan(data));
  return comm.Broadcast(view, view, root);
}

absl::Status ReduceTo(Communicator& comm, int root) {
  std::vector<float> in = Inputs<float>(comm, kCount), out(kCount);
  return comm.Reduce(ConstBufferView::Of(absl::MakeConstSpan(in)),
                     BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum, root);
}

absl::Status AllGather(Communicator& comm) {
  // Each rank's block is 256 bytes, as the others' inputs.
  std::vector<float> in = Inputs<float>(comm, kCount), out(kCount * comm.size());
  return comm.AllGather(ConstBufferView::Of(absl::MakeConstSpan(in)),
                        BufferView::Of(absl::MakeSpan(out)));
}

absl::Status AllToAll(Communicator& comm) {
  std::vector<float> in = Inputs<float>(comm, kCount), out(kCount);
  return comm.AllToAll(ConstBufferView::Of(absl::MakeConstSpan(in)),
                       BufferView::Of(absl::MakeSpan(out)));
}

absl::Status ReduceScatter(Communicator& comm) {
  std::vector<float> in = Inputs<float>(comm, kCount), out(kCount / comm.size());
  return comm.ReduceScatter(ConstBufferView::Of(absl::MakeConstSpan(in)),
                            BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum);
}

std::shared_ptr<Transport> Borrow(Transport& transport) {
  return std::shared_ptr<Transport>(&transport, [](Transport*) {});
}

}  // namespace

const std::vector<MismatchCall>& MismatchCalls() {
  static const auto* const calls = new std::vector<MismatchCall>{
      {"all_reduce f32 sum", "all_reduce(f32, count=64, sum,",
       [](Communicator& c) { return AllReduceF32(c, ReduceOp::kSum); }},
      {"all_reduce f32 prod", "all_reduce(f32, count=64, prod,",
       [](Communicator& c) { return AllReduceF32(c, ReduceOp::kProd); }},
      {"all_reduce f32 min", "all_reduce(f32, count=64, min,",
       [](Communicator& c) { return AllReduceF32(c, ReduceOp::kMin); }},
      {"all_reduce f32 max", "all_reduce(f32, count=64, max,",
       [](Communicator& c) { return AllReduceF32(c, ReduceOp::kMax); }},
      {"all_reduce f32 avg", "all_reduce(f32, count=64, avg,",
       [](Communicator& c) { return AllReduceF32(c, ReduceOp::kAvg); }},
      {"all_reduce i32 sum", "all_reduce(i32, count=64, sum,", &AllReduceI32},
      {"all_reduce bf16 sum", "all_reduce(bf16, count=128, sum,", &AllReduceBf16},
      {"broadcast root 0", "broadcast(f32, count=64, root=0,",
       [](Communicator& c) { return BroadcastFrom(c, 0); }},
      {"broadcast root 1", "broadcast(f32, count=64, root=1,",
       [](Communicator& c) { return BroadcastFrom(c, 1); }},
      {"reduce root 0", "reduce(f32, count=64, sum, root=0,",
       [](Communicator& c) { return ReduceTo(c, 0); }},
      {"reduce root 1", "reduce(f32, count=64, sum, root=1,",
       [](Communicator& c) { return ReduceTo(c, 1); }},
      {"all_gather", "all_gather(f32,", &AllGather},
      {"all_to_all", "all_to_all(f32,", &AllToAll},
      {"reduce_scatter", "reduce_scatter(f32,", &ReduceScatter},
  };
  return *calls;
}

absl::Status CheckMismatchFailsAtOnce(TransportHarness& harness, int a, int b,
                                      absl::Duration bound) {
  const std::vector<MismatchCall>& calls = MismatchCalls();
  const MismatchCall* mine[2] = {&calls[a], &calls[b]};
  const std::string pair = absl::StrCat("rank 0: ", calls[a].name, ", rank 1: ", calls[b].name);
  const std::vector<absl::Status> results =
      harness.Run(2, [&](Transport& transport) -> absl::Status {
        CommunicatorOptions options;
        options.timeout = absl::Seconds(60);  // A call that waits for it has failed the test.
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                              Communicator::Create(Borrow(transport), options));
        const absl::Time start = absl::Now();
        const absl::Status status = mine[comm->rank()]->run(*comm);
        const absl::Duration took = absl::Now() - start;
        if (status.code() != absl::StatusCode::kFailedPrecondition ||
            !absl::StrContains(status.message(), "mismatched collective calls")) {
          return absl::InternalError(absl::StrCat("not a mismatch error: ", status.ToString()));
        }
        for (const MismatchCall* call : mine) {
          if (!absl::StrContains(status.message(), call->shown)) {
            return absl::InternalError(
                absl::StrCat("does not show \"", call->shown, "\": ", status.message()));
          }
        }
        if (took > bound) {
          return absl::InternalError(absl::StrCat("failed only after ", absl::FormatDuration(took),
                                                  " (bound ", absl::FormatDuration(bound), ")"));
        }
        return absl::OkStatus();
      });
  for (int r = 0; r < 2; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(), absl::StrCat(harness.name(), ", ", pair, ": rank ", r,
                                                          ": ", results[r].message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEveryMismatchFailsAtOnce(TransportHarness& harness, absl::Duration bound) {
  const int n = static_cast<int>(MismatchCalls().size());
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      LOOM_RETURN_IF_ERROR(CheckMismatchFailsAtOnce(harness, a, b, bound));
    }
  }
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom
