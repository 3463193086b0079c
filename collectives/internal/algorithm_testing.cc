#include "collectives/internal/algorithm_testing.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/half.h"

namespace loom {
namespace collectives_internal {
namespace {

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <typename T>
double ToDouble(T value) {
  if constexpr (kIsHalf<T>) {
    return static_cast<double>(ToFloat(value));
  } else {
    return static_cast<double>(value);
  }
}

template <typename T>
T FromDouble(double value) {
  if constexpr (std::is_same_v<T, Float16>) {
    return ToFloat16(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ToBFloat16(static_cast<float>(value));
  } else {
    return static_cast<T>(value);
  }
}

template <typename T>
double UnitRoundoff() {
  if constexpr (std::is_same_v<T, Float16>) {
    return std::ldexp(1.0, -11);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::ldexp(1.0, -8);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::ldexp(1.0, -24);
  } else {
    return std::ldexp(1.0, -53);
  }
}

template <typename T>
double SmallestNormal() {
  if constexpr (std::is_same_v<T, Float16>) {
    return std::ldexp(1.0, -14);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::ldexp(1.0, -126);
  } else {
    return static_cast<double>(std::numeric_limits<T>::min());
  }
}

template <typename T>
T Load(const std::vector<std::byte>& bytes, size_t i) {
  T value;
  std::memcpy(&value, bytes.data() + i * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
T LoadView(ConstBufferView view, size_t i) {
  T value;
  std::memcpy(&value, view.data() + i * sizeof(T), sizeof(T));
  return value;
}

// Integers reduce exactly, wrapping like the kernels (in the unsigned type).
template <typename T>
T IntegerCombine(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a < b ? b : a;
  }
  return a;
}

template <typename T>
std::string Show(T value) {
  if constexpr (kIsHalf<T>) {
    return absl::StrCat(ToFloat(value), " (bits 0x", absl::Hex(value.bits), ")");
  } else if constexpr (std::is_floating_point_v<T>) {
    return absl::StrCat(value);
  } else {
    return absl::StrCat(static_cast<int64_t>(value));
  }
}

}  // namespace

std::vector<absl::Status> RunAlgorithmRanks(TransportHarness& harness, int world,
                                            const RankBody& body, size_t chunk_bytes,
                                            absl::Duration timeout) {
  return harness.Run(world, [&](Transport& transport) {
    Scratch scratch;
    CallContext ctx;
    ctx.transport = &transport;
    ctx.tag_base = 0;
    ctx.deadline = absl::Now() + timeout;
    ctx.chunk_bytes = chunk_bytes;
    ctx.scratch = &scratch;
    return body(ctx);
  });
}

absl::Status AllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) {
    if (!statuses[r].ok()) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat("rank ", r, " of ", statuses.size(), ": ",
                                       statuses[r].message()));
    }
  }
  return absl::OkStatus();
}

ConstBufferView RankInputs::View(int rank) const { return ViewOf(data[rank], dtype); }

RankInputs MakeInputs(DType dtype, ReduceOp op, int world, size_t count, uint64_t seed) {
  RankInputs inputs;
  inputs.dtype = dtype;
  inputs.count = count;
  inputs.data.resize(world);
  VisitDType(dtype, [&](auto zero) {
    using T = decltype(zero);
    for (int r = 0; r < world; ++r) {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(r));
      std::vector<std::byte>& bytes = inputs.data[r];
      bytes.resize(count * sizeof(T));
      for (size_t i = 0; i < count; ++i) {
        T value;
        if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
          const double unit = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
          value = FromDouble<T>(op == ReduceOp::kProd ? 0.75 + 0.5 * unit : 2.0 * unit - 1.0);
        } else {
          value = static_cast<T>(rng());
        }
        std::memcpy(bytes.data() + i * sizeof(T), &value, sizeof(T));
      }
    }
  });
  return inputs;
}

ConstBufferView ViewOf(const std::vector<std::byte>& bytes, DType dtype) {
  return ConstBufferView(bytes.data(), bytes.size() / DTypeSize(dtype), dtype);
}

BufferView MutableViewOf(std::vector<std::byte>& bytes, DType dtype) {
  return BufferView(bytes.data(), bytes.size() / DTypeSize(dtype), dtype);
}

