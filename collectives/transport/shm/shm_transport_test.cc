// Data paths and cancellation of the shm transport, beyond the shared contract suite:
// messages around the eager boundary and through a small staging ring, sends and
// receives withdrawn at a deadline (before matching and mid-stream), and eight ranks
// on two cores.
#include "collectives/transport/shm/shm_transport.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/shared_regions.h"
#include "collectives/transport/shm/shared_buffer.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/transport_conformance.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
namespace {

using ::testing::HasSubstr;
using transport_conformance::ExpectPayload;
using transport_conformance::Payload;
using transport_conformance::Soon;
using CopyMode = ShmOptions::CopyMode;

// Run with `mode` (kAuto uses CMA where this host allows it) and every rank OK.
void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

ShmHarnessOptions WithMode(CopyMode mode) {
  ShmHarnessOptions options;
  options.transport.copy_mode = mode;
  return options;
}

absl::Status Exchange(Transport& t, int peer, Tag tag, size_t bytes) {
  std::vector<std::byte> out = Payload(t.rank(), peer, tag, bytes), in(bytes);
  LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, tag, AsWritableBytes(in)));
  LOOM_ASSIGN_OR_RETURN(Request s, t.Send(peer, tag, AsBytes(out)));
  LOOM_RETURN_IF_ERROR(t.Wait({s, r}, Soon()));
  return ExpectPayload(in, peer, t.rank(), tag);
}

// Signal lets one rank wait for another without progressing its transport (a pipe
// made before the ranks are forked), to hold a rank still at an exact point.
class Signal {
 public:
  Signal() {
    if (pipe(fds_) != 0) fds_[0] = fds_[1] = -1;
  }
  ~Signal() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  void Raise() const {
    if (write(fds_[1], "x", 1) != 1) std::perror("Signal::Raise");
  }
  absl::Status Await() const {
    pollfd readable{fds_[0], POLLIN, 0};
    char byte;
    if (poll(&readable, 1, 20000) != 1 || read(fds_[0], &byte, 1) != 1) {
      return absl::DeadlineExceededError("the other rank never signalled");
    }
    return absl::OkStatus();
  }

 private:
  int fds_[2];
};

class ShmModeTest : public ::testing::TestWithParam<CopyMode> {};

std::string ModeName(CopyMode mode) {
  switch (mode) {
    case CopyMode::kAuto: return "Auto";
    case CopyMode::kCma: return "Cma";
    case CopyMode::kStaged: return "Staged";
    case CopyMode::kStagedOrMapped: return "StagedOrMapped";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(Modes, ShmModeTest,
                         ::testing::Values(CopyMode::kAuto, CopyMode::kStaged,
                                           CopyMode::kStagedOrMapped),
                         [](const auto& param_info) { return ModeName(param_info.param); });

// Sizes on both sides of eager_bytes, and messages many times the staging ring, so
// the ring wraps around while both ranks stream at once.
TEST_P(ShmModeTest, MessagesAroundTheEagerBoundaryAndThroughASmallRing) {
  ShmHarnessOptions options = WithMode(GetParam());
  options.transport.eager_bytes = 4096;
  options.transport.staging_bytes = 64 * 1024;
  ShmHarness harness(options);
  ExpectAllOk(harness.Run(2, [](Transport& t) -> absl::Status {
    Tag tag = 0;
    for (size_t bytes : {size_t{4095}, size_t{4096}, size_t{4097}, size_t{(1 << 20) + 13}}) {
      LOOM_RETURN_IF_ERROR(Exchange(t, 1 - t.rank(), ++tag, bytes));
    }
    return absl::OkStatus();
  }));
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
}

// With eager_bytes = 0 every non-empty message takes the large path.
TEST_P(ShmModeTest, ZeroEagerBytesSendsEverythingLarge) {
  ShmHarnessOptions options = WithMode(GetParam());
  options.transport.eager_bytes = 0;
  ShmHarness harness(options);
  ExpectAllOk(harness.Run(3, [](Transport& t) -> absl::Status {
    Tag tag = 0;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}}) {
      ++tag;
      for (int peer = 0; peer < t.size(); ++peer)
        LOOM_RETURN_IF_ERROR(Exchange(t, peer, tag, bytes));
    }
    return absl::OkStatus();
  }));
}

// Large sends out of SharedBuffers travel as kMapped: the receiver maps the buffer
// once and copies with memcpy (or, where the kernel refuses the mapping, with CMA).
// Covers a combining receive, an offset inside a buffer, reuse of a mapping, a buffer freed and another
// allocated (new id, possibly the same fd number), and a plain buffer in between
// (pulled with CMA under kAuto, staged under kStagedOrMapped).
class ShmSharedBufferTest : public ::testing::TestWithParam<CopyMode> {};

