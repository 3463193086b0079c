// The nccl transport. Option checks, NCCL's error texts as Status and the type
// tables run on every machine; a world of one rank needs one CUDA device (skipped
// without); the multi-rank cases run ranks as threads of this process, each on a
// device of its own over an inproc bootstrap, and skip below two devices.
#include "collectives/transport/nccl/nccl_transport.h"

#include <nccl.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/nccl/internal/nccl_call.h"
#include "collectives/transport/nccl/internal/nccl_types.h"
#include "core/dtype.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/device_buffer.h"
#include "core/reduce_op.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

int DeviceCount() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() ? *count : 0;
}

std::unique_ptr<Transport> SoloBootstrap() {
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(1);
  if (!group.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(0);
  return endpoint.ok() ? std::move(*endpoint) : nullptr;
}

// Distinct per (rank, index), small enough that sums of a few ranks stay exact.
std::vector<int32_t> Ints(int rank, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = rank * 1000003 + static_cast<int32_t>(i * 7 % 999983) - 500;
  return v;
}

// Seeded floats in [-1, 1).
std::vector<float> Floats(int rank, size_t n) {
  std::vector<float> v(n);
  uint32_t x = 0x9e3779b9u * static_cast<uint32_t>(rank + 1);
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

template <typename T>
absl::StatusOr<DeviceBuffer> ToDevice(const std::vector<T>& values, int device) {
  absl::StatusOr<DeviceBuffer> buffer =
      DeviceBuffer::Allocate(MemorySpace::kDevice, values.size() * sizeof(T), device);
  if (!buffer.ok()) return buffer.status();
  absl::Status copied = buffer->CopyFromHost(AsBytes(values));
  if (!copied.ok()) return copied;
  return buffer;
}

template <typename T>
std::vector<T> FromDevice(const DeviceBuffer& buffer) {
  std::vector<T> values(buffer.size() / sizeof(T));
  EXPECT_THAT(buffer.CopyToHost(AsWritableBytes(values)), IsOk());
  return values;
}

absl::Span<std::byte> View(DeviceBuffer& b) { return {b.data(), b.size()}; }

// --- Everywhere: NCCL's errors, the type tables, option checks. ----------------------

TEST(NcclCallTest, MapsResultsToCodesWithNcclsText) {
  using nccl_internal::NcclStatus;
  EXPECT_THAT(NcclStatus(ncclSuccess, "ncclGroupEnd()"), IsOk());
  EXPECT_THAT(NcclStatus(ncclInProgress, "ncclGroupEnd()"), IsOk());
  EXPECT_THAT(NcclStatus(ncclInvalidArgument, "ncclSend(buf, n, ncclUint8, 9, comm, stream)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("ncclSend(buf, n, ncclUint8, 9, comm, stream) failed: "
                                        "ncclInvalidArgument (4): "),
                             HasSubstr(ncclGetErrorString(ncclInvalidArgument)))));
  EXPECT_THAT(NcclStatus(ncclInvalidUsage, "ncclCommInitRankConfig"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ncclInvalidUsage (5)")));
  EXPECT_THAT(NcclStatus(ncclRemoteError, "ncclRecv"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("ncclRemoteError (6)")));
  EXPECT_THAT(NcclStatus(ncclSystemError, "ncclGetUniqueId(&id)"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("ncclSystemError (2)")));
  EXPECT_THAT(NcclStatus(ncclUnhandledCudaError, "ncclAllReduce"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("ncclUnhandledCudaError (1)")));
  EXPECT_THAT(NcclStatus(static_cast<ncclResult_t>(42), "x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("ncclResult_t(42) (42)")));
}

TEST(NcclCallTest, CarriesNcclsLastErrorMessage) {
  // A real NCCL failure on any machine: a communicator of 0 ranks. NCCL refuses it
  // (ncclInvalidArgument), or, without a CUDA driver, fails earlier on CUDA
  // (ncclUnhandledCudaError); either way it records why, and the Status carries it.
  ncclUniqueId id{};
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRank(&comm, 0, id, 0);
  ASSERT_TRUE(result == ncclInvalidArgument || result == ncclUnhandledCudaError)
      << nccl_internal::NcclResultName(result);
  const std::string last = ncclGetLastError(nullptr);
  ASSERT_FALSE(last.empty());
  EXPECT_THAT(nccl_internal::NcclStatus(result, "ncclCommInitRank(&comm, 0, id, 0)"),
              StatusIs(result == ncclInvalidArgument ? absl::StatusCode::kInvalidArgument
                                                     : absl::StatusCode::kInternal,
                       AllOf(StartsWith("ncclCommInitRank(&comm, 0, id, 0) failed: " +
                                        nccl_internal::NcclResultName(result)),
                             HasSubstr("; NCCL says: " + last))));
}

TEST(NcclTypesTest, EveryDTypeAndOpMaps) {
  using nccl_internal::NcclDataType;
  using nccl_internal::NcclRedOp;
  const std::vector<std::pair<DType, ncclDataType_t>> types = {
      {DType::kF32, ncclFloat32},   {DType::kF64, ncclFloat64}, {DType::kF16, ncclFloat16},
      {DType::kBF16, ncclBfloat16}, {DType::kI8, ncclInt8},     {DType::kU8, ncclUint8},
      {DType::kI32, ncclInt32},     {DType::kI64, ncclInt64}};
  ASSERT_EQ(types.size(), AllDTypes().size());
  for (const auto& [dtype, nccl] : types)
    EXPECT_THAT(NcclDataType(dtype), IsOkAndHolds(nccl)) << dtype;
  const std::vector<std::pair<ReduceOp, ncclRedOp_t>> ops = {{ReduceOp::kSum, ncclSum},
                                                             {ReduceOp::kProd, ncclProd},
                                                             {ReduceOp::kMin, ncclMin},
                                                             {ReduceOp::kMax, ncclMax},
                                                             {ReduceOp::kAvg, ncclAvg}};
  ASSERT_EQ(ops.size(), AllReduceOps().size());
  for (const auto& [op, nccl] : ops) EXPECT_THAT(NcclRedOp(op), IsOkAndHolds(nccl)) << op;
  EXPECT_THAT(NcclDataType(static_cast<DType>(99)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("DType(99)")));
  EXPECT_THAT(NcclRedOp(static_cast<ReduceOp>(99)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ReduceOp(99)")));
}

TEST(NcclTransportTest, RejectsBadOptionsBeforeTouchingTheDevice) {
  std::unique_ptr<Transport> bootstrap = SoloBootstrap();
  ASSERT_NE(bootstrap, nullptr);
  NcclTransportOptions options;
  options.connect_timeout = absl::ZeroDuration();
  EXPECT_THAT(
      ConnectNcclTransport(*bootstrap, 0, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("connect_timeout 0 is not positive")));
  options = {};
  options.native_timeout = -absl::Seconds(1);
  EXPECT_THAT(ConnectNcclTransport(*bootstrap, 0, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("native_timeout -1s is not positive")));
  options = {};
  options.close_timeout = -absl::Milliseconds(5);
  EXPECT_THAT(
      ConnectNcclTransport(*bootstrap, 0, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("close_timeout -5ms is negative")));
  options = {};
  options.spin_iterations = -3;
  EXPECT_THAT(
      ConnectNcclTransport(*bootstrap, 0, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spin_iterations -3 is negative")));
}

TEST(NcclTransportTest, NeedsACudaDevice) {
  if (DeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  std::unique_ptr<Transport> bootstrap = SoloBootstrap();
  ASSERT_NE(bootstrap, nullptr);
  EXPECT_THAT(ConnectNcclTransport(*bootstrap, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST(NcclTransportTest, EveryRankFailsAtOnceWithoutADevice) {
  if (DeviceCount() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  constexpr int kRanks = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(kRanks));
  std::vector<absl::Status> results(kRanks);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> bootstrap = group->Endpoint(r);
      if (!bootstrap.ok()) {
        results[r] = bootstrap.status();
        return;
      }
      NcclTransportOptions options;
      options.connect_timeout = absl::Seconds(30);
      results[r] = ConnectNcclTransport(**bootstrap, r, options).status();
    });
  }
  for (auto& thread : threads) thread.join();
  // Rank 0 still sends its (empty) id, so no rank waits for the 30 s deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_THAT(results[r],
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")))
        << "rank " << r;
  }
}

TEST(NcclTransportTest, RejectsADeviceOutOfRange) {
  const int devices = DeviceCount();
  if (devices == 0) GTEST_SKIP() << "no CUDA device on this machine";
  std::unique_ptr<Transport> bootstrap = SoloBootstrap();
  ASSERT_NE(bootstrap, nullptr);
  EXPECT_THAT(
      ConnectNcclTransport(*bootstrap, devices),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr(absl::StrCat("CUDA device ", devices, " is outside [0, ", devices, ")"))));
}

// --- One rank on one device. ---------------------------------------------------------

class NcclWorldOfOneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
    bootstrap_ = SoloBootstrap();
    ASSERT_NE(bootstrap_, nullptr);
    NcclTransportOptions options;
    options.native_timeout = absl::Seconds(60);
    LOOM_ASSERT_OK_AND_ASSIGN(transport_, ConnectNcclTransport(*bootstrap_, 0, options));
  }

  std::unique_ptr<Transport> bootstrap_;
  std::unique_ptr<Transport> transport_;
};

TEST_F(NcclWorldOfOneTest, SendsToItselfMatchingByTagNotPostingOrder) {
  EXPECT_EQ(transport_->name(), "nccl");
  EXPECT_EQ(transport_->rank(), 0);
  EXPECT_EQ(transport_->size(), 1);
  // Three equal-sized messages, so a wrong match shows as wrong data, not a hang.
  constexpr size_t kN = 4099;
  std::vector<std::vector<int32_t>> sent;
  std::vector<DeviceBuffer> out, in;
  for (int m = 0; m < 3; ++m) {
    sent.push_back(Ints(m + 1, kN));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer o, ToDevice(sent.back(), 0));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer i, ToDevice(std::vector<int32_t>(kN, -1), 0));
    out.push_back(std::move(o));
    in.push_back(std::move(i));
  }
  for (int round = 0; round < 2; ++round) {
    std::vector<Request> requests;
    for (const int m : {2, 0, 1}) {
      LOOM_ASSERT_OK_AND_ASSIGN(Request r, transport_->Recv(0, /*tag=*/10 + m, View(in[m])));
      requests.push_back(r);
    }
    for (const int m : {1, 2, 0}) {
      LOOM_ASSERT_OK_AND_ASSIGN(Request s, transport_->Send(0, /*tag=*/10 + m, View(out[m])));
      requests.push_back(s);
    }
    LOOM_ASSERT_OK_AND_ASSIGN(Request empty_send, transport_->Send(0, 99, {}));
    LOOM_ASSERT_OK_AND_ASSIGN(Request empty_recv, transport_->Recv(0, 99, {}));
    requests.push_back(empty_send);
    requests.push_back(empty_recv);
    ASSERT_THAT(transport_->Wait(requests, absl::Now() + absl::Seconds(60)), IsOk());
    for (int m = 0; m < 3; ++m) EXPECT_EQ(FromDevice<int32_t>(in[m]), sent[m]) << "message " << m;
    // Each request is waited for once.
    EXPECT_THAT(transport_->Wait({requests[0]}, absl::Now() + absl::Seconds(1)),
                StatusIs(absl::StatusCode::kNotFound, HasSubstr("already waited")));
  }
}

TEST_F(NcclWorldOfOneTest, RefusesWhatNcclCannotDo) {
  std::vector<int32_t> host(16, 1);
  EXPECT_THAT(
      transport_->Send(0, 1, AsBytes(host)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("send to rank 0 (tag 1, 64 bytes)"), HasSubstr("is host memory"))));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer device, ToDevice(host, 0));
  EXPECT_THAT(
      transport_->Send(1, 1, View(device)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("send to peer 1 is outside [0, 1)")));
  Combiner add;
  add.fn = [](const void*, std::byte*, const std::byte*, size_t, size_t) {};
  EXPECT_THAT(transport_->RecvCombine(0, 1, View(device), add),
              StatusIs(absl::StatusCode::kUnimplemented,
                       HasSubstr("combining receives are not supported")));
  EXPECT_THAT(transport_->Wait({Request{12345}}, absl::Now() + absl::Seconds(1)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("request 12345")));
}

// NCCL (2.28 on an H100) checks a rank's receives from itself when the group ends: one
// that no send matches is ncclInvalidUsage at once, not a receive left pending. The
// error breaks the endpoint, and later calls repeat it. (A receive left pending until
// the deadline needs a peer that never sends, so two GPUs: see README.md.)
TEST_F(NcclWorldOfOneTest, AnUnmatchedReceiveFromSelfIsNcclsErrorAndBreaksTheEndpoint) {
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer buffer, ToDevice(std::vector<int32_t>(16, 0), 0));
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, transport_->Recv(0, 5, View(buffer)));
  const absl::Time start = absl::Now();
  EXPECT_THAT(transport_->Wait({r}, absl::Now() + absl::Seconds(20)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("ncclGroupEnd"), HasSubstr("ncclInvalidUsage"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_THAT(transport_->Send(0, 5, View(buffer)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("ncclInvalidUsage")));
}

TEST_F(NcclWorldOfOneTest, AbortFailsLaterRequestsWithTheReason) {
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer buffer, ToDevice(std::vector<int32_t>(16, 0), 0));
  LOOM_ASSERT_OK_AND_ASSIGN(Request queued, transport_->Recv(0, 5, View(buffer)));
  transport_->Abort(absl::CancelledError("training step 7 failed"));
  EXPECT_THAT(transport_->Wait({queued}, absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kCancelled, "training step 7 failed"));
  EXPECT_THAT(transport_->Send(0, 5, View(buffer)),
              StatusIs(absl::StatusCode::kCancelled, "training step 7 failed"));
  EXPECT_THAT(transport_->native()->Barrier(),
              StatusIs(absl::StatusCode::kCancelled, "training step 7 failed"));
}

TEST_F(NcclWorldOfOneTest, NativeCollectivesOfOneRankAreIdentities) {
  NativeCollectives* native = transport_->native();
  ASSERT_NE(native, nullptr);
  EXPECT_THAT(native->name(), StartsWith("NCCL 2."));
  constexpr size_t kN = 1001;
  const std::vector<int32_t> ints = Ints(3, kN);
  const std::vector<float> floats = Floats(3, kN);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer in, ToDevice(ints, 0));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer out, ToDevice(std::vector<int32_t>(kN, 0), 0));
  ASSERT_THAT(native->AllReduce(in.data(), out.data(), kN, DType::kI32, ReduceOp::kSum), IsOk());
  EXPECT_EQ(FromDevice<int32_t>(out), ints);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer f, ToDevice(floats, 0));
  ASSERT_THAT(native->AllReduce(f.data(), f.data(), kN, DType::kF32, ReduceOp::kAvg), IsOk());
  EXPECT_EQ(FromDevice<float>(f), floats);  // the average of one value is that value
  ASSERT_THAT(native->ReduceScatter(in.data(), in.data(), kN, DType::kI32, ReduceOp::kMax), IsOk());
  ASSERT_THAT(native->AllGather(in.data(), out.data(), kN, DType::kI32), IsOk());
  EXPECT_EQ(FromDevice<int32_t>(out), ints);
  ASSERT_THAT(native->Broadcast(in.data(), out.data(), kN, DType::kI32, 0), IsOk());
  ASSERT_THAT(native->Reduce(out.data(), out.data(), kN, DType::kI32, ReduceOp::kMin, 0), IsOk());
  ASSERT_THAT(native->AllToAll(out.data(), out.data(), kN, DType::kI32), IsOk());
  EXPECT_EQ(FromDevice<int32_t>(out), ints);
  ASSERT_THAT(native->Barrier(), IsOk());
  EXPECT_THAT(native->Broadcast(in.data(), out.data(), kN, DType::kI32, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root 1 is outside [0, 1)")));
  // Point-to-point after native work: both run on the one stream.
  LOOM_ASSERT_OK_AND_ASSIGN(Request s, transport_->Send(0, 1, View(in)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, transport_->Recv(0, 1, View(out)));
  ASSERT_THAT(transport_->Wait({s, r}, absl::Now() + absl::Seconds(60)), IsOk());
  EXPECT_EQ(FromDevice<int32_t>(out), ints);
}

// --- Several ranks, threads of this process, one device each. ------------------------

// RunRanks connects `ranks` thread ranks (rank r on device r) and runs `body` on each;
// skips unless the machine has a device per rank.
template <typename Body>
void RunRanks(int ranks, Body body) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> bootstrap, group->Endpoint(r));
      NcclTransportOptions options;
      options.native_timeout = absl::Seconds(60);
      LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> transport,
                                ConnectNcclTransport(*bootstrap, /*device=*/r, options));
      EXPECT_EQ(transport->rank(), r);
      EXPECT_EQ(transport->size(), ranks);
      body(r, *transport);
    });
  }
  for (auto& thread : threads) thread.join();
}

class NcclMultiRankTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (DeviceCount() < GetParam()) {
      GTEST_SKIP() << GetParam() << " ranks need " << GetParam()
                   << " CUDA devices; this machine has " << DeviceCount();
    }
  }
};

TEST_P(NcclMultiRankTest, RingExchangeMatchesByTag) {
  const int n = GetParam();
  RunRanks(n, [n](int rank, Transport& t) {
    const int right = (rank + 1) % n, left = (rank + n - 1) % n;
    constexpr size_t kN = 65537;
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer to_right, ToDevice(Ints(rank, kN), rank));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer to_left, ToDevice(Ints(rank + 100, kN), rank));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer from_left, ToDevice(std::vector<int32_t>(kN, 0), rank));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer from_right, ToDevice(std::vector<int32_t>(kN, 0), rank));
    // Ranks post in different orders; both messages between a pair have the same size,
    // so only tag-ordered issuing keeps them apart.
    std::vector<Request> requests;
    for (int step = 0; step < 4; ++step) {
      const int which = (step + rank) % 4;
      absl::StatusOr<Request> request;
      if (which == 0) request = t.Send(right, 1, View(to_right));
      if (which == 1) request = t.Recv(left, 1, View(from_left));
      if (which == 2) request = t.Recv(right, 2, View(from_right));
      if (which == 3) request = t.Send(left, 2, View(to_left));
      ASSERT_THAT(request, IsOk());
      requests.push_back(*request);
    }
    ASSERT_THAT(t.Wait(requests, absl::Now() + absl::Seconds(60)), IsOk());
    EXPECT_EQ(FromDevice<int32_t>(from_left), Ints(left, kN)) << "rank " << rank;
    EXPECT_EQ(FromDevice<int32_t>(from_right), Ints(right + 100, kN)) << "rank " << rank;
  });
}

