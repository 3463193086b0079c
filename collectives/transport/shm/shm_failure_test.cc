// How the shm transport fails: a rank killed with SIGKILL mid-exchange, crashes
// during connect that leave segments behind, ranks that never arrive, ranks that
// disagree, and two jobs that share an id. Nothing may hang, and nothing may stay in
// /dev/shm.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/segment.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport_conformance.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using transport_conformance::Payload;
using CopyMode = ShmOptions::CopyMode;

std::vector<std::string> Segments(const std::string& job_id) {
  absl::StatusOr<std::vector<std::string>> names = shm_internal::ListSegments(job_id);
  return names.ok() ? *names : std::vector<std::string>{names.status().ToString()};
}

std::string PathOf(const std::string& job_id, int rank) {
  return absl::StrCat("/dev/shm/loom.", job_id, ".rank", rank);
}

// WaitUntilReady polls until rank `rank` of `job_id` has set up its segment.
bool WaitUntilReady(const std::string& job_id, int rank) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    uint64_t magic = 0;
    const int fd = open(PathOf(job_id, rank).c_str(), O_RDONLY);
    if (fd >= 0) {
      const ssize_t got =
          pread(fd, &magic, sizeof(magic), offsetof(shm_internal::RankHeader, magic));
      close(fd);
      if (got == sizeof(magic) && magic == shm_internal::kSegmentMagic) return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

// PostExchange posts, for one iteration, a receive into in[peer] and a send of
// out[peer] with every other rank; returns the requests.
absl::StatusOr<std::vector<Request>> PostExchange(Transport& t, int iteration,
                                                  std::vector<std::vector<std::byte>>& in,
                                                  const std::vector<std::vector<std::byte>>& out) {
  std::vector<Request> requests;
  for (int peer = 0; peer < t.size(); ++peer) {
    if (peer == t.rank()) continue;
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, iteration, AsWritableBytes(in[peer])));
    LOOM_ASSIGN_OR_RETURN(Request s, t.Send(peer, iteration, AsBytes(out[peer])));
    requests.push_back(r);
    requests.push_back(s);
  }
  return requests;
}

class ShmKillTest : public ::testing::TestWithParam<CopyMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ShmKillTest, ::testing::Values(CopyMode::kAuto, CopyMode::kStaged),
                         [](const auto& param_info) {
                           return param_info.param == CopyMode::kAuto ? "Auto" : "Staged";
                         });

// Three ranks exchange 1 MiB messages in a loop; rank 1 SIGKILLs itself with its
// requests in flight. Ranks 0 and 2 must fail with Unavailable naming rank 1 long
// before their deadline, and the job leaves nothing in /dev/shm. A survivor that
// fails aborts, as a collective engine does, so that the other one, which may still
// wait on it, hears of it at once.
TEST_P(ShmKillTest, KilledRankFailsItsPeersPromptly) {
  constexpr absl::Duration kDeadline = absl::Seconds(20);
  constexpr absl::Duration kPrompt = absl::Seconds(2);
  ShmHarnessOptions options;
  options.transport.copy_mode = GetParam();
  ShmHarness harness(options);
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
    constexpr size_t kBytes = 1 << 20;
    std::vector<std::vector<std::byte>> out(3), in(3, std::vector<std::byte>(kBytes));
    for (int peer = 0; peer < 3; ++peer) out[peer] = Payload(t.rank(), peer, 0, kBytes);
    auto exchange = [&]() -> absl::Status {
      for (int iteration = 0; iteration < 100000; ++iteration) {
        LOOM_ASSIGN_OR_RETURN(std::vector<Request> requests, PostExchange(t, iteration, in, out));
        if (t.rank() == 1 && iteration == 20) raise(SIGKILL);  // Mid-exchange.
        const absl::Time wait_start = absl::Now();
        const absl::Status status = t.Wait(requests, wait_start + kDeadline);
        const absl::Duration took = absl::Now() - wait_start;
        if (took > kPrompt) {
          return absl::InternalError(
              absl::StrCat("a wait took ", absl::FormatDuration(took), ": ", status.ToString()));
        }
        LOOM_RETURN_IF_ERROR(status);
      }
      return absl::InternalError("rank 1 never died");
    };
    const absl::Status status = exchange();
    if (!status.ok()) t.Abort(status);
    return status;
  });
  EXPECT_LT(absl::Now() - start, kDeadline / 2);
  for (int rank : {0, 2}) {
    // Either it saw rank 1 die, or the other survivor aborted because it did.
    EXPECT_THAT(results[rank],
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("world rank 1 (pid ")))
        << "rank " << rank;
  }
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("killed by signal 9")));
  EXPECT_THAT(harness.last_leftovers(), IsEmpty());
}

