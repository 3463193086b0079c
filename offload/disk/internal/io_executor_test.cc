// One suite for both engines (io_uring cases skip, with the reason, where this process
// may not use io_uring).
#include "offload/disk/internal/io_executor.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_test_util.h"
#include "offload/disk/internal/thread_pool_executor.h"
#include "offload/disk/internal/uring_executor.h"

namespace loom {
namespace disk_internal {
namespace {

using ::testing::HasSubstr;

enum class Engine { kUring, kThreadPool };

class IoExecutorTest : public ::testing::TestWithParam<Engine> {
 protected:
  void SetUp() override {
    if (GetParam() == Engine::kUring) {
      absl::Status probe = UringExecutor::Probe();
      if (!probe.ok()) GTEST_SKIP() << "io_uring unavailable: " << probe;
      LOOM_ASSERT_OK_AND_ASSIGN(executor_, UringExecutor::Create(4, absl::Seconds(30)));
    } else {
      LOOM_ASSERT_OK_AND_ASSIGN(executor_, ThreadPoolExecutor::Create(4));
    }
    dir_ = disk_testing::MakeTestDirectory("io_executor");
    path_ = dir_ + "/f";
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
  }

  std::unique_ptr<IoExecutor> executor_;
  std::string dir_, path_;
  int fd_ = -1;
};

TEST_P(IoExecutorTest, WritesThenReadsManyOperations) {
  constexpr size_t kOps = 37, kBytes = 8192;
  const std::vector<std::byte> data = disk_testing::SeededBytes(kOps * kBytes, 1);
  std::atomic<int> in_flight{0}, peak{0};
  std::vector<std::atomic<int>> completed(kOps);
  auto prepare_write = [&](size_t i, BounceBuffer& bounce) -> absl::StatusOr<IoOp> {
    const int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    auto b = bounce.Get(kBytes);
    if (!b.ok()) return b.status();
    std::memcpy(b->data(), data.data() + i * kBytes, kBytes);
    return IoOp{IoKind::kWrite, fd_, i * kBytes, b->data(), kBytes, path_};
  };
  auto count = [&](size_t i, const IoOp&) {
    --in_flight;
    ++completed[i];
    return absl::OkStatus();
  };
  LOOM_ASSERT_OK(executor_->Run(kOps, prepare_write, count));
  EXPECT_LE(peak.load(), executor_->MaxInFlight());
  for (size_t i = 0; i < kOps; ++i) EXPECT_EQ(completed[i].load(), 1) << i;
  LOOM_ASSERT_OK(executor_->Run(
      1,
      [&](size_t, BounceBuffer&) -> absl::StatusOr<IoOp> {
        return IoOp{IoKind::kDataSync, fd_, 0, nullptr, 0, path_};
      },
      [](size_t, const IoOp&) { return absl::OkStatus(); }));

  std::vector<std::byte> back(data.size());
  LOOM_ASSERT_OK(executor_->Run(
      kOps,
      [&](size_t i, BounceBuffer&) -> absl::StatusOr<IoOp> {
        return IoOp{IoKind::kRead, fd_, i * kBytes, back.data() + i * kBytes, kBytes, path_};
      },
      [](size_t, const IoOp&) { return absl::OkStatus(); }));
  EXPECT_TRUE(back == data);
}

TEST_P(IoExecutorTest, ReadPastEndOfFileIsDataLoss) {
  std::vector<std::byte> buf(4096);
  EXPECT_THAT(executor_->Run(
                  1,
                  [&](size_t, BounceBuffer&) -> absl::StatusOr<IoOp> {
                    return IoOp{IoKind::kRead, fd_, 0, buf.data(), buf.size(), path_};
                  },
                  [](size_t, const IoOp&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unexpected end of file")));
}

TEST_P(IoExecutorTest, ErrnoNamesTheCallAndTheFile) {
  std::vector<std::byte> buf(4096);
  EXPECT_THAT(executor_->Run(
                  3,
                  [&](size_t, BounceBuffer&) -> absl::StatusOr<IoOp> {
                    return IoOp{IoKind::kWrite, /*fd=*/-5, 0, buf.data(), buf.size(), "/no/such"};
                  },
                  [](size_t, const IoOp&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("write(/no/such, 4096 bytes at offset 0): Bad file descriptor")));
}

TEST_P(IoExecutorTest, FirstPrepareOrCompleteErrorStopsTheRun) {
  std::vector<std::byte> buf(64 * 4096);
  std::atomic<int> prepared{0};
  EXPECT_THAT(executor_->Run(
                  64,
                  [&](size_t i, BounceBuffer&) -> absl::StatusOr<IoOp> {
                    ++prepared;
                    if (i == 5) return absl::AbortedError("stop at 5");
                    return IoOp{IoKind::kWrite, fd_, i * 4096, buf.data() + i * 4096, 4096, path_};
                  },
                  [](size_t, const IoOp&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("stop at 5")));
  EXPECT_LT(prepared.load(), 64);
  EXPECT_THAT(executor_->Run(
                  8,
                  [&](size_t i, BounceBuffer&) -> absl::StatusOr<IoOp> {
                    return IoOp{IoKind::kWrite, fd_, i * 4096, buf.data() + i * 4096, 4096, path_};
                  },
                  [](size_t i, const IoOp&) {
                    return i == 3 ? absl::DataLossError("bad 3") : absl::OkStatus();
                  }),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad 3")));
}

TEST_P(IoExecutorTest, ConcurrentRuns) {
  constexpr int kThreads = 6;
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<std::byte> data = disk_testing::SeededBytes(16 * 4096, 100 + t);
      std::vector<std::byte> back(data.size());
      const uint64_t base = static_cast<uint64_t>(t) << 20;  // a region per thread
      absl::Status s = executor_->Run(
          16,
          [&](size_t i, BounceBuffer&) -> absl::StatusOr<IoOp> {
            return IoOp{IoKind::kWrite,
                        fd_,
                        base + i * 4096,
                        const_cast<std::byte*>(data.data()) + i * 4096,
                        4096,
                        path_};
          },
          [](size_t, const IoOp&) { return absl::OkStatus(); });
      if (s.ok()) {
        s = executor_->Run(
            16,
            [&](size_t i, BounceBuffer&) -> absl::StatusOr<IoOp> {
              return IoOp{IoKind::kRead, fd_, base + i * 4096, back.data() + i * 4096, 4096, path_};
            },
            [](size_t, const IoOp&) { return absl::OkStatus(); });
      }
      if (s.ok() && back != data) s = absl::InternalError("mismatch");
      results[t] = s;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_THAT(s, IsOk());
}

INSTANTIATE_TEST_SUITE_P(Engines, IoExecutorTest,
                         ::testing::Values(Engine::kUring, Engine::kThreadPool),
                         [](const ::testing::TestParamInfo<Engine>& param) {
                           return param.param == Engine::kUring ? "io_uring" : "thread_pool";
                         });

TEST(UringExecutorTest, NeverHangsOnAnOperationThatDoesNotComplete) {
  absl::Status probe = UringExecutor::Probe();
  if (!probe.ok()) GTEST_SKIP() << "io_uring unavailable: " << probe;
  LOOM_ASSERT_OK_AND_ASSIGN(auto executor, UringExecutor::Create(4, absl::Milliseconds(200)));
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::vector<std::byte> buf(4096);
  const absl::Time start = absl::Now();
  // Nobody writes into the pipe: the read never completes and must be cancelled.
  EXPECT_THAT(executor->Run(
                  1,
                  [&](size_t, BounceBuffer&) -> absl::StatusOr<IoOp> {
                    return IoOp{IoKind::kRead, pipe_fds[0], 0, buf.data(), buf.size(), "pipe"};
                  },
                  [](size_t, const IoOp&) { return absl::OkStatus(); }),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("no I/O completed within 200ms; 1 in flight, e.g. read(pipe")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(UringExecutorTest, RejectsBadSettings) {
  EXPECT_THAT(UringExecutor::Create(0, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got 0")));
  EXPECT_THAT(UringExecutor::Create(4, absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout must be positive")));
  EXPECT_THAT(ThreadPoolExecutor::Create(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 1 thread, got 0")));
}

}  // namespace
}  // namespace disk_internal
}  // namespace loom
