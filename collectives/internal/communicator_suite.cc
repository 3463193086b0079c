#include "collectives/internal/communicator_suite.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/algorithm_registry.h"
#include "collectives/internal/algorithm_testing.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {

absl::Span<const CollectiveKind> SuiteKinds() {
  static constexpr CollectiveKind kKinds[] = {
      CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
      CollectiveKind::kBroadcast, CollectiveKind::kAllToAll};
  return kKinds;
}

absl::Status CheckEveryAlgorithmAndCount(Communicator& comm, CollectiveKind kind,
                                         absl::Span<const Algorithm> extra) {
  const size_t n = comm.size();
  const size_t counts[] = {0, 1, 3, n - 1, 1000, 65537};
  return CheckEveryAlgorithmAndCount(comm, kind, extra, counts);
}

absl::Status CheckEveryAlgorithmAndCount(Communicator& comm, CollectiveKind kind,
                                         absl::Span<const Algorithm> extra,
                                         absl::Span<const size_t> counts) {
  const int world = comm.size();
  const int r = comm.rank();
  const size_t n = world;
  std::vector<Algorithm> algorithms = AlgorithmsFor(kind);
  algorithms.insert(algorithms.end(), extra.begin(), extra.end());
  for (Algorithm algorithm : algorithms) {
    CallOptions call;
    call.algorithm = algorithm;
    call.timeout = absl::Seconds(30);
    for (size_t c = 0; c < counts.size(); ++c) {
      const size_t count = counts[c];
      const bool in_place = c % 2 == 1;
      const DType dtype = c % 3 == 2 ? DType::kBF16 : DType::kF32;
      // All-reduce and broadcast move `count` elements, the others n blocks of it:
      // inputs no longer than that (making and checking them is most of the time).
      const bool one_vector =
          kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast;
      const RankInputs inputs =
          MakeInputs(dtype, ReduceOp::kSum, world, one_vector ? count : n * count, 40 + c);
      const size_t width = DTypeSize(dtype);
      std::vector<std::byte> mine = inputs.data[r], out(n * count * width);
      const std::string what = absl::StrCat(AlgorithmName(algorithm), " count ", count);
      absl::Status checked;
      switch (kind) {
        case CollectiveKind::kAllReduce: {
          mine.resize(count * width);
          out.resize(count * width);
          BufferView output = in_place ? MutableViewOf(mine, dtype) : MutableViewOf(out, dtype);
          LOOM_RETURN_IF_ERROR(comm.AllReduce(ViewOf(mine, dtype), output, ReduceOp::kSum, call));
          checked = ExpectReduction(inputs, ReduceOp::kSum, 0, output);
          break;
        }
        case CollectiveKind::kReduceScatter: {
          BufferView output = in_place ? BufferView(mine.data() + r * count * width, count, dtype)
                                       : BufferView(out.data(), count, dtype);
          LOOM_RETURN_IF_ERROR(
              comm.ReduceScatter(ViewOf(mine, dtype), output, ReduceOp::kSum, call));
          checked = ExpectReduction(inputs, ReduceOp::kSum, r * count, output);
          break;
        }
        case CollectiveKind::kAllGather: {
          LOOM_RETURN_IF_ERROR(comm.AllGather(ConstBufferView(mine.data(), count, dtype),
                                              MutableViewOf(out, dtype), call));
          for (size_t q = 0; q < n && checked.ok(); ++q) {
            checked = ExpectSameBytes(ConstBufferView(inputs.data[q].data(), count, dtype),
                                      ConstBufferView(out.data() + q * count * width, count, dtype),
                                      absl::StrCat(what, " block ", q));
          }
          break;
        }
        case CollectiveKind::kBroadcast: {
          mine.resize(count * width);
          const int root = static_cast<int>(c % n);
          LOOM_RETURN_IF_ERROR(
              comm.Broadcast(ViewOf(mine, dtype), MutableViewOf(mine, dtype), root, call));
          checked = ExpectSameBytes(ConstBufferView(inputs.data[root].data(), count, dtype),
                                    ViewOf(mine, dtype), what);
          break;
        }
        case CollectiveKind::kAllToAll: {
          LOOM_RETURN_IF_ERROR(comm.AllToAll(ViewOf(mine, dtype), MutableViewOf(out, dtype), call));
          for (size_t q = 0; q < n && checked.ok(); ++q) {
            checked = ExpectSameBytes(
                ConstBufferView(inputs.data[q].data() + r * count * width, count, dtype),
                ConstBufferView(out.data() + q * count * width, count, dtype), what);
          }
          break;
        }
        default: return absl::InternalError("kind not covered");
      }
      if (!checked.ok())
        return absl::Status(checked.code(), absl::StrCat(what, ": ", checked.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom
