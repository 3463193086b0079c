// GpuAdamWStep against the CPU AdamW (offload/adamw/cpu_adamw.h). The argument checks
// that need no device run on every machine; the comparisons skip (reported as skipped)
// where there is no CUDA device.
//
// The bound is exact equality of bits. The kernel spells every operation as a
// round-to-nearest intrinsic (no contraction into FMA, correctly rounded sqrt and
// division), the CPU path is built with -ffp-contract=off, and both use the same f32
// constants derived on the host in double; IEEE 754 then fixes every result. A
// difference of even one ulp means the two paths no longer compute the same formula
// (an FMA crept in, an approximate sqrt, a constant derived differently) and fails.
#include "offload/gpu/gpu_adamw.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/half.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

bool HasDevice() {
  const absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

std::vector<float> Seeded(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

GpuAdamWTensors HostTensors(std::vector<float>& p, const std::vector<float>& g,
                            std::vector<float>& m, std::vector<float>& v) {
  return {absl::MakeSpan(p), absl::MakeConstSpan(g), absl::MakeSpan(m), absl::MakeSpan(v)};
}

// --- Checks that run without a device: none of them reaches CUDA. ---------------

TEST(GpuAdamWValidationTest, HyperparametersAreTheCpuAdamWs) {
  std::vector<float> p(4), g(4), m(4), v(4);
  AdamWHyper hyper;
  hyper.beta1 = 1.5f;
  EXPECT_THAT(GpuAdamWStep(hyper, HostTensors(p, g, m, v), CudaStream()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWHyper: beta1 is 1.5; it must be in [0, 1)")));
  hyper = AdamWHyper();
  hyper.step = 0;
  EXPECT_THAT(GpuAdamWStep(hyper, HostTensors(p, g, m, v), CudaStream()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step is 0")));
}

TEST(GpuAdamWValidationTest, SizesMustMatch) {
  std::vector<float> p(4), g(4), m(3), v(4);
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), HostTensors(p, g, m, v), CudaStream()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GpuAdamWStep: params has 4 elements but exp_avg has 3")));
  std::vector<float> m4(4);
  std::vector<BFloat16> half(5);
  EXPECT_THAT(
      GpuAdamWStep(AdamWHyper(), HostTensors(p, g, m4, v), CudaStream(), absl::MakeSpan(half)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("GpuAdamWStep: params has 4 elements but bf16 half copy has 5")));
}

TEST(GpuAdamWValidationTest, SpansMustNotOverlap) {
  std::vector<float> pm(7), g(4), v(4);
  const GpuAdamWTensors t = {absl::MakeSpan(pm).subspan(0, 4), absl::MakeConstSpan(g),
                             absl::MakeSpan(pm).subspan(3, 4), absl::MakeSpan(v)};
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), t, CudaStream()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GpuAdamWStep: params and exp_avg overlap")));
  std::vector<float> p(4), m(4);
  std::vector<Float16> half(4);
  const GpuAdamWTensors t2 = {absl::MakeSpan(p), absl::MakeConstSpan(g), absl::MakeSpan(m),
                              absl::MakeSpan(v)};
  HalfCopy over_grads(absl::MakeSpan(reinterpret_cast<Float16*>(const_cast<float*>(g.data())), 4));
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), t2, CudaStream(), over_grads),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GpuAdamWStep: grads and f16 half copy overlap")));
}

TEST(GpuAdamWValidationTest, AnEmptyStreamIsRefused) {
  std::vector<float> p(4), g(4), m(4), v(4);
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), HostTensors(p, g, m, v), CudaStream()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("GpuAdamWStep: the stream is empty")));
}

// --- With a device. -----------------------------------------------------------

TEST(GpuAdamWDeviceTest, HostMemoryIsRefusedNamingTheSpan) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create(0));
  std::vector<float> p(4), g(4), m(4), v(4);
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), HostTensors(p, g, m, v), stream),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       MatchesRegex("GpuAdamWStep: params \\(0x[0-9a-f]+\\) is pageable host "
                                    "memory, not memory of CUDA device 0")));
  // Device params but host grads: the second span is named.
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer d, DeviceBuffer::Allocate(MemorySpace::kDevice, 16));
  GpuAdamWTensors t = HostTensors(p, g, m, v);
  t.params = absl::MakeSpan(reinterpret_cast<float*>(d.data()), 4);
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), t, stream),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grads (0x")));
  // Nothing at all is fine.
  EXPECT_THAT(GpuAdamWStep(AdamWHyper(), GpuAdamWTensors(), stream), IsOk());
}

// Bits of two float arrays: the first difference and the largest ulp distance.
void ExpectSameBits(absl::Span<const float> want, absl::Span<const float> got,
                    const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  size_t differing = 0;
  int64_t max_ulp = 0;
  size_t first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    int32_t a, b;
    std::memcpy(&a, &want[i], 4);
    std::memcpy(&b, &got[i], 4);
    if (a == b) continue;
    if (differing++ == 0) first = i;
    // Ordered integers of the floats (sign-magnitude to two's complement).
    const int64_t oa = a < 0 ? int64_t{INT32_MIN} - a : a;
    const int64_t ob = b < 0 ? int64_t{INT32_MIN} - b : b;
    max_ulp = std::max(max_ulp, oa > ob ? oa - ob : ob - oa);
  }
  EXPECT_EQ(differing, 0u) << what << ": " << differing << " of " << want.size()
                           << " elements differ from the CPU AdamW, up to " << max_ulp
                           << " ulp; first at " << first << ": cpu " << want[first] << " gpu "
                           << got[first];
}

template <typename T>
absl::Span<std::byte> Bytes(std::vector<T>& v) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(T));
}
template <typename T>
absl::Span<const std::byte> Bytes(const std::vector<T>& v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T));
}

enum class Half { kNone, kBF16, kF16 };

struct Case {
  size_t n;
  Half half;
  // Elements before the spans start: 1 puts them off the 16-byte alignment the
  // four-a-thread kernel needs, so the scalar kernel takes the whole step.
  size_t offset = 0;
};

class GpuAdamWMatchesCpuTest : public ::testing::TestWithParam<Case> {};

// Several steps with fresh, distinct gradients each time and the hyperparameters moving
// (as a schedule and a clipping factor would), the state carried on each side.
TEST_P(GpuAdamWMatchesCpuTest, SameBitsAsTheCpuAdamW) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  const size_t n = GetParam().n;
  const Half half = GetParam().half;
  const size_t off = GetParam().offset;
  std::vector<float> cpu_params = Seeded(n, 1 + n, -1.0f, 1.0f);
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState cpu_state, AdamWState::Create(n, StateFormat::kF32));
  std::vector<uint16_t> cpu_half(n), gpu_half(n);

  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create(0));
  const size_t bytes = (n + off) * sizeof(float);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer p, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer g, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer m, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer v, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer h, DeviceBuffer::Allocate(MemorySpace::kDevice, (n + off) * 2));
  // The spans start `off` elements into each buffer.
  const auto at = [off](DeviceBuffer& b) { return reinterpret_cast<float*>(b.data()) + off; };
  std::vector<float> padded(off, 0.0f);
  padded.insert(padded.end(), cpu_params.begin(), cpu_params.end());
  ASSERT_THAT(p.CopyFromHost(Bytes(padded)), IsOk());
  const std::vector<float> zeros(n + off, 0.0f);
  ASSERT_THAT(m.CopyFromHost(Bytes(zeros)), IsOk());
  ASSERT_THAT(v.CopyFromHost(Bytes(zeros)), IsOk());
  const GpuAdamWTensors t = {
      absl::MakeSpan(at(p), n),
      absl::MakeConstSpan(at(g), n),
      absl::MakeSpan(at(m), n),
      absl::MakeSpan(at(v), n),
  };
  const auto half_of = [&](uint16_t* bits) -> HalfCopy {
    switch (half) {
      case Half::kNone: return HalfCopy();
      case Half::kBF16: return absl::MakeSpan(reinterpret_cast<BFloat16*>(bits), n);
      case Half::kF16: return absl::MakeSpan(reinterpret_cast<Float16*>(bits), n);
    }
    return HalfCopy();
  };

  for (int64_t step = 1; step <= 5; ++step) {
    SCOPED_TRACE(absl::StrCat("n ", n, " step ", step));
    // Gradients spanning several binades, so small v (and eps) matter too.
    const std::vector<float> grads = Seeded(n, 1000 * step + n, -1.0f, 1.0f);
    std::vector<float> scaled = grads;
    for (size_t i = 0; i < n; ++i) scaled[i] *= (i % 3 == 0) ? 1e-3f : 1.0f;
    AdamWHyper hyper;
    hyper.step = step;
    hyper.lr = 1e-3f * static_cast<float>(step);
    hyper.weight_decay = step % 2 == 0 ? 0.1f : 0.0f;
    hyper.grad_scale = step == 3 ? 0.25f : 1.0f;
    hyper.beta2 = step >= 4 ? 0.95f : 0.999f;

    ASSERT_THAT(AdamWStep(hyper, absl::MakeSpan(cpu_params), scaled, cpu_state, AdamWOptions(),
                          half_of(cpu_half.data())),
                IsOk());
    std::vector<float> padded_grads(off, 0.0f);
    padded_grads.insert(padded_grads.end(), scaled.begin(), scaled.end());
    ASSERT_THAT(g.CopyFromHost(Bytes(padded_grads)), IsOk());
    // A cudaMemcpy from pageable memory may return before its DMA lands, ordered only
    // on the legacy stream, which `stream` (non-blocking) does not wait for.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_THAT(GpuAdamWStep(hyper, t, stream, half_of(reinterpret_cast<uint16_t*>(h.data()) + off)),
                IsOk());
    ASSERT_THAT(stream.Synchronize(absl::Now() + absl::Seconds(30)), IsOk());

    std::vector<float> gpu_params(n + off), gpu_m(n + off), gpu_v(n + off), cpu_m(n), cpu_v(n);
    ASSERT_THAT(p.CopyToHost(Bytes(gpu_params)), IsOk());
    ASSERT_THAT(m.CopyToHost(Bytes(gpu_m)), IsOk());
    ASSERT_THAT(v.CopyToHost(Bytes(gpu_v)), IsOk());
    gpu_params.erase(gpu_params.begin(), gpu_params.begin() + off);
    gpu_m.erase(gpu_m.begin(), gpu_m.begin() + off);
    gpu_v.erase(gpu_v.begin(), gpu_v.begin() + off);
    ASSERT_THAT(cpu_state.ReadMoments(absl::MakeSpan(cpu_m), absl::MakeSpan(cpu_v)), IsOk());
    ExpectSameBits(cpu_params, gpu_params, "params");
    ExpectSameBits(cpu_m, gpu_m, "exp_avg");
    ExpectSameBits(cpu_v, gpu_v, "exp_avg_sq");
    if (half != Half::kNone) {
      std::vector<uint16_t> all_half(n + off);
      ASSERT_THAT(h.CopyToHost(Bytes(all_half)), IsOk());
      gpu_half.assign(all_half.begin() + off, all_half.end());
      EXPECT_EQ(cpu_half, gpu_half) << "half copy";
    }
    if (HasFailure()) break;
  }
  // The step did something: the params moved from where they started.
  EXPECT_NE(cpu_params, Seeded(n, 1 + n, -1.0f, 1.0f));
}

INSTANTIATE_TEST_SUITE_P(Sizes, GpuAdamWMatchesCpuTest,
                         ::testing::Values(Case{1, Half::kNone}, Case{1000, Half::kBF16},
                                           Case{1000, Half::kF16},
                                           Case{(size_t{1} << 20) + 3, Half::kNone},
                                           Case{(size_t{1} << 20) + 3, Half::kBF16},
                                           Case{1001, Half::kBF16, 1}, Case{1001, Half::kF16, 1}),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           const char* half = param.param.half == Half::kNone   ? "f32"
                                              : param.param.half == Half::kBF16 ? "bf16copy"
                                                                                : "f16copy";
                           return absl::StrCat("n", param.param.n, "_", half,
                                               param.param.offset > 0 ? "_unaligned" : "");
                         });

}  // namespace
}  // namespace loom