INSTANTIATE_TEST_SUITE_P(Modes, ShmSharedBufferTest,
                         ::testing::Values(CopyMode::kAuto, CopyMode::kStagedOrMapped),
                         [](const auto& param_info) { return ModeName(param_info.param); });

TEST_P(ShmSharedBufferTest, SendsOutOfSharedBuffersArriveIntact) {
  ShmHarness harness(WithMode(GetParam()));
  ExpectAllOk(harness.Run(2, [](Transport& t) -> absl::Status {
    const int peer = 1 - t.rank();
    const size_t bytes = (1 << 20) + 12;
    int mapped_messages = 0;
    Tag tag = 0;
    for (int round = 0; round < 3; ++round) {
      // A fresh buffer each round; inside it, the message starts 4 KiB + 4 in.
      LOOM_ASSIGN_OR_RETURN(SharedBuffer buffer, SharedBuffer::Allocate(bytes + 8192));
      for (int repeat = 0; repeat < 2; ++repeat) {
        ++tag;
        const std::vector<std::byte> payload = Payload(t.rank(), peer, tag, bytes);
        std::copy(payload.begin(), payload.end(), buffer.data() + 4100);
        std::vector<std::byte> in(bytes);
        // The repeat goes through a combiner (each byte plus one), read straight
        // out of the mapping.
        const Combiner plus_one{[](const void*, std::byte* dst, const std::byte* src, size_t,
                                   size_t n) {
                                  for (size_t i = 0; i < n; ++i) {
                                    dst[i] = static_cast<std::byte>(static_cast<uint8_t>(src[i]) + 1);
                                  }
                                },
                                nullptr};
        LOOM_ASSIGN_OR_RETURN(Request r, t.RecvCombine(peer, tag, AsWritableBytes(in),
                                                       repeat == 1 ? plus_one : Combiner{}));
        LOOM_ASSIGN_OR_RETURN(
            Request s, t.Send(peer, tag, absl::Span<const std::byte>(buffer.data() + 4100, bytes)));
        LOOM_RETURN_IF_ERROR(t.Wait({s, r}, Soon()));
        if (repeat == 1) {
          for (std::byte& b : in) b = static_cast<std::byte>(static_cast<uint8_t>(b) - 1);
        }
        LOOM_RETURN_IF_ERROR(ExpectPayload(in, peer, t.rank(), tag));
        ++mapped_messages;
      }
      LOOM_RETURN_IF_ERROR(Exchange(t, peer, ++tag, bytes));  // not shared: CMA or staged
    }
    const shm_internal::MappedReceiveCounts counts = shm_internal::MappedReceives();
    if (counts.mapped + counts.fell_back != static_cast<uint64_t>(mapped_messages)) {
      return absl::InternalError(absl::StrCat("rank ", t.rank(), " received ", mapped_messages,
                                              " messages out of shared buffers, but ",
                                              counts.mapped, " mapped and ", counts.fell_back,
                                              " fallbacks were counted"));
    }
    if (counts.fell_back > 0) {
      std::cerr << "rank " << t.rank() << ": the kernel refused pidfd_getfd; " << counts.fell_back
                << " receives fell back to CMA\n";
    }
    return absl::OkStatus();
  }));
}

// A large send withdrawn at its deadline never arrives: the receiver, asking later,
// gets the next message with that tag.
TEST_P(ShmModeTest, SendCancelledAtItsDeadlineNeverArrives) {
  constexpr size_t kBytes = size_t{1} << 20;  // Above eager_bytes: not buffered.
  ShmHarness harness(WithMode(GetParam()));
  const Signal cancelled;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      const std::vector<std::byte> first(kBytes, std::byte{1});
      LOOM_ASSIGN_OR_RETURN(Request early, t.Send(1, 5, AsBytes(first)));
      const absl::Status timed_out = t.Wait({early}, absl::Now() + absl::Milliseconds(100));
      cancelled.Raise();
      if (timed_out.code() != absl::StatusCode::kDeadlineExceeded ||
          !absl::StrContains(timed_out.message(),
                             absl::StrCat("send to rank 1 (tag 5, ", kBytes, " bytes)"))) {
        return absl::InternalError(absl::StrCat("the unmatched send gave ", timed_out.ToString()));
      }
      const std::vector<std::byte> second(kBytes, std::byte{2});
      LOOM_ASSIGN_OR_RETURN(Request late, t.Send(1, 5, AsBytes(second)));
      return t.Wait({late}, Soon());
    }
    LOOM_RETURN_IF_ERROR(cancelled.Await());  // Without progressing.
    std::vector<std::byte> in(kBytes);
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(0, 5, AsWritableBytes(in)));
    LOOM_RETURN_IF_ERROR(t.Wait({r}, Soon()));
    if (in != std::vector<std::byte>(kBytes, std::byte{2})) {
      return absl::InternalError("received the cancelled message, not the one after it");
    }
    return absl::OkStatus();
  });
  ExpectAllOk(results);
}