// Three ranks exchange messages; rank 1 stops itself (SIGSTOP), alive but silent.
// Ranks 0 and 2 must fail with Unavailable naming world rank 1 as unresponsive
// within the heartbeat timeout plus a margin, long before their 60 s deadline.
// Once both have, rank 0 kills the stopped rank (its pid, and how many survivors are
// done, are in memory shared before the fork): killed earlier, it would be seen as
// dead, not silent, by a survivor that had not yet noticed.
TEST(ShmHeartbeatTest, StoppedRankIsReportedWithinTheHeartbeatTimeout) {
  constexpr absl::Duration kHeartbeat = absl::Seconds(1);
  constexpr absl::Duration kDeadline = absl::Seconds(60);
  struct Shared {
    std::atomic<pid_t> stopped_pid{0};
    std::atomic<int> survivors_done{0};
  };
  void* memory =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  Shared* shared = new (memory) Shared();
  ShmHarnessOptions options;
  options.transport.heartbeat_timeout = kHeartbeat;
  options.timeout = absl::Seconds(30);
  ShmHarness harness(options);
  const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
    std::vector<std::vector<std::byte>> out(3), in(3, std::vector<std::byte>(64));
    for (int peer = 0; peer < 3; ++peer) out[peer] = Payload(t.rank(), peer, 0, 64);
    absl::Status status;
    absl::Duration noticed_after;
    for (int iteration = 0; iteration < 100000 && status.ok(); ++iteration) {
      LOOM_ASSIGN_OR_RETURN(std::vector<Request> requests, PostExchange(t, iteration, in, out));
      if (t.rank() == 1 && iteration == 20) {
        shared->stopped_pid.store(getpid());
        raise(SIGSTOP);
      }
      const absl::Time wait_start = absl::Now();
      status = t.Wait(requests, wait_start + kDeadline);
      noticed_after = absl::Now() - wait_start;
    }
    if (status.ok()) return absl::InternalError("rank 1 never stopped");
    t.Abort(status);
    shared->survivors_done.fetch_add(1);
    if (t.rank() == 0) {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (shared->survivors_done.load() < 2 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      kill(shared->stopped_pid.load(), SIGKILL);
    }
    if (noticed_after < kHeartbeat / 2 || noticed_after > kHeartbeat + absl::Seconds(4)) {
      return absl::InternalError(absl::StrCat("noticed after ", absl::FormatDuration(noticed_after),
                                              ": ", status.ToString()));
    }
    return status;
  });
  for (int rank : {0, 2}) {
    // Either it saw rank 1 go silent, or the other survivor aborted because it did.
    EXPECT_THAT(results[rank],
                StatusIs(absl::StatusCode::kUnavailable,
                         AllOf(HasSubstr("world rank 1 (pid "), HasSubstr("stopped responding"))))
        << "rank " << rank;
  }
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("T, stopped")));
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("killed by signal 9")));
  EXPECT_THAT(harness.last_leftovers(), IsEmpty());
  shared->~Shared();
  munmap(memory, sizeof(Shared));
}

// A rank SIGKILLed while it waits in connect leaves its segment behind, its
// liveness mutex owner-dead. The next job with the same id replaces it, and leaves
// nothing itself.
TEST(ShmLeftoverTest, SegmentOfARankKilledWhileConnectingIsReplaced) {
  const std::string job_id = UniqueJobId("crashed");
  const pid_t pid = fork();
  if (pid == 0) {
    ShmOptions options;
    options.job_id = job_id;
    options.rank = 1;
    options.size = 2;  // Rank 0 never comes.
    ConnectShmTransport(options).IgnoreError();
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  // Kill it once its segment is set up (liveness mutex held), while it waits for rank 0.
  ASSERT_TRUE(WaitUntilReady(job_id, 1));
  kill(pid, SIGKILL);
  int wait_status = 0;
  ASSERT_EQ(waitpid(pid, &wait_status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wait_status));
  ASSERT_THAT(Segments(job_id), ::testing::ElementsAre(absl::StrCat("/loom.", job_id, ".rank1")));

  ShmHarnessOptions options;
  options.transport.job_id = job_id;
  ShmHarness harness(options);
  const std::vector<absl::Status> results = harness.Run(2, [](Transport& t) -> absl::Status {
    std::vector<std::byte> out = Payload(t.rank(), 1 - t.rank(), 0, 100), in(100);
    LOOM_ASSIGN_OR_RETURN(Request s, t.Send(1 - t.rank(), 0, AsBytes(out)));
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(1 - t.rank(), 0, AsWritableBytes(in)));
    LOOM_RETURN_IF_ERROR(t.Wait({s, r}, transport_conformance::Soon()));
    return transport_conformance::ExpectPayload(in, 1 - t.rank(), t.rank(), 0);
  });
  for (int rank = 0; rank < 2; ++rank) EXPECT_THAT(results[rank], IsOk()) << "rank " << rank;
  EXPECT_THAT(harness.last_leftovers(), IsEmpty());
}