TEST_P(NcclMultiRankTest, NativeAllReduceMatchesTheHost) {
  const int n = GetParam();
  constexpr size_t kN = 100003;
  std::vector<int32_t> sum(kN, 0), max(kN, INT32_MIN);
  std::vector<double> fsum(kN, 0), fabs_sum(kN, 0);
  for (int r = 0; r < n; ++r) {
    const std::vector<int32_t> ints = Ints(r, kN);
    const std::vector<float> floats = Floats(r, kN);
    for (size_t i = 0; i < kN; ++i) {
      sum[i] += ints[i];
      max[i] = std::max(max[i], ints[i]);
      fsum[i] += static_cast<double>(floats[i]);
      fabs_sum[i] += std::fabs(static_cast<double>(floats[i]));
    }
  }
  RunRanks(n, [&](int rank, Transport& t) {
    NativeCollectives* native = t.native();
    ASSERT_NE(native, nullptr);
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer ints, ToDevice(Ints(rank, kN), rank));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer out, ToDevice(std::vector<int32_t>(kN, 0), rank));
    ASSERT_THAT(native->AllReduce(ints.data(), out.data(), kN, DType::kI32, ReduceOp::kSum),
                IsOk());
    EXPECT_EQ(FromDevice<int32_t>(out), sum) << "rank " << rank;
    ASSERT_THAT(native->AllReduce(ints.data(), ints.data(), kN, DType::kI32, ReduceOp::kMax),
                IsOk());
    EXPECT_EQ(FromDevice<int32_t>(ints), max) << "rank " << rank;
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer floats, ToDevice(Floats(rank, kN), rank));
    ASSERT_THAT(native->AllReduce(floats.data(), floats.data(), kN, DType::kF32, ReduceOp::kSum),
                IsOk());
    const std::vector<float> got = FromDevice<float>(floats);
    // Bound: n - 1 roundings of partial sums, each at most FLT_EPSILON of the sum of
    // the magnitudes so far.
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_LE(std::fabs(static_cast<double>(got[i]) - fsum[i]),
                n * double{FLT_EPSILON} * fabs_sum[i])
          << "rank " << rank << " element " << i;
    }
    ASSERT_THAT(native->Barrier(), IsOk());
  });
}

