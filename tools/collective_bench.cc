#include "tools/collective_bench.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "collectives/transport/comm_buffer.h"
#include "core/aligned_buffer.h"
#include "core/build_info.h"
#include "core/checked_size.h"
#include "core/half.h"
#include "core/status_macros.h"

namespace loom {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
double AsDouble(T v) {
  if constexpr (kIsHalf<T>) {
    return static_cast<double>(ToFloat(v));
  } else {
    return static_cast<double>(v);
  }
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return ToFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ToBFloat16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// Seeded small integers: every sum, min and max of them is exact in every dtype up
// to 16 ranks; products use -1, 1 and 2, whose products are exact too.
int64_t InputValue(ReduceOp op, int rank, size_t i) {
  const uint64_t mix = i * 7 + static_cast<uint64_t>(rank) * 13;
  if (op == ReduceOp::kProd) return static_cast<int64_t>(mix % 3) - 1 == 0 ? 2 : static_cast<int64_t>(mix % 3) - 1;
  return static_cast<int64_t>(mix % 17) - 8;
}

// BenchBuffer: a rank's input or output, in ordinary memory or, with
// --shared_buffers, from the communicator's AllocateBuffer (the transport's
// communication memory: over shm a SharedBuffer the peers map instead of reading it
// with CMA; the other transports give ordinary memory).
class BenchBuffer {
 public:
  static absl::StatusOr<BenchBuffer> Make(Communicator& comm, size_t bytes, bool allocated) {
    BenchBuffer buffer;
    if (allocated && bytes > 0) {
      LOOM_ASSIGN_OR_RETURN(buffer.allocated_, comm.AllocateBuffer(bytes));
      buffer.bytes_ = buffer.allocated_.bytes();
    } else {
      // AlignedBuffer: an allocation that fails is ResourceExhausted, not bad_alloc.
      LOOM_ASSIGN_OR_RETURN(buffer.plain_, AlignedBuffer<std::byte>::Create(bytes));
      buffer.bytes_ = buffer.plain_.span();
    }
    return buffer;
  }
  std::byte* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  std::byte* begin() const { return bytes_.data(); }
  std::byte* end() const { return bytes_.data() + bytes_.size(); }

 private:
  AlignedBuffer<std::byte> plain_;
  CommBuffer allocated_;
  absl::Span<std::byte> bytes_;
};

template <typename T>
void Fill(BenchBuffer& buffer, ReduceOp op, int rank, size_t first) {
  T* values = reinterpret_cast<T*>(buffer.data());
  const size_t n = buffer.size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) values[i] = FromDouble<T>(static_cast<double>(InputValue(op, rank, first + i)));
}

// Expected reduction of element i over `ranks` ranks, in T's own semantics.
template <typename T>
T ExpectedReduction(ReduceOp op, int ranks, size_t i) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    U acc = static_cast<U>(static_cast<T>(InputValue(op, 0, i)));
    T best = static_cast<T>(InputValue(op, 0, i));
    for (int r = 1; r < ranks; ++r) {
      const T x = static_cast<T>(InputValue(op, r, i));
      if (op == ReduceOp::kProd) acc = static_cast<U>(acc * static_cast<U>(x));
      else acc = static_cast<U>(acc + static_cast<U>(x));
      best = op == ReduceOp::kMin ? std::min(best, x) : std::max(best, x);
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) return best;
    if (op == ReduceOp::kAvg) return static_cast<T>(static_cast<T>(acc) / static_cast<T>(ranks));
    return static_cast<T>(acc);
  } else {
    double acc = AsDouble(FromDouble<T>(static_cast<double>(InputValue(op, 0, i))));
    for (int r = 1; r < ranks; ++r) {
      const double x = AsDouble(FromDouble<T>(static_cast<double>(InputValue(op, r, i))));
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += x; break;
        case ReduceOp::kProd: acc *= x; break;
        case ReduceOp::kMin: acc = std::min(acc, x); break;
        case ReduceOp::kMax: acc = std::max(acc, x); break;
      }
    }
    if (op == ReduceOp::kAvg) acc /= ranks;
    return FromDouble<T>(acc);
  }
}

template <typename T>
bool Close(T got, T want) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    // Sums, products, min and max of the inputs are exact; an average is one
    // division, rounded once.
    const double tolerance = kIsHalf<T> ? 1.0 / 128 : (sizeof(T) == 4 ? 1e-6 : 1e-12);
    return std::fabs(AsDouble(got) - AsDouble(want)) <= tolerance * std::max(1.0, std::fabs(AsDouble(want)));
  }
}

bool Reduces(CollectiveKind op) {
  return op == CollectiveKind::kAllReduce || op == CollectiveKind::kReduceScatter ||
         op == CollectiveKind::kReduce;
}