// A send up to eager_bytes is buffered: it completes before any receive is posted,
// its buffer may be overwritten at once, and a receive posted later gets the bytes
// as they were sent. Up to kCellsPerChannel (16) of them fit; the next ones wait
// for the receiver to drain, and still arrive in order.
TEST_P(ShmModeTest, SmallSendsAreBufferedUntilReceived) {
  constexpr int kMessages = 40;
  ShmHarness harness(WithMode(GetParam()));
  const Signal sent;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    if (t.rank() == 0) {
      std::vector<std::byte> buffer(100);
      for (int i = 0; i < 16; ++i) {
        std::fill(buffer.begin(), buffer.end(), std::byte{static_cast<unsigned char>(i)});
        LOOM_ASSIGN_OR_RETURN(Request s, t.Send(1, 6, AsBytes(buffer)));
        // Completes although rank 1 has posted nothing yet.
        LOOM_RETURN_IF_ERROR(t.Wait({s}, absl::Now() + absl::Seconds(5)));
      }
      std::fill(buffer.begin(), buffer.end(), std::byte{0xEE});  // Already sent: no effect.
      sent.Raise();
      for (int i = 16; i < kMessages; ++i) {
        std::fill(buffer.begin(), buffer.end(), std::byte{static_cast<unsigned char>(i)});
        LOOM_ASSIGN_OR_RETURN(Request s, t.Send(1, 6, AsBytes(buffer)));
        LOOM_RETURN_IF_ERROR(t.Wait({s}, Soon()));
      }
      return absl::OkStatus();
    }
    LOOM_RETURN_IF_ERROR(sent.Await());
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> in(100);
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(0, 6, AsWritableBytes(in)));
      LOOM_RETURN_IF_ERROR(t.Wait({r}, Soon()));
      if (in != std::vector<std::byte>(100, std::byte{static_cast<unsigned char>(i)})) {
        return absl::InternalError(absl::StrCat("message ", i, " arrived with the wrong bytes"));
      }
    }
    return absl::OkStatus();
  });
  ExpectAllOk(results);
}

// A staged receive that gives up mid-stream (its sender is not progressing) fails
// with DeadlineExceeded; the sender then learns of it, and the pair's ring is still
// in step for the next message.
TEST(ShmStagedTest, ReceiverGivesUpMidStream) {
  ShmHarness harness(WithMode(CopyMode::kStaged));
  constexpr size_t kBytes = 2 << 20;  // Twice the default staging ring.
  const Signal gave_up;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    std::vector<std::byte> buffer(kBytes, std::byte{7});
    if (t.rank() == 0) {
      LOOM_ASSIGN_OR_RETURN(Request s, t.Send(1, 2, AsBytes(buffer)));
      LOOM_RETURN_IF_ERROR(gave_up.Await());  // Rank 1 matches it and gives up meanwhile.
      const absl::Status given_up = t.Wait({s}, Soon());
      if (given_up.code() != absl::StatusCode::kDeadlineExceeded ||
          !absl::StrContains(given_up.message(),
                             "rank 1 gave up on the matched receive at its deadline")) {
        return absl::InternalError(absl::StrCat("the abandoned send gave ", given_up.ToString()));
      }
    } else {
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(0, 2, AsWritableBytes(buffer)));
      const absl::Status timed_out = t.Wait({r}, absl::Now() + absl::Milliseconds(300));
      gave_up.Raise();
      if (timed_out.code() != absl::StatusCode::kDeadlineExceeded ||
          !absl::StrContains(timed_out.message(),
                             "rank 0 matched it, but only 0 of 2097152 bytes moved")) {
        return absl::InternalError(absl::StrCat("the stalled receive gave ", timed_out.ToString()));
      }
    }
    return Exchange(t, 1 - t.rank(), 3, kBytes);
  });
  ExpectAllOk(results);
}

