// Heartbeats over MPI, in a real mpirun job of 4 processes: a stopped rank is
// reported by the rank waiting on it within its heartbeat timeout, naming its world
// rank and pid; a busy rank (alive, computing) is not; a rank that closed its
// endpoint is not reported as silent; a sender whose peer stopped mid-transfer may
// unmap its buffer once its Wait has failed. Every rank runs every test
// (mpi_test_main).
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr absl::Duration kHeartbeat = absl::Seconds(1);

// The test's own MPI calls go under the transport's lock, as the transport's (its
// beat threads' too) do: ThreadSanitizer cannot see Open MPI's own synchronization.
void Barrier() {
  MutexLock lock(&mpi_internal::MpiLock());
  MPI_Barrier(MPI_COMM_WORLD);
}

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::unique_ptr<Transport> Connect() {
  MpiTransportOptions options;
  options.heartbeat_timeout = kHeartbeat;
  absl::StatusOr<std::unique_ptr<Transport>> transport =
      ConnectMpiTransport(MPI_COMM_WORLD, options);
  EXPECT_TRUE(transport.ok()) << transport.status();
  return transport.ok() ? *std::move(transport) : nullptr;
}

TEST(MpiHeartbeatTest, RanksDisagreeingOnTheTimeoutAreRefused) {
  MpiTransportOptions options;
  options.heartbeat_timeout = WorldRank() == 2 ? absl::Seconds(3) : absl::Seconds(10);
  EXPECT_THAT(ConnectMpiTransport(MPI_COMM_WORLD, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("heartbeat_timeout")));
  options.heartbeat_timeout = absl::Milliseconds(50);
  EXPECT_THAT(ConnectMpiTransport(MPI_COMM_WORLD, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is below 200ms")));
}

// Rank 3 stops itself; rank 0, waiting for a message from it with a deadline far
// away, hears no beat and fails within the heartbeat timeout (plus slack for a
// loaded machine), then lets rank 3 go on.
TEST(MpiHeartbeatTest, StoppedRankIsReportedWithinTheTimeout) {
  std::unique_ptr<Transport> transport = Connect();
  ASSERT_NE(transport, nullptr);
  // Everyone learns rank 3's pid, so rank 0 can wake it whatever happens.
  int64_t pid = getpid();
  {
    MutexLock lock(&mpi_internal::MpiLock());
    MPI_Bcast(&pid, 1, MPI_INT64_T, 3, MPI_COMM_WORLD);
  }
  if (WorldRank() == 3) {
    raise(SIGSTOP);  // Rank 0 sends SIGCONT once it has reported this rank.
  } else if (WorldRank() == 0) {
    std::vector<std::byte> buffer(64);
    absl::StatusOr<Request> receive = transport->Recv(3, /*tag=*/7, AsWritableBytes(buffer));
    ASSERT_TRUE(receive.ok()) << receive.status();
    const absl::Time start = absl::Now();
    const absl::Status waited = transport->Wait({*receive}, start + absl::Seconds(60));
    const absl::Duration took = absl::Now() - start;
    kill(static_cast<pid_t>(pid), SIGCONT);
    EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable,
                                 AllOf(HasSubstr(absl::StrCat("world rank 3 (pid ", pid)),
                                       HasSubstr("stopped responding: no heartbeat for"),
                                       HasSubstr("its state: T"))));
    // (Not before the timeout is the verdict's own arithmetic; PeerWatchTest checks it.
    // The silence began before this wait did, so `took` may be shorter.)
    EXPECT_LT(took, absl::Seconds(20)) << "the deadline was 60s";
    // A later request with the silent peer fails at once.
    absl::StatusOr<Request> again = transport->Send(3, 8, AsBytes(buffer));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_THAT(transport->Wait({*again}, absl::Now() + absl::Seconds(60)),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stopped responding")));
  }
  Barrier();
}

// Rank 1 computes for three heartbeat timeouts before it sends: its beat thread
// keeps it alive in rank 0's eyes.
TEST(MpiHeartbeatTest, BusyRankIsNotReported) {
  std::unique_ptr<Transport> transport = Connect();
  ASSERT_NE(transport, nullptr);
  std::vector<std::byte> buffer(1 << 20, std::byte{5});
  if (WorldRank() == 1) {
    absl::SleepFor(3 * kHeartbeat);
    absl::StatusOr<Request> send = transport->Send(0, 9, AsBytes(buffer));
    ASSERT_TRUE(send.ok()) << send.status();
    LOOM_EXPECT_OK(transport->Wait({*send}, absl::Now() + absl::Seconds(30)));
  } else if (WorldRank() == 0) {
    std::vector<std::byte> into(buffer.size());
    absl::StatusOr<Request> receive = transport->Recv(1, 9, AsWritableBytes(into));
    ASSERT_TRUE(receive.ok()) << receive.status();
    LOOM_EXPECT_OK(transport->Wait({*receive}, absl::Now() + absl::Seconds(30)));
    EXPECT_EQ(into, buffer);
  }
  Barrier();
}

// Rank 2 closes its endpoint; rank 0 still waits on it: that runs into its own
// deadline, as the Transport contract has it, and is no heartbeat failure.
TEST(MpiHeartbeatTest, ClosedRankIsNotReportedAsSilent) {
  std::unique_ptr<Transport> transport = Connect();
  ASSERT_NE(transport, nullptr);
  if (WorldRank() == 2) transport.reset();
  Barrier();
  if (WorldRank() == 0) {
    std::vector<std::byte> buffer(8);
    absl::StatusOr<Request> receive = transport->Recv(2, 10, AsWritableBytes(buffer));
    ASSERT_TRUE(receive.ok()) << receive.status();
    EXPECT_THAT(transport->Wait({*receive}, absl::Now() + 3 * kHeartbeat),
                StatusIs(absl::StatusCode::kDeadlineExceeded,
                         HasSubstr("receive from world rank 2 (pid ")));
  }
  Barrier();
}

// The receiver of the test below: it checks every piece against the sender's
// pattern, and stops its own process (MPI lock and beat thread with it) once the
// piece at `stop_at` has landed, so that the sender is left with pieces in flight.
struct StoppingReceiver {
  size_t stop_at = 0;
  mutable std::atomic<int64_t> wrong{0};
  mutable std::atomic<size_t> received{0};
};

std::byte Pattern(size_t offset) { return static_cast<std::byte>((offset * 131 + 7) % 251); }

void CheckThenMaybeStop(const void* state, std::byte* dst, const std::byte* src, size_t offset,
                        size_t bytes) {
  const auto& receiver = *static_cast<const StoppingReceiver*>(state);
  for (size_t i = 0; i < bytes; ++i) {
    if (src[i] != Pattern(offset + i)) receiver.wrong.fetch_add(1);
  }
  std::memcpy(dst, src, bytes);
  receiver.received.fetch_add(bytes);
  if (offset == receiver.stop_at) raise(SIGSTOP);  // Rank 0 sends SIGCONT.
}

// Rank 3 stops in the middle of a 32 MiB receive from rank 0. Rank 0's Wait fails
// on the silent peer with pieces still in MPI's hands; rank 0 then unmaps its send
// buffer, as a caller unwinding from the error would free it, and keeps MPI
// progressing (its endpoint's close, a barrier) while rank 3 resumes and MPI moves
// what it still holds. The transport stages every piece it hands MPI in buffers
// of its own, so nothing reads the unmapped pages (a read would kill rank 0, and
// Open MPI's single-copy read from rank 3 would fail with EFAULT), and every byte
// rank 3 gets is the sender's.
TEST(MpiHeartbeatTest, SenderMayFreeItsBufferOnceAWaitOnASilentPeerFailed) {
  std::unique_ptr<Transport> transport = Connect();
  ASSERT_NE(transport, nullptr);
  int64_t pid = getpid();
  {
    MutexLock lock(&mpi_internal::MpiLock());
    MPI_Bcast(&pid, 1, MPI_INT64_T, 3, MPI_COMM_WORLD);
  }
  constexpr size_t kBytes = size_t{32} << 20;
  constexpr Tag kTag = 11;
  if (WorldRank() == 0) {
    void* mapped = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mapped, MAP_FAILED);
    auto* data = static_cast<std::byte*>(mapped);
    for (size_t i = 0; i < kBytes; ++i) data[i] = Pattern(i);
    absl::StatusOr<Request> send = transport->Send(3, kTag, absl::MakeConstSpan(data, kBytes));
    ASSERT_TRUE(send.ok()) << send.status();
    const absl::Status waited = transport->Wait({*send}, absl::Now() + absl::Seconds(60));
    ASSERT_EQ(munmap(mapped, kBytes), 0);
    EXPECT_THAT(waited, StatusIs(absl::StatusCode::kUnavailable,
                                 HasSubstr("stopped responding: no heartbeat for")));
    transport.reset();  // Its close drains MPI for a while.
    kill(static_cast<pid_t>(pid), SIGCONT);
  } else if (WorldRank() == 3) {
    StoppingReceiver receiver;
    receiver.stop_at = size_t{1} << 20;
    std::vector<std::byte> into(kBytes);
    Combiner combiner;
    combiner.fn = &CheckThenMaybeStop;
    combiner.state = &receiver;
    absl::StatusOr<Request> receive =
        transport->PostRecv(0, kTag, AsWritableBytes(into), combiner, Stamp{});
    ASSERT_TRUE(receive.ok()) << receive.status();
    // Rank 0 gives up on this rank while it is stopped, so the rest never comes:
    // the receive ends at its deadline (or on rank 0's close), whichever it meets.
    const absl::Status waited = transport->Wait({*receive}, absl::Now() + absl::Seconds(4));
    EXPECT_FALSE(waited.ok());
    EXPECT_EQ(receiver.wrong.load(), 0) << "bytes that are not the sender's";
    EXPECT_GT(receiver.received.load(), receiver.stop_at);
  }
  Barrier();  // MPI progresses on every rank, rank 0's too, after the unmap.
}

}  // namespace
}  // namespace loom