// Shape of one size: per-call element counts.
struct Shape {
  size_t in = 0;
  size_t out = 0;
  size_t row_count = 0;  // the table's count column
};

Shape ShapeOf(CollectiveKind op, size_t bytes, size_t width, size_t n) {
  const size_t total = bytes / width;
  const size_t block = total / n;
  switch (op) {
    case CollectiveKind::kReduceScatter: return {n * block, block, n * block};
    case CollectiveKind::kAllGather: return {block, n * block, n * block};
    case CollectiveKind::kAllToAll: return {n * block, n * block, n * block};
    default: return {total, total, total};
  }
}

absl::Status RunOnce(Communicator& comm, const BenchOptions& options, BenchBuffer& in,
                     BenchBuffer& out, const Shape& shape, const CallOptions& call) {
  const DType t = options.dtype;
  const ConstBufferView input(in.data(), shape.in, t);
  BufferView output(out.data(), shape.out, t);
  if (options.in_place) {
    switch (options.op) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBroadcast:
      case CollectiveKind::kReduce: output = BufferView(in.data(), shape.in, t); break;
      case CollectiveKind::kReduceScatter:
        output = BufferView(in.data() + comm.rank() * shape.out * DTypeSize(t), shape.out, t);
        break;
      default: break;
    }
  }
  switch (options.op) {
    case CollectiveKind::kAllReduce: return comm.AllReduce(input, output, options.redop, call);
    case CollectiveKind::kReduceScatter: return comm.ReduceScatter(input, output, options.redop, call);
    case CollectiveKind::kAllGather: {
      if (options.in_place) {
        const size_t w = DTypeSize(t);
        std::memcpy(out.data() + comm.rank() * shape.in * w, in.data(), shape.in * w);
        return comm.AllGather(ConstBufferView(out.data() + comm.rank() * shape.in * w, shape.in, t),
                              output, call);
      }
      return comm.AllGather(input, output, call);
    }
    case CollectiveKind::kBroadcast: return comm.Broadcast(input, output, options.root, call);
    case CollectiveKind::kReduce: return comm.Reduce(input, output, options.redop, options.root, call);
    case CollectiveKind::kAllToAll: return comm.AllToAll(input, output, call);
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("collective_bench does not drive ",
                                                 CollectiveKindName(options.op)));
}

// CountWrong checks this rank's result of the call just made.
int64_t CountWrong(const Communicator& comm, const BenchOptions& options,
                   const BenchBuffer& in, const BenchBuffer& out,
                   const Shape& shape) {
  const int n = comm.size();
  const int r = comm.rank();
  return VisitDType(options.dtype, [&](auto zero) -> int64_t {
    using T = decltype(zero);
    const bool result_in_input = options.in_place && options.op != CollectiveKind::kAllGather &&
                                 options.op != CollectiveKind::kAllToAll;
    const T* got = reinterpret_cast<const T*>(result_in_input ? in.data() : out.data());
    int64_t wrong = 0;
    auto check = [&](size_t at, T want) {
      if (!Close(got[at], want)) ++wrong;
    };
    switch (options.op) {
      case CollectiveKind::kAllReduce:
        for (size_t i = 0; i < shape.out; ++i) check(i, ExpectedReduction<T>(options.redop, n, i));
        break;
      case CollectiveKind::kReduce:
        for (size_t i = 0; r == options.root && i < shape.out; ++i) {
          check(i, ExpectedReduction<T>(options.redop, n, i));
        }
        break;
      case CollectiveKind::kReduceScatter: {
        const size_t offset = options.in_place ? r * shape.out : 0;
        for (size_t i = 0; i < shape.out; ++i) {
          check(offset + i, ExpectedReduction<T>(options.redop, n, r * shape.out + i));
        }
        break;
      }
      case CollectiveKind::kBroadcast:
        for (size_t i = 0; i < shape.out; ++i) {
          check(i, FromDouble<T>(static_cast<double>(InputValue(options.redop, options.root, i))));
        }
        break;
      case CollectiveKind::kAllGather:
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < shape.in; ++i) {
            check(q * shape.in + i, FromDouble<T>(static_cast<double>(InputValue(options.redop, q, i))));
          }
        }
        break;
      case CollectiveKind::kAllToAll: {
        const size_t block = shape.in / n;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < block; ++i) {
            check(q * block + i,
                  FromDouble<T>(static_cast<double>(InputValue(options.redop, q, r * block + i))));
          }
        }
        break;
      }
      default: break;
    }
    return wrong;
  });
}

}  // namespace