// A staged send withdrawn mid-stream (the receiver stopped draining) fails the
// receive too; chunks already in the ring are dropped and the ring stays in step.
TEST(ShmStagedTest, SenderWithdrawsMidStream) {
  ShmHarness harness(WithMode(CopyMode::kStaged));
  constexpr size_t kBytes = 2 << 20;  // Twice the default staging ring.
  const Signal withdrawn_signal;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    std::vector<std::byte> big(kBytes, std::byte{9}), small(8, std::byte{1});
    if (t.rank() == 0) {
      LOOM_ASSIGN_OR_RETURN(Request s_big, t.Send(1, 1, AsBytes(big)));
      LOOM_ASSIGN_OR_RETURN(Request s_small, t.Send(1, 2, AsBytes(small)));
      LOOM_RETURN_IF_ERROR(t.Wait({s_small}, Soon()));
      // Rank 1 has matched both and stopped draining: the ring fills, the send stalls.
      const absl::Status withdrawn = t.Wait({s_big}, absl::Now() + absl::Milliseconds(200));
      withdrawn_signal.Raise();
      if (withdrawn.code() != absl::StatusCode::kDeadlineExceeded ||
          !absl::StrContains(withdrawn.message(), "rank 1 matched it, but only")) {
        return absl::InternalError(absl::StrCat("the stalled send gave ", withdrawn.ToString()));
      }
    } else {
      LOOM_ASSIGN_OR_RETURN(Request r_big, t.Recv(0, 1, AsWritableBytes(big)));
      LOOM_ASSIGN_OR_RETURN(Request r_small, t.Recv(0, 2, AsWritableBytes(small)));
      LOOM_RETURN_IF_ERROR(t.Wait({r_small}, Soon()));
      LOOM_RETURN_IF_ERROR(withdrawn_signal.Await());  // Without draining.
      const absl::Status withdrawn = t.Wait({r_big}, Soon());
      if (withdrawn.code() != absl::StatusCode::kDeadlineExceeded ||
          !absl::StrContains(withdrawn.message(), "rank 0 withdrew the send after")) {
        return absl::InternalError(
            absl::StrCat("the withdrawn receive gave ", withdrawn.ToString()));
      }
    }
    return Exchange(t, 1 - t.rank(), 3, kBytes);
  });
  ExpectAllOk(results);
}

// A sender that aborts mid-stream (a Communicator does when a third rank died)
// withdraws its send; the receiver reports the sender's abort and its reason, not
// a withdrawal, so the first failure reaches it by name.
TEST(ShmStagedTest, SenderAbortedMidStreamIsReportedWithItsReason) {
  for (const CopyMode mode : {CopyMode::kStaged, CopyMode::kStagedOrMapped}) {
    ShmHarness harness(WithMode(mode));
    constexpr size_t kBytes = 2 << 20;  // Twice the default staging ring.
    const Signal aborted_signal;
    const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
      std::vector<std::byte> big(kBytes, std::byte{9}), small(8, std::byte{1});
      if (t.rank() == 0) {
        LOOM_ASSIGN_OR_RETURN(Request s_big, t.Send(1, 1, AsBytes(big)));
        LOOM_ASSIGN_OR_RETURN(Request s_small, t.Send(1, 2, AsBytes(small)));
        LOOM_RETURN_IF_ERROR(t.Wait({s_small}, Soon()));
        // Rank 1 has matched both and stopped draining: the big send is mid-stream.
        t.Abort(absl::UnavailableError("world rank 2 (pid 7 on h) died"));
        const absl::Status aborted = t.Wait({s_big}, Soon());
        aborted_signal.Raise();
        if (aborted.ok()) return absl::InternalError("the aborted send succeeded");
        return absl::OkStatus();
      }
      LOOM_ASSIGN_OR_RETURN(Request r_big, t.Recv(0, 1, AsWritableBytes(big)));
      LOOM_ASSIGN_OR_RETURN(Request r_small, t.Recv(0, 2, AsWritableBytes(small)));
      LOOM_RETURN_IF_ERROR(t.Wait({r_small}, Soon()));
      LOOM_RETURN_IF_ERROR(aborted_signal.Await());  // Without draining.
      const absl::Status got = t.Wait({r_big}, Soon());
      if (got.code() != absl::StatusCode::kUnavailable ||
          !absl::StrContains(got.message(), "aborted: world rank 2 (pid 7 on h) died")) {
        return absl::InternalError(absl::StrCat(ModeName(mode), ": the receive gave ", got.ToString()));
      }
      return absl::OkStatus();
    });
    ExpectAllOk(results);
  }
}

