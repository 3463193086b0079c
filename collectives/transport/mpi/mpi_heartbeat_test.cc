// Heartbeats over MPI, in a real mpirun job of 4 processes: a stopped rank is
// reported by the rank waiting on it within its heartbeat timeout, naming its world
// rank and pid; a busy rank (alive, computing) is not; a rank that closed its
// endpoint is not reported as silent. Every rank runs every test (mpi_test_main).
#include <signal.h>
#include <unistd.h>

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

}  // namespace
}  // namespace loom