int ItersForMinSeconds(int iters, double min_seconds, double call_seconds) {
  if (!(min_seconds > 0)) return iters;
  const double wanted = call_seconds > 0 ? std::ceil(min_seconds / call_seconds) : kMostIters;
  return static_cast<int>(std::clamp(wanted, static_cast<double>(iters), static_cast<double>(std::max(iters, kMostIters))));
}

double BusFactor(CollectiveKind op, int ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveKind::kAllReduce: return 2 * (n - 1) / n;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
    case CollectiveKind::kAllToAll: return (n - 1) / n;
    default: return 1;
  }
}

absl::Status ValidateBenchOptions(const BenchOptions& options, int ranks, int ranks_per_host) {
  if (options.min_bytes == 0) {
    return absl::InvalidArgumentError("--min_bytes=0: the smallest size must be at least 1 byte");
  }
  if (options.max_bytes < options.min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_bytes=", options.max_bytes, " is smaller than --min_bytes=", options.min_bytes));
  }
  if (options.step_factor < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step_factor=", options.step_factor, " must be >= 2"));
  }
  if (options.iters < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--iters=", options.iters, " must be >= 1"));
  }
  if (options.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup=", options.warmup, " must be >= 0"));
  }
  if (!(options.min_seconds >= 0 && options.min_seconds <= kMostMinSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("--min_time=", options.min_seconds,
                                                   "s: must be 0..", kMostMinSeconds, "s"));
  }
  if (ranks > 0 && (options.root < 0 || options.root >= ranks)) {
    return absl::InvalidArgumentError(absl::StrCat("--root=", options.root, " is not a rank of ",
                                                   ranks, " (0 to ", ranks - 1, ")"));
  }
  if (ranks_per_host < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(ranks_per_host, " ranks per host: must be >= 1"));
  }
  LOOM_ASSIGN_OR_RETURN(const int64_t max_bytes,
                        SizeFromUnsigned("--max_bytes", options.max_bytes));
  LOOM_ASSIGN_OR_RETURN(const int64_t bytes, CheckedMul({{"--max_bytes", max_bytes},
                                                         {"buffers per rank (input and output)", 2},
                                                         {"ranks on this host", ranks_per_host}}));
  const absl::Status fits = CheckFitsInMemory(
      absl::StrCat("--max_bytes=", options.max_bytes, ": an input and an output buffer on each of ",
                   ranks_per_host, " ranks on this host"),
      bytes);
  if (!fits.ok()) return absl::InvalidArgumentError(fits.message());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<BenchRow>> RunCollectiveBench(Communicator& comm,
                                                         const BenchOptions& options) {
  if (options.min_bytes == 0 || options.max_bytes < options.min_bytes || options.step_factor < 2 ||
      options.iters < 1 || options.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sizes ", options.min_bytes, "..", options.max_bytes, " step x", options.step_factor,
        ", iters ", options.iters, ", warmup ", options.warmup, " make no measurement"));
  }
  // This rank's own buffers, checked against the machine before they are allocated.
  LOOM_RETURN_IF_ERROR(ValidateBenchOptions(options, comm.size(), 1));
  const size_t n = static_cast<size_t>(comm.size());
  const size_t width = DTypeSize(options.dtype);
  CallOptions call;
  call.algorithm = options.algorithm;
  std::vector<BenchRow> rows;
  for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.step_factor) {
    const Shape shape = ShapeOf(options.op, bytes, width, n);
    if (shape.row_count == 0) continue;
    LOOM_ASSIGN_OR_RETURN(BenchBuffer in, BenchBuffer::Make(comm, shape.in * width, options.shared_buffers));
    LOOM_ASSIGN_OR_RETURN(BenchBuffer out, BenchBuffer::Make(comm, shape.out * width, options.shared_buffers));
    auto fill = [&] {
      VisitDType(options.dtype, [&](auto zero) {
        Fill<decltype(zero)>(in, options.redop, comm.rank(), 0);
      });
    };
    fill();
    for (int i = 0; i < options.warmup; ++i) LOOM_RETURN_IF_ERROR(RunOnce(comm, options, in, out, shape, call));
    CallOptions direct;
    direct.algorithm = Algorithm::kDirect;
    int iters = options.iters;
    if (options.min_seconds > 0) {
      // Every rank must run the same count: size it from the slowest rank's call.
      LOOM_RETURN_IF_ERROR(comm.Barrier());
      const absl::Time probe = absl::Now();
      LOOM_RETURN_IF_ERROR(RunOnce(comm, options, in, out, shape, call));
      double probe_seconds[1] = {absl::ToDoubleSeconds(absl::Now() - probe)};
      LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(probe_seconds), ReduceOp::kMax, direct));
      iters = ItersForMinSeconds(options.iters, options.min_seconds, probe_seconds[0]);
    }
    LOOM_RETURN_IF_ERROR(comm.Barrier());
    const absl::Time start = absl::Now();
    for (int i = 0; i < iters; ++i) LOOM_RETURN_IF_ERROR(RunOnce(comm, options, in, out, shape, call));
    double seconds[1] = {absl::ToDoubleSeconds(absl::Now() - start) / iters};
    LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(seconds), ReduceOp::kMax, direct));

    BenchRow row;
    row.bytes = shape.row_count * width;
    row.count = shape.row_count;
    row.dtype = options.dtype;
    row.redop = options.redop;
    row.reduces = Reduces(options.op);
    const size_t model_bytes = options.op == CollectiveKind::kAllGather ? n * shape.in * width : shape.in * width;
    row.algorithm = options.algorithm != Algorithm::kAuto
                        ? options.algorithm
                        : comm.Explain(options.op, model_bytes * (row.reduces && (options.dtype == DType::kF16 || options.dtype == DType::kBF16) ? 2 : 1)).chosen;
    row.time_us = seconds[0] * 1e6;
    row.iters = iters;
    row.algbw_gbps = static_cast<double>(row.bytes) / seconds[0] / 1e9;
    row.busbw_gbps = row.algbw_gbps * BusFactor(options.op, comm.size());
    if (options.check) {
      fill();
      std::fill(out.begin(), out.end(), std::byte{0});
      LOOM_RETURN_IF_ERROR(RunOnce(comm, options, in, out, shape, call));
      int64_t wrong[1] = {CountWrong(comm, options, in, out, shape)};
      LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(wrong), ReduceOp::kSum, direct));
      row.wrong = wrong[0];
    }
    rows.push_back(row);
    if (bytes > options.max_bytes / options.step_factor) break;
  }
  return rows;
}