// Leftovers made by hand, as a crash at the worst moments would leave them: an empty
// file (crash right after O_CREAT, long ago) and a header whose recorded creator is
// dead but never became ready. Neither stops the next job with the same id.
TEST(ShmLeftoverTest, HalfCreatedSegmentsOfDeadCreatorsAreReplaced) {
  const std::string job_id = UniqueJobId("halfmade");
  // Rank 0's: empty, and an hour old.
  const int empty = open(PathOf(job_id, 0).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(empty, 0);
  const timespec an_hour_ago[2] = {{time(nullptr) - 3600, 0}, {time(nullptr) - 3600, 0}};
  ASSERT_EQ(futimens(empty, an_hour_ago), 0);
  close(empty);
  // Rank 1's: a header-sized file whose pid field names a process that has exited.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(waitpid(gone, nullptr, 0), gone);
  const int half = open(PathOf(job_id, 1).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(half, 0);
  ASSERT_EQ(ftruncate(half, 1 << 16), 0);
  const int32_t dead_pid = gone;
  ASSERT_EQ(pwrite(half, &dead_pid, sizeof(dead_pid), offsetof(shm_internal::RankHeader, pid)),
            static_cast<ssize_t>(sizeof(dead_pid)));
  close(half);
  ASSERT_EQ(Segments(job_id).size(), 2u);

  ShmHarnessOptions options;
  options.transport.job_id = job_id;
  ShmHarness harness(options);
  const std::vector<absl::Status> results = harness.Run(2, [](Transport& t) -> absl::Status {
    return t.size() == 2 ? absl::OkStatus() : absl::InternalError("size");
  });
  for (int rank = 0; rank < 2; ++rank) EXPECT_THAT(results[rank], IsOk()) << "rank " << rank;
  EXPECT_THAT(harness.last_leftovers(), IsEmpty());
}

// Ranks that never arrive are named, and the ranks that did leave nothing behind.
TEST(ShmConnectTest, DeadlineNamesTheRanksThatNeverArrived) {
  const std::string job_id = UniqueJobId("partial");
  const int started[] = {0, 2};
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> results =
      RunProcesses(2, absl::Seconds(30), [&](int index) -> absl::Status {
        ShmOptions options;
        options.job_id = job_id;
        options.rank = started[index];
        options.size = 4;
        options.connect_timeout = absl::Milliseconds(300);
        return ConnectShmTransport(options).status();
      });
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  for (const absl::Status& result : results) {
    EXPECT_THAT(result, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                 HasSubstr("ranks 1, 3 never arrived")));
  }
  EXPECT_THAT(Segments(job_id), IsEmpty());
}

// Ranks that disagree on the group's shape fail at once, naming the difference.
TEST(ShmConnectTest, RanksThatDisagreeOnOptionsFail) {
  const std::string job_id = UniqueJobId("disagree");
  const std::vector<absl::Status> results =
      RunProcesses(2, absl::Seconds(30), [&](int index) -> absl::Status {
        ShmOptions options;
        options.job_id = job_id;
        options.rank = index;
        options.size = 2;
        options.eager_bytes = index == 0 ? 16384 : 8192;
        options.connect_timeout = absl::Seconds(20);
        return ConnectShmTransport(options).status();
      });
  bool named = false;
  for (const absl::Status& result : results) {
    EXPECT_THAT(result.code(),
                AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnavailable))
        << result;
    EXPECT_THAT(std::string(result.message()), HasSubstr("eager_bytes=16384"));
    named |= result.code() == absl::StatusCode::kInvalidArgument;
  }
  EXPECT_TRUE(named);
  EXPECT_THAT(Segments(job_id), IsEmpty());
}

// Two live jobs with one id: the second rank 0 is refused, naming the live holder.
TEST(ShmConnectTest, LiveSegmentOfAnotherJobIsRefused) {
  const std::string job_id = UniqueJobId("twice");
  const std::vector<absl::Status> results =
      RunProcesses(2, absl::Seconds(30), [&](int index) -> absl::Status {
        ShmOptions options;
        options.job_id = job_id;
        options.rank = 0;
        options.size = 2;
        // The first waits long enough for the second to be refused meanwhile.
        options.connect_timeout = absl::Milliseconds(index == 0 ? 5000 : 300);
        // The second starts once the first's segment is set up (a handshake through the
        // segment's magic, not a guess at how long setting up takes).
        if (index == 1 && !WaitUntilReady(job_id, 0)) {
          return absl::DeadlineExceededError("the first rank 0 never set up its segment");
        }
        return ConnectShmTransport(options).status();
      });
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 1 never arrived")));
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kAlreadyExists,
                       AllOf(HasSubstr("belongs to live process"), HasSubstr("same job id"))));
  EXPECT_THAT(Segments(job_id), IsEmpty());
}

// RemoveShmSegments clears one job's names and nothing else.
TEST(ShmSegmentsTest, RemoveShmSegmentsClearsOneJob) {
  const std::string job_id = UniqueJobId("remove");
  const std::string other = job_id + "x";  // "loom.<job>x.*" must survive "loom.<job>.*".
  for (const std::string& path : {PathOf(job_id, 0), PathOf(job_id, 1), PathOf(other, 0)}) {
    const int fd = open(path.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << path;
    close(fd);
  }
  LOOM_EXPECT_OK(RemoveShmSegments(job_id));
  EXPECT_THAT(Segments(job_id), IsEmpty());
  EXPECT_EQ(Segments(other).size(), 1u);
  LOOM_EXPECT_OK(RemoveShmSegments(other));
  EXPECT_THAT(Segments(other), IsEmpty());
}

}  // namespace
}  // namespace loom