TEST_P(NcclMultiRankTest, NativeCollectivesMatchTheirDefinitions) {
  const int n = GetParam();
  constexpr size_t kBlock = 4097;  // per rank
  RunRanks(n, [&](int rank, Transport& t) {
    NativeCollectives* native = t.native();
    ASSERT_NE(native, nullptr);
    // Reduce-scatter, in place with the result at the front: block `rank` of the sum.
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer rs, ToDevice(Ints(rank, kBlock * n), rank));
    ASSERT_THAT(native->ReduceScatter(rs.data(), rs.data(), kBlock, DType::kI32, ReduceOp::kSum),
                IsOk());
    std::vector<int32_t> want(kBlock, 0);
    for (int r = 0; r < n; ++r) {
      const std::vector<int32_t> v = Ints(r, kBlock * n);
      for (size_t i = 0; i < kBlock; ++i) want[i] += v[rank * kBlock + i];
    }
    std::vector<int32_t> got = FromDevice<int32_t>(rs);
    got.resize(kBlock);
    EXPECT_EQ(got, want) << "reduce-scatter, rank " << rank;

    // All-gather, in place with this rank's block at the front.
    std::vector<int32_t> gather_in = Ints(rank, kBlock);
    gather_in.resize(kBlock * n, -7);
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer ag, ToDevice(gather_in, rank));
    ASSERT_THAT(native->AllGather(ag.data(), ag.data(), kBlock, DType::kI32), IsOk());
    std::vector<int32_t> gathered;
    for (int r = 0; r < n; ++r) {
      const std::vector<int32_t> v = Ints(r, kBlock);
      gathered.insert(gathered.end(), v.begin(), v.end());
    }
    EXPECT_EQ(FromDevice<int32_t>(ag), gathered) << "all-gather, rank " << rank;

    // Broadcast from rank 1 and reduce (prod of small values) to the last rank.
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer bc, ToDevice(Ints(rank, kBlock), rank));
    ASSERT_THAT(native->Broadcast(bc.data(), bc.data(), kBlock, DType::kI32, 1), IsOk());
    EXPECT_EQ(FromDevice<int32_t>(bc), Ints(1, kBlock)) << "broadcast, rank " << rank;
    std::vector<int64_t> small(kBlock);
    for (size_t i = 0; i < kBlock; ++i) small[i] = static_cast<int64_t>((i + rank) % 5) - 2;
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer rd, ToDevice(small, rank));
    ASSERT_THAT(native->Reduce(rd.data(), rd.data(), kBlock, DType::kI64, ReduceOp::kProd, n - 1),
                IsOk());
    if (rank == n - 1) {
      std::vector<int64_t> prod(kBlock, 1);
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < kBlock; ++i) prod[i] *= static_cast<int64_t>((i + r) % 5) - 2;
      }
      EXPECT_EQ(FromDevice<int64_t>(rd), prod) << "reduce";
    }

    // All-to-all in place: block p of rank r's input lands as block r on rank p.
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer aa, ToDevice(Ints(rank, kBlock * n), rank));
    ASSERT_THAT(native->AllToAll(aa.data(), aa.data(), kBlock, DType::kI32), IsOk());
    std::vector<int32_t> exchanged;
    for (int r = 0; r < n; ++r) {
      const std::vector<int32_t> v = Ints(r, kBlock * n);
      exchanged.insert(exchanged.end(), v.begin() + rank * kBlock, v.begin() + (rank + 1) * kBlock);
    }
    EXPECT_EQ(FromDevice<int32_t>(aa), exchanged) << "all-to-all, rank " << rank;
    ASSERT_THAT(native->Barrier(), IsOk());
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, NcclMultiRankTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return absl::StrCat(p.param, "ranks");
                         });

}  // namespace
}  // namespace loom