std::string FormatBenchTable(const std::vector<BenchRow>& rows, int ranks, const BenchOptions& options) {
  const std::string iters =
      options.min_seconds > 0
          ? absl::StrFormat("%d iterations or more (each size at least %gs)", options.iters, options.min_seconds)
          : absl::StrFormat("%d iterations", options.iters);
  std::string out = absl::StrFormat("# %s, %d ranks, %s, %s, %s after %d warm-up%s, %s build\n",
                                    CollectiveKindName(options.op), ranks, DTypeName(options.dtype),
                                    options.in_place ? "in place" : "out of place", iters,
                                    options.warmup, options.check ? ", checked" : "", BuildMode());
  absl::StrAppend(&out, absl::StrFormat("%12s %12s %6s %6s %18s %10s %12s %12s %7s\n", "size(B)",
                                        "count", "type", "redop", "algo", "time(us)",
                                        "algbw(GB/s)", "busbw(GB/s)", "#wrong"));
  double busbw_sum = 0;
  for (const BenchRow& row : rows) {
    absl::StrAppend(&out, absl::StrFormat("%12d %12d %6s %6s %18s %10.2f %12.2f %12.2f %7s\n", row.bytes,
                                          row.count, DTypeName(row.dtype),
                                          row.reduces ? std::string(ReduceOpName(row.redop)) : "none",
                                          AlgorithmName(row.algorithm), row.time_us, row.algbw_gbps,
                                          row.busbw_gbps,
                                          row.wrong < 0 ? "N/A" : absl::StrCat(row.wrong)));
    busbw_sum += row.busbw_gbps;
  }
  absl::StrAppend(&out, absl::StrFormat("# Avg bus bandwidth    : %.3f\n",
                                        rows.empty() ? 0.0 : busbw_sum / rows.size()));
  return out;
}

std::string FormatBenchJson(const std::vector<BenchRow>& rows, int ranks, const BenchOptions& options) {
  std::string out = absl::StrCat("{\"op\": \"", CollectiveKindName(options.op), "\", \"ranks\": ", ranks,
                                 ", \"in_place\": ", options.in_place ? "true" : "false",
                                 ", \"build\": \"", BuildMode(), "\", \"rows\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& row = rows[i];
    absl::StrAppend(&out, i == 0 ? "\n  " : ",\n  ",
                    absl::StrFormat("{\"size\": %d, \"count\": %d, \"type\": \"%s\", \"redop\": \"%s\", "
                                    "\"algo\": \"%s\", \"time_us\": %.3f, \"algbw_gbps\": %.4f, "
                                    "\"busbw_gbps\": %.4f, \"wrong\": %d, \"iters\": %d}",
                                    row.bytes, row.count, DTypeName(row.dtype),
                                    row.reduces ? std::string(ReduceOpName(row.redop)) : "none",
                                    AlgorithmName(row.algorithm), row.time_us, row.algbw_gbps,
                                    row.busbw_gbps, row.wrong, row.iters));
  }
  absl::StrAppend(&out, "\n]}\n");
  return out;
}

}  // namespace loom