// A sender that withdraws mid-stream because its call failed when a third rank died
// (an algorithm cancels its requests on the way out, before its Communicator
// aborts) has not aborted; the receiver names the dead rank, not a withdrawal, so
// the first failure reaches every survivor by name (integrations/torch:fault_test
// reported the withdrawal in the first suite run at -O2).
TEST(ShmStagedTest, WithdrawalAfterAThirdRankDiedNamesTheDeadRank) {
  ShmHarness harness(WithMode(CopyMode::kStaged));
  constexpr size_t kBytes = 2 << 20;  // Twice the default staging ring.
  const Signal withdrawn_signal;
  const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
    if (t.rank() == 2) raise(SIGKILL);
    std::vector<std::byte> big(kBytes, std::byte{9}), small(8, std::byte{1});
    if (t.rank() == 0) {
      // Rank 0 first sees rank 2 die, as a rank whose collective then fails does.
      std::vector<std::byte> from_dead(8);
      LOOM_ASSIGN_OR_RETURN(Request r_dead, t.Recv(2, 0, AsWritableBytes(from_dead)));
      const absl::Status died = t.Wait({r_dead}, Soon());
      if (died.code() != absl::StatusCode::kUnavailable) {
        return absl::InternalError(absl::StrCat("rank 2's death gave ", died.ToString()));
      }
      LOOM_ASSIGN_OR_RETURN(Request s_big, t.Send(1, 1, AsBytes(big)));
      LOOM_ASSIGN_OR_RETURN(Request s_small, t.Send(1, 2, AsBytes(small)));
      LOOM_RETURN_IF_ERROR(t.Wait({s_small}, Soon()));
      // Rank 1 has matched both and stopped draining: the ring fills, the send stalls
      // and is withdrawn at its deadline mid-stream, without an abort.
      const absl::Status withdrawn = t.Wait({s_big}, absl::Now() + absl::Milliseconds(200));
      withdrawn_signal.Raise();
      if (withdrawn.ok()) return absl::InternalError("the stalled send succeeded");
      return absl::OkStatus();
    }
    LOOM_ASSIGN_OR_RETURN(Request r_big, t.Recv(0, 1, AsWritableBytes(big)));
    LOOM_ASSIGN_OR_RETURN(Request r_small, t.Recv(0, 2, AsWritableBytes(small)));
    LOOM_RETURN_IF_ERROR(t.Wait({r_small}, Soon()));
    LOOM_RETURN_IF_ERROR(withdrawn_signal.Await());  // Without draining.
    const absl::Status got = t.Wait({r_big}, Soon());
    if (got.code() != absl::StatusCode::kUnavailable ||
        !absl::StrContains(got.message(), "world rank 2 (pid ") ||
        !absl::StrContains(got.message(), ") died (rank 0 withdrew its send to rank 1 after")) {
      return absl::InternalError(absl::StrCat("the receive gave ", got.ToString()));
    }
    return absl::OkStatus();
  });
  LOOM_EXPECT_OK(results[0]);
  LOOM_EXPECT_OK(results[1]);
  EXPECT_THAT(results[2], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("killed by signal 9")));
}

// Eight processes on two cores: every rank exchanges with every rank, large and
// small, several rounds. Correctness only; the waits must yield and sleep, not
// livelock. (Most of the time goes into making and checking the payloads.)
TEST_P(ShmModeTest, EightRanksExchangeAllPairs) {
  ShmHarness harness(WithMode(GetParam()));
  const absl::Time start = absl::Now();
  ExpectAllOk(harness.Run(8, [](Transport& t) -> absl::Status {
    for (int round = 0; round < 2; ++round) {
      for (size_t bytes : {size_t{64}, size_t{64} << 10}) {
        const Tag tag = round * 10 + (bytes > 64 ? 1 : 0);
        const int n = t.size();
        std::vector<std::vector<std::byte>> out(n), in(n);
        std::vector<Request> requests;
        for (int peer = 0; peer < n; ++peer) {
          out[peer] = Payload(t.rank(), peer, tag, bytes);
          in[peer].resize(bytes);
          LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, tag, AsWritableBytes(in[peer])));
          LOOM_ASSIGN_OR_RETURN(Request s, t.Send(peer, tag, AsBytes(out[peer])));
          requests.push_back(r);
          requests.push_back(s);
        }
        LOOM_RETURN_IF_ERROR(t.Wait(requests, Soon()));
        for (int peer = 0; peer < n; ++peer)
          LOOM_RETURN_IF_ERROR(ExpectPayload(in[peer], peer, t.rank(), tag));
      }
    }
    return absl::OkStatus();
  }));
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
  std::cout << "8 ranks, 2 rounds of all-pairs (" << harness.name() << "): " << absl::Now() - start
            << "\n";
}

}  // namespace
}  // namespace loom