absl::Status ExpectReduction(const RankInputs& inputs, ReduceOp op, size_t first,
                             ConstBufferView got) {
  if (got.dtype() != inputs.dtype || first + got.size() > inputs.count) {
    return absl::InternalError(absl::StrCat("result of ", got.size(), " ", DTypeName(got.dtype()),
                                            " at ", first, " does not fit inputs of ",
                                            inputs.count, " ", DTypeName(inputs.dtype)));
  }
  const int world = static_cast<int>(inputs.data.size());
  return VisitDType(inputs.dtype, [&](auto zero) -> absl::Status {
    using T = decltype(zero);
    for (size_t i = 0; i < got.size(); ++i) {
      const T value = LoadView<T>(got, i);
      if constexpr (kIsHalf<T> || std::is_floating_point_v<T>) {
        // long double: the reference must round less often than the f64 result it checks.
        long double exact = static_cast<long double>(ToDouble(Load<T>(inputs.data[0], first + i)));
        long double magnitude = std::fabs(exact);
        for (int r = 1; r < world; ++r) {
          const long double x =
              static_cast<long double>(ToDouble(Load<T>(inputs.data[r], first + i)));
          switch (op) {
            case ReduceOp::kSum:
            case ReduceOp::kAvg: exact += x; break;
            case ReduceOp::kProd: exact *= x; break;
            case ReduceOp::kMin: exact = std::fmin(exact, x); break;
            case ReduceOp::kMax: exact = std::fmax(exact, x); break;
          }
          magnitude += std::fabs(x);
        }
        const long double u = static_cast<long double>(UnitRoundoff<T>());
        const auto smallest = static_cast<long double>(SmallestNormal<T>());
        long double bound = 0;
        if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
          bound = world * u * magnitude + smallest;
        } else if (op == ReduceOp::kProd) {
          bound = world * u * std::fabs(exact) + smallest;
        }
        // min and max pick an input, which the dtype holds exactly.
        const long double error = std::fabs(static_cast<long double>(ToDouble(value)) - exact);
        if (!(error <= bound)) {
          return absl::InternalError(absl::StrCat(
              ReduceOpName(op), " of ", world, " ranks, element ", first + i, ": got ",
              Show(value), ", want ", static_cast<double>(exact), " within ",
              static_cast<double>(bound)));
        }
      } else {
        T want = Load<T>(inputs.data[0], first + i);
        for (int r = 1; r < world; ++r) want = IntegerCombine(op, want, Load<T>(inputs.data[r], first + i));
        if (value != want) {
          return absl::InternalError(absl::StrCat(ReduceOpName(op), " of ", world,
                                                  " ranks, element ", first + i, ": got ",
                                                  Show(value), ", want ", Show(want)));
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status ExpectSameBytes(ConstBufferView want, ConstBufferView got, const std::string& what) {
  if (want.dtype() != got.dtype() || want.size() != got.size()) {
    return absl::InternalError(absl::StrCat(what, ": got ", got.size(), " ", DTypeName(got.dtype()),
                                            ", want ", want.size(), " ", DTypeName(want.dtype())));
  }
  // One whole-buffer comparison first: the element loop below only names the first
  // difference, and it is slow under the sanitizers.
  if (want.size_bytes() == 0 || std::memcmp(want.data(), got.data(), want.size_bytes()) == 0) {
    return absl::OkStatus();
  }
  const size_t width = DTypeSize(want.dtype());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(want.data() + i * width, got.data() + i * width, width) != 0) {
      return VisitDType(want.dtype(), [&](auto zero) {
        using T = decltype(zero);
        return absl::InternalError(absl::StrCat(what, ": element ", i, " is ",
                                                Show(LoadView<T>(got, i)), ", want ",
                                                Show(LoadView<T>(want, i))));
      });
    }
  }
  return absl::OkStatus();
}

std::vector<std::byte> RankOrderReduce(const RankInputs& inputs, ReduceOp op, size_t first,
                                       size_t count) {
  const size_t width = DTypeSize(inputs.dtype);
  std::vector<std::byte> acc(inputs.data[0].begin() + first * width,
                             inputs.data[0].begin() + (first + count) * width);
  const ReduceOp kernel_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  for (size_t r = 1; r < inputs.data.size(); ++r) {
    const ConstBufferView src(inputs.data[r].data() + first * width, count, inputs.dtype);
    absl::Status status = ReduceInto(kernel_op, src, MutableViewOf(acc, inputs.dtype));
    if (!status.ok()) return {};
  }
  return acc;
}

}  // namespace collectives_internal
}  // namespace loom
