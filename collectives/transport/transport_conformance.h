// The conformance suite every Transport backend passes (testonly). A backend's test
// instantiates it with its harness factory and the world sizes it supports:
//
//   INSTANTIATE_TEST_SUITE_P(Inproc, TransportConformanceTest,
//       ::testing::Combine(::testing::Values(MakeInprocHarness), ::testing::Values(1, 2, 3, 8)));
//
// Include it from exactly one .cc per test binary.
#ifndef LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_CONFORMANCE_H_
#define LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_CONFORMANCE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/transport_harness.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace transport_conformance {

// Payload returns `bytes` seeded bytes unique to (src, dst, tag): a byte delivered
// to the wrong place or in the wrong order shows.
inline std::vector<std::byte> Payload(int src, int dst, Tag tag, size_t bytes) {
  std::mt19937_64 rng((static_cast<uint64_t>(src) << 40) ^ (static_cast<uint64_t>(dst) << 20) ^ tag);
  std::vector<std::byte> data(bytes);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  return data;
}

inline absl::Status ExpectPayload(const std::vector<std::byte>& got, int src, int dst, Tag tag) {
  if (got != Payload(src, dst, tag, got.size())) {
    return absl::InternalError(absl::StrCat("rank ", dst, ": wrong bytes from rank ", src,
                                            " tag ", tag, " (", got.size(), " bytes)"));
  }
  return absl::OkStatus();
}

inline absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

}  // namespace transport_conformance

class TransportConformanceTest
    : public ::testing::TestWithParam<std::tuple<TransportHarnessFactory, int>> {
 protected:
  int world() const { return std::get<1>(GetParam()); }

  // RunAll runs `body` on every rank and expects each to succeed.
  void RunAll(const std::function<absl::Status(Transport&)>& body) {
    auto harness = std::get<0>(GetParam())();
    const std::vector<absl::Status> results = harness->Run(world(), body);
    ASSERT_EQ(static_cast<int>(results.size()), world());
    for (int r = 0; r < world(); ++r) {
      EXPECT_THAT(results[r], IsOk()) << harness->name() << " rank " << r << " of " << world();
    }
  }

  std::vector<absl::Status> RunEach(const std::function<absl::Status(Transport&)>& body) {
    return std::get<0>(GetParam())()->Run(world(), body);
  }
};

// Every rank exchanges a distinct message with every rank (itself included), at
// sizes from 0 bytes to 1 MiB, receives posted before and after the sends.
TEST_P(TransportConformanceTest, AllPairsExchangeDistinctPayloads) {
  using transport_conformance::ExpectPayload;
  using transport_conformance::Payload;
  // 1 MiB all-pairs at 16 ranks is 256 MiB of copies; large worlds use 64 KiB.
  const size_t large = world() <= 4 ? size_t{1} << 20 : size_t{1} << 16;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, large}) {
    RunAll([&](Transport& t) -> absl::Status {
      const int n = t.size();
      std::vector<std::vector<std::byte>> out(n), in(n);
      std::vector<Request> requests;
      for (int peer = 0; peer < n; ++peer) {
        in[peer].resize(bytes);
        out[peer] = Payload(t.rank(), peer, 3, bytes);
      }
      for (int peer = 0; peer < n; peer += 2) {  // Half the receives before any send.
        LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, 3, AsWritableBytes(in[peer])));
        requests.push_back(r);
      }
      for (int peer = 0; peer < n; ++peer) {
        LOOM_ASSIGN_OR_RETURN(Request r, t.Send(peer, 3, AsBytes(out[peer])));
        requests.push_back(r);
      }
      for (int peer = 1; peer < n; peer += 2) {
        LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, 3, AsWritableBytes(in[peer])));
        requests.push_back(r);
      }
      LOOM_RETURN_IF_ERROR(t.Wait(requests, transport_conformance::Soon()));
      for (int peer = 0; peer < n; ++peer) LOOM_RETURN_IF_ERROR(ExpectPayload(in[peer], peer, t.rank(), 3));
      return absl::OkStatus();
    });
  }
}

namespace transport_conformance {

// XorCombine: dst = src XOR mask[offset...], recording each piece it is given.
struct XorCombine {
  std::vector<std::byte> mask;
  std::vector<std::pair<size_t, size_t>> pieces;  // (offset, bytes)

  static void Fn(const void* state, std::byte* dst, const std::byte* src, size_t offset,
                 size_t bytes) {
    // The state is this test's own, handed over as const by the interface.
    auto* self = static_cast<XorCombine*>(const_cast<void*>(state));
    for (size_t i = 0; i < bytes; ++i) dst[i] = src[i] ^ self->mask[offset + i];
    self->pieces.emplace_back(offset, bytes);
  }

  // Check returns an error unless the pieces came in order, covered `bytes` once and
  // started on kCombineAlignment boundaries.
  absl::Status Check(size_t bytes) const {
    size_t next = 0;
    for (const auto& [offset, size] : pieces) {
      if (offset != next || offset % kCombineAlignment != 0 || size == 0) {
        return absl::InternalError(absl::StrCat("piece at ", offset, " of ", size,
                                                " bytes after ", next, " bytes"));
      }
      next += size;
    }
    if (next != bytes) {
      return absl::InternalError(absl::StrCat("pieces cover ", next, " of ", bytes, " bytes"));
    }
    return absl::OkStatus();
  }
};

}  // namespace transport_conformance

// A combining receive writes its buffer only through its combiner (here dst = src
// XOR a mask), in ordered pieces on kCombineAlignment boundaries that cover the
// message once, from a peer (allowed to land in place) and from itself (not), at sizes up to several of any
// backend's pieces; a plain receive of the same pair afterwards still copies.
TEST_P(TransportConformanceTest, CombiningReceiveDeliversOrderedAlignedPieces) {
  using transport_conformance::Payload;
  using transport_conformance::XorCombine;
  // Large worlds only need to show the same paths, not the size: 256 KiB there.
  if (!std::get<0>(GetParam())()->combines()) {
    GTEST_SKIP() << "this transport has no combining receives (its harness says so)";
  }
  // Under a sanitizer 2 MiB: still three of gloo's 1 MiB combine pieces, two of MPI's
  // send window and eight of shm's pull pieces.
  const size_t large =
      (world() <= 4 ? (kUnderSanitizer ? size_t{2} << 20 : size_t{3} << 20) : size_t{1} << 18) + 5;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, large}) {
    SCOPED_TRACE(absl::StrCat(bytes, " bytes"));
    RunAll([&](Transport& t) -> absl::Status {
      const int next = (t.rank() + 1) % t.size();
      const int prev = (t.rank() + t.size() - 1) % t.size();
      const std::vector<std::byte> out = Payload(t.rank(), next, 4, bytes);
      const std::vector<std::byte> self_out = Payload(t.rank(), t.rank(), 5, bytes);
      XorCombine from_prev{Payload(99, t.rank(), 0, bytes), {}};
      XorCombine from_self{Payload(98, t.rank(), 0, bytes), {}};
      std::vector<std::byte> in(bytes), self_in(bytes), plain(bytes);
      std::vector<Request> requests;
      LOOM_ASSIGN_OR_RETURN(Request r1, t.RecvCombine(prev, 4, AsWritableBytes(in),
                                                      Combiner{&XorCombine::Fn, &from_prev,
                                                               /*lands_in_place=*/true}));
      LOOM_ASSIGN_OR_RETURN(Request s1, t.Send(next, 4, AsBytes(out)));
      LOOM_ASSIGN_OR_RETURN(Request s2, t.Send(t.rank(), 5, AsBytes(self_out)));
      LOOM_ASSIGN_OR_RETURN(Request r2, t.RecvCombine(t.rank(), 5, AsWritableBytes(self_in),
                                                      Combiner{&XorCombine::Fn, &from_self}));
      LOOM_ASSIGN_OR_RETURN(Request s3, t.Send(next, 4, AsBytes(out)));
      LOOM_ASSIGN_OR_RETURN(Request r3, t.Recv(prev, 4, AsWritableBytes(plain)));
      LOOM_RETURN_IF_ERROR(t.Wait({r1, s1, s2, r2, s3, r3}, transport_conformance::Soon()));
      const std::vector<std::byte> expected_in = Payload(prev, t.rank(), 4, bytes);
      for (size_t i = 0; i < bytes; ++i) {
        if (in[i] != (expected_in[i] ^ from_prev.mask[i]) ||
            self_in[i] != (self_out[i] ^ from_self.mask[i]) || plain[i] != expected_in[i]) {
          return absl::InternalError(absl::StrCat("rank ", t.rank(), ": byte ", i, " is wrong"));
        }
      }
      LOOM_RETURN_IF_ERROR(from_prev.Check(bytes));
      return from_self.Check(bytes);
    });
  }
}

// Tags are independent streams: receives posted in the reverse order of the sends
// still get the right message each.
TEST_P(TransportConformanceTest, TagsSeparateStreams) {
  using transport_conformance::Payload;
  RunAll([&](Transport& t) -> absl::Status {
    const int next = (t.rank() + 1) % t.size();
    const int prev = (t.rank() + t.size() - 1) % t.size();
    constexpr int kTags = 5;
    std::vector<std::vector<std::byte>> out(kTags), in(kTags, std::vector<std::byte>(64));
    std::vector<Request> requests;
    for (int tag = kTags - 1; tag >= 0; --tag) {
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, tag, AsWritableBytes(in[tag])));
      requests.push_back(r);
    }
    for (int tag = 0; tag < kTags; ++tag) {
      out[tag] = Payload(t.rank(), next, tag, 64);
      LOOM_ASSIGN_OR_RETURN(Request r, t.Send(next, tag, AsBytes(out[tag])));
      requests.push_back(r);
    }
    LOOM_RETURN_IF_ERROR(t.Wait(requests, transport_conformance::Soon()));
    for (int tag = 0; tag < kTags; ++tag) {
      LOOM_RETURN_IF_ERROR(transport_conformance::ExpectPayload(in[tag], prev, t.rank(), tag));
    }
    return absl::OkStatus();
  });
}

// Messages with the same source, destination and tag arrive in posting order.
TEST_P(TransportConformanceTest, SameTagIsFirstInFirstOut) {
  RunAll([&](Transport& t) -> absl::Status {
    const int next = (t.rank() + 1) % t.size();
    const int prev = (t.rank() + t.size() - 1) % t.size();
    constexpr int kMessages = 50;
    std::vector<int64_t> out(kMessages), in(kMessages, -1);
    std::vector<Request> requests;
    for (int i = 0; i < kMessages; ++i) {
      out[i] = int64_t{t.rank()} * 1000 + i;
      LOOM_ASSIGN_OR_RETURN(Request s, t.Send(next, 9, AsBytes(absl::MakeConstSpan(&out[i], 1))));
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, 9, AsWritableBytes(absl::MakeSpan(&in[i], 1))));
      requests.push_back(s);
      requests.push_back(r);
    }
    LOOM_RETURN_IF_ERROR(t.Wait(requests, transport_conformance::Soon()));
    for (int i = 0; i < kMessages; ++i) {
      if (in[i] != int64_t{prev} * 1000 + i) {
        return absl::InternalError(absl::StrCat("message ", i, " from rank ", prev, " arrived as ", in[i]));
      }
    }
    return absl::OkStatus();
  });
}

// Several large sends to one peer, posted at once both ways, all arrive whole: a
// backend that shares a window of bytes in flight among a peer's sends (mpi) drains
// them one after the other without starving or mixing any.
TEST_P(TransportConformanceTest, ManyLargeSendsToOnePeerAllArrive) {
  RunAll([&](Transport& t) -> absl::Status {
    const int next = (t.rank() + 1) % t.size();
    const int prev = (t.rank() + t.size() - 1) % t.size();
    constexpr int kMessages = 6;
    std::vector<std::vector<std::byte>> out, in;
    std::vector<Request> requests;
    for (int i = 0; i < kMessages; ++i) {
      const Tag tag = 20 + static_cast<Tag>(i % 2);  // two streams, three messages each
      const size_t bytes = (size_t{1} << 20) + 4099 + static_cast<size_t>(i);
      out.push_back(transport_conformance::Payload(t.rank(), next, tag, bytes));
      in.emplace_back(bytes);
    }
    for (int i = 0; i < kMessages; ++i) {
      const Tag tag = 20 + static_cast<Tag>(i % 2);
      LOOM_ASSIGN_OR_RETURN(Request s, t.Send(next, tag, out[i]));
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, tag, absl::MakeSpan(in[i])));
      requests.push_back(s);
      requests.push_back(r);
    }
    LOOM_RETURN_IF_ERROR(t.Wait(requests, transport_conformance::Soon()));
    for (int i = 0; i < kMessages; ++i) {
      const Tag tag = 20 + static_cast<Tag>(i % 2);
      LOOM_RETURN_IF_ERROR(transport_conformance::ExpectPayload(in[i], prev, t.rank(), tag));
    }
    return absl::OkStatus();
  });
}

// EstimatePath after 1 MiB messages to the next rank: a backend that measures
// paths has a round trip and a rate for it (sane ones: within a minute, above 1 KB/s;
// the round trip may come a little later),
// one that does not has zeros; a peer outside the group has zeros either way.
TEST_P(TransportConformanceTest, PathEstimatesAfterLargeMessagesAreSane) {
  const std::unique_ptr<TransportHarness> paths = std::get<0>(GetParam())();
  RunAll([&](Transport& t) -> absl::Status {
    const int next = (t.rank() + 1) % t.size();
    const int prev = (t.rank() + t.size() - 1) % t.size();
    const size_t bytes = size_t{1} << 20;
    const std::vector<std::byte> out = transport_conformance::Payload(t.rank(), next, 30, bytes);
    std::vector<std::byte> in(bytes);
    for (int round = 0; round < 3; ++round) {
      LOOM_ASSIGN_OR_RETURN(Request s, t.Send(next, 30, out));
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, 30, absl::MakeSpan(in)));
      LOOM_RETURN_IF_ERROR(t.Wait({s, r}, transport_conformance::Soon()));
      LOOM_RETURN_IF_ERROR(transport_conformance::ExpectPayload(in, prev, t.rank(), 30));
    }
    for (int outside : {-1, t.size()}) {
      const PathEstimate none = t.EstimatePath(outside);
      if (none.round_trip != absl::ZeroDuration() || none.bytes_per_second != 0) {
        return absl::InternalError(absl::StrCat("peer ", outside, " has a path estimate"));
      }
    }
    if (t.size() == 1) return absl::OkStatus();
    // The round trip is a send's (to next); the rate a receive's (from prev) or a
    // send's (to next: gloo times its large sends to their receiver's answer, as a
    // receiver that never waits for a piece has no sample of its own). A backend may
    // time round trips apart from the messages (gloo's pings): it has until the
    // deadline to measure.
    const bool measures_next = paths->measures_path(t.rank(), next, t.size());
    const bool measures_prev = paths->measures_path(t.rank(), prev, t.size());
    PathEstimate to_next = t.EstimatePath(next);
    PathEstimate from_prev = t.EstimatePath(prev);
    const absl::Time deadline = transport_conformance::Soon();
    while (measures_next && to_next.round_trip == absl::ZeroDuration() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
      to_next = t.EstimatePath(next);
      from_prev = t.EstimatePath(prev);
    }
    const std::string seen = absl::StrCat(
        "rank ", t.rank(), ": round trip to ", next, " ", absl::FormatDuration(to_next.round_trip),
        ", rate from ", prev, " ", from_prev.bytes_per_second, " B/s, to ", next, " ",
        to_next.bytes_per_second, " B/s");
    if ((!measures_next &&
         (to_next.round_trip != absl::ZeroDuration() || to_next.bytes_per_second != 0)) ||
        (!measures_prev && from_prev.bytes_per_second != 0)) {
      return absl::InternalError(absl::StrCat(seen, ", over a path that is not measured"));
    }
    if (measures_next &&
        (to_next.round_trip <= absl::ZeroDuration() || to_next.round_trip > absl::Minutes(1) ||
         std::max(measures_prev ? from_prev.bytes_per_second : 0.0, to_next.bytes_per_second) <
             1e3)) {
      return absl::InternalError(absl::StrCat(seen, ": not measured, or not sane"));
    }
    if (measures_prev && !(from_prev.bytes_per_second >= 0 && from_prev.bytes_per_second < 1e13)) {
      return absl::InternalError(absl::StrCat(seen, ": not sane"));
    }
    return absl::OkStatus();
  });
}

// A receive of the wrong size fails on both sides, naming both sizes. The send is
// 1 MiB, above any backend's buffered (eager) size, so its sender learns it too.
TEST_P(TransportConformanceTest, SizeMismatchFailsBothSides) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() > 1) return absl::OkStatus();
    std::vector<std::byte> buffer(t.rank() == 0 ? size_t{1} << 20 : 64);
    LOOM_ASSIGN_OR_RETURN(Request r, t.rank() == 0 ? t.Send(1, 4, AsBytes(buffer))
                                                   : t.Recv(0, 4, AsWritableBytes(buffer)));
    return t.Wait({r}, transport_conformance::Soon());
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r], StatusIs(absl::StatusCode::kFailedPrecondition,
                                     ::testing::HasSubstr("sent 1048576 bytes with tag 4 to rank 1, "
                                                          "which posted a receive of 64 bytes")))
        << "rank " << r;
  }
}

// A small send may complete as buffered before the mismatch is found; the receive
// fails all the same, naming both sizes, and the pair still works afterwards.
TEST_P(TransportConformanceTest, SmallSizeMismatchFailsTheReceive) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() > 1) return absl::OkStatus();
    std::vector<std::byte> buffer(t.rank() == 0 ? 100 : 64);
    LOOM_ASSIGN_OR_RETURN(Request r, t.rank() == 0 ? t.Send(1, 4, AsBytes(buffer))
                                                   : t.Recv(0, 4, AsWritableBytes(buffer)));
    const absl::Status mismatch = t.Wait({r}, transport_conformance::Soon());
    if (t.rank() == 0 && !mismatch.ok() &&
        mismatch.code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError(absl::StrCat("the sender got ", mismatch.ToString()));
    }
    std::vector<std::byte> next(8, std::byte{static_cast<unsigned char>(t.rank() + 1)});
    std::vector<std::byte> got(8);
    const int peer = 1 - t.rank();
    LOOM_ASSIGN_OR_RETURN(Request s2, t.Send(peer, 5, AsBytes(next)));
    LOOM_ASSIGN_OR_RETURN(Request r2, t.Recv(peer, 5, AsWritableBytes(got)));
    LOOM_RETURN_IF_ERROR(t.Wait({s2, r2}, transport_conformance::Soon()));
    if (got != std::vector<std::byte>(8, std::byte{static_cast<unsigned char>(peer + 1)})) {
      return absl::InternalError("the exchange after the mismatch delivered the wrong bytes");
    }
    return t.rank() == 1 ? mismatch : absl::OkStatus();
  });
  LOOM_EXPECT_OK(results[0]);
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                   ::testing::HasSubstr("sent 100 bytes with tag 4 to rank 1, "
                                                        "which posted a receive of 64 bytes")));
}

// A receive nobody sends times out with DeadlineExceeded naming the peer, on time;
// a send posted after that deadline finds no receiver and times out in turn.
// Stamps (transport.h): a message and a receive of one scope whose words differ pair
// up although their tags differ, and fail as a mismatch carrying both stamps: the
// receive at once, and a large send too (small ones may have completed as buffered).
// Same words, or another scope, or no stamp: matched by tag alone, as always.
TEST_P(TransportConformanceTest, ConflictingStampsFailBothSidesAtOnce) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const Stamp mine{7, {1, 2}};
  const Stamp theirs{7, {1, 3}};
  for (const size_t bytes : {size_t{64}, size_t{1} << 20}) {
    const absl::Time start = absl::Now();
    const std::vector<absl::Status> results = RunEach([&](Transport& t) -> absl::Status {
      if (t.rank() > 1) return absl::OkStatus();
      std::vector<std::byte> buffer(bytes);
      // Different tags as well: only the stamps can pair them.
      LOOM_ASSIGN_OR_RETURN(Request r, t.rank() == 0
                                           ? t.PostSend(1, 11, AsBytes(buffer), theirs)
                                           : t.PostRecv(0, 12, AsWritableBytes(buffer),
                                                        Combiner{}, mine));
      const absl::Status status = t.Wait({r}, transport_conformance::Soon());
      if (t.rank() == 0 && bytes < 4096 && status.ok()) return status;  // Buffered.
      const std::optional<StampMismatch> mismatch = StampMismatchOf(status);
      if (!mismatch.has_value()) {
        return absl::InternalError(absl::StrCat("no stamp mismatch: ", status.ToString()));
      }
      if (mismatch->sender != 0 || mismatch->receiver != 1 || mismatch->tag != 11 ||
          mismatch->sent.words[1] != 3 || mismatch->expected.words[1] != 2) {
        return absl::InternalError(absl::StrCat("wrong mismatch record: ", status.ToString()));
      }
      return status;
    });
    EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << bytes;
    EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kFailedPrecondition,
                                     ::testing::HasSubstr("mismatched calls")))
        << bytes;
    if (bytes >= 4096) {
      EXPECT_EQ(results[0].code(), absl::StatusCode::kFailedPrecondition) << results[0];
    } else {
      EXPECT_THAT(results[0].code(), ::testing::AnyOf(absl::StatusCode::kOk,
                                                      absl::StatusCode::kFailedPrecondition))
          << results[0];
    }
  }
}

TEST_P(TransportConformanceTest, AgreeingOrUnrelatedStampsMatchByTag) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() > 1) return absl::OkStatus();
    const int peer = 1 - t.rank();
    // Tag 21: equal stamps. Tag 22: other scopes (5 and 6). Tag 23: one side unstamped.
    // Posted in an order that puts a differently tagged message first each time.
    const Stamp a{5, {9, 9}};
    const Stamp b{6, {8, 8}};
    std::vector<std::byte> out(32, std::byte{static_cast<unsigned char>(t.rank() + 1)});
    std::vector<std::byte> in21(32), in22(32), in23(32);
    std::vector<Request> requests;
    LOOM_ASSIGN_OR_RETURN(Request s23, t.Send(peer, 23, AsBytes(out)));
    LOOM_ASSIGN_OR_RETURN(Request s22, t.PostSend(peer, 22, AsBytes(out), t.rank() == 0 ? a : b));
    LOOM_ASSIGN_OR_RETURN(Request s21, t.PostSend(peer, 21, AsBytes(out), a));
    LOOM_ASSIGN_OR_RETURN(Request r21,
                          t.PostRecv(peer, 21, AsWritableBytes(in21), Combiner{}, a));
    LOOM_ASSIGN_OR_RETURN(Request r22, t.PostRecv(peer, 22, AsWritableBytes(in22), Combiner{},
                                                  t.rank() == 0 ? b : a));
    LOOM_ASSIGN_OR_RETURN(Request r23,
                          t.PostRecv(peer, 23, AsWritableBytes(in23), Combiner{}, a));
    LOOM_RETURN_IF_ERROR(t.Wait({s21, s22, s23, r21, r22, r23}, transport_conformance::Soon()));
    const std::vector<std::byte> expected(32, std::byte{static_cast<unsigned char>(peer + 1)});
    if (in21 != expected || in22 != expected || in23 != expected) {
      return absl::InternalError("a stamped message delivered the wrong bytes");
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 2; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

TEST_P(TransportConformanceTest, UnmatchedReceiveTimesOutNamingThePeer) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() != 1) return absl::OkStatus();
    std::vector<std::byte> buffer(32, std::byte{0x5A});
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(0, 11, AsWritableBytes(buffer)));
    const absl::Time start = absl::Now();
    const absl::Status status = t.Wait({r}, start + absl::Milliseconds(200));
    const absl::Duration took = absl::Now() - start;
    if (took < absl::Milliseconds(190) || took > absl::Seconds(5)) {
      return absl::InternalError(absl::StrCat("deadline of 200ms took ", absl::FormatDuration(took)));
    }
    for (std::byte b : buffer) {
      if (b != std::byte{0x5A}) return absl::InternalError("a timed-out receive wrote its buffer");
    }
    return status;
  });
  // "receive from rank 0 (tag ...)", or with the peer's identity: "receive from world
  // rank 0 (pid 42 on h) (tag ...)".
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::ContainsRegex(
                           "receive from (world )?rank 0( \\([^)]*\\))? \\(tag 11, 32 bytes\\)")));
}

// Abort on one rank fails its peers' pending requests at once, naming it.
TEST_P(TransportConformanceTest, AbortWakesPeersWithTheRankNamed) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() == 1) {
      absl::SleepFor(absl::Milliseconds(50));  // Let rank 0 block first.
      t.Abort(absl::AbortedError("rank 1 gave up"));
      std::vector<std::byte> byte(1);
      const absl::StatusOr<Request> after = t.Send(0, 1, AsBytes(byte));
      return after.ok() ? absl::InternalError("a send after Abort was accepted") : after.status();
    }
    if (t.rank() != 0) return absl::OkStatus();
    std::vector<std::byte> buffer(8);
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(1, 1, AsWritableBytes(buffer)));
    const absl::Time start = absl::Now();
    const absl::Status status = t.Wait({r}, start + absl::Seconds(20));
    if (absl::Now() - start > absl::Seconds(10)) return absl::InternalError("abort did not wake rank 0");
    return status;
  });
  // "rank 1 aborted", or with the peer's identity: "world rank 1 (pid 42 on h) aborted".
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kUnavailable,
                       ::testing::AllOf(::testing::ContainsRegex("rank 1( \\([^)]*\\))? aborted"),
                                        ::testing::HasSubstr("aborted: rank 1 gave up"))));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kAborted, ::testing::HasSubstr("rank 1 gave up")));
}

TEST_P(TransportConformanceTest, RejectsBadPeersAndUnknownRequests) {
  RunAll([](Transport& t) -> absl::Status {
    std::vector<std::byte> byte(1);
    const absl::StatusOr<Request> bad = t.Send(t.size(), 0, AsBytes(byte));
    if (bad.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(bad.status().message(), absl::StrCat("peer ", t.size()))) {
      return absl::InternalError(absl::StrCat("bad peer gave ", bad.status().ToString()));
    }
    const absl::StatusOr<Request> negative = t.Recv(-1, 0, AsWritableBytes(byte));
    if (negative.status().code() != absl::StatusCode::kInvalidArgument) {
      return absl::InternalError(absl::StrCat("peer -1 gave ", negative.status().ToString()));
    }
    const absl::Status unknown = t.Wait({Request{987654}}, transport_conformance::Soon());
    if (unknown.code() != absl::StatusCode::kNotFound) {
      return absl::InternalError(absl::StrCat("unknown request gave ", unknown.ToString()));
    }
    return absl::OkStatus();
  });
}

// TryWait leaves a pending request pending (nothing forgotten or cancelled) and
// forgets a finished one, below and above every backend's eager limit.
TEST_P(TransportConformanceTest, TryWaitLeavesPendingRequestsAndForgetsFinishedOnes) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() >= 2) return absl::OkStatus();
    // Every rank asks first, so both give up together where TryWait is missing.
    const absl::StatusOr<bool> probe = t.TryWait({}, absl::InfinitePast());
    if (!probe.ok()) return probe.status();
    if (*probe) return absl::InternalError("TryWait naming nothing returned true");
    const absl::Time give_up = transport_conformance::Soon();
    for (const size_t bytes : {size_t{64}, size_t{1} << 20}) {
      const Tag data_tag = 100 + bytes % 7, go_tag = 200 + bytes % 7;
      std::vector<std::byte> go(1);
      if (t.rank() == 0) {
        std::vector<std::byte> buffer(bytes, std::byte{0x5A});
        LOOM_ASSIGN_OR_RETURN(Request recv, t.Recv(1, data_tag, AsWritableBytes(buffer)));
        LOOM_ASSIGN_OR_RETURN(bool early, t.TryWait({recv}, absl::InfinitePast()));
        if (early) return absl::InternalError("a receive finished before its peer sent");
        LOOM_ASSIGN_OR_RETURN(bool still, t.TryWait({recv}, absl::Now() + absl::Milliseconds(20)));
        if (still) return absl::InternalError("a receive finished before its peer sent");
        LOOM_ASSIGN_OR_RETURN(Request say_go, t.Send(1, go_tag, AsBytes(go)));
        LOOM_RETURN_IF_ERROR(t.Wait({say_go}, give_up));
        bool done = false;
        while (!done) {
          if (absl::Now() > give_up) return absl::InternalError("the receive never finished");
          LOOM_ASSIGN_OR_RETURN(done, t.TryWait({recv}, absl::Now() + absl::Milliseconds(10)));
        }
        LOOM_RETURN_IF_ERROR(transport_conformance::ExpectPayload(buffer, 1, 0, data_tag));
        const absl::Status again = t.Wait({recv}, give_up);
        if (again.code() != absl::StatusCode::kNotFound) {
          return absl::InternalError(
              absl::StrCat("a request TryWait finished was not forgotten: ", again.ToString()));
        }
      } else {
        LOOM_ASSIGN_OR_RETURN(Request heard, t.Recv(0, go_tag, AsWritableBytes(go)));
        LOOM_RETURN_IF_ERROR(t.Wait({heard}, give_up));
        const std::vector<std::byte> payload = transport_conformance::Payload(1, 0, data_tag, bytes);
        LOOM_ASSIGN_OR_RETURN(Request send, t.Send(0, data_tag, AsBytes(payload)));
        bool done = false;
        while (!done) {
          if (absl::Now() > give_up) return absl::InternalError("the send never finished");
          LOOM_ASSIGN_OR_RETURN(done, t.TryWait({send}, absl::Now() + absl::Milliseconds(10)));
        }
      }
    }
    const absl::StatusOr<bool> unknown = t.TryWait({Request{987654}}, absl::InfinitePast());
    if (unknown.status().code() != absl::StatusCode::kNotFound) {
      return absl::InternalError(absl::StrCat("TryWait on an unknown request gave ",
                                              unknown.status().ToString()));
    }
    return absl::OkStatus();
  });
  if (absl::IsUnimplemented(results[0])) GTEST_SKIP() << results[0];
  for (int r = 0; r < world(); ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

// Wake ends a TryWait that names nothing: one called before it, and one called from
// another thread while it waits.
TEST_P(TransportConformanceTest, WakeEndsATryWaitNamingNothing) {
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    const absl::StatusOr<bool> probe = t.TryWait({}, absl::InfinitePast());
    if (!probe.ok()) return probe.status();
    for (const bool from_another_thread : {false, true}) {
      std::thread waker;
      if (from_another_thread) {
        // One Wake, once the TryWait is most likely asleep: a Wake lost in the race
        // with going to sleep leaves it there until its 30 s.
        waker = std::thread([&] {
          absl::SleepFor(absl::Milliseconds(50));
          t.Wake();
        });
      } else {
        t.Wake();
      }
      const absl::Time start = absl::Now();
      const absl::StatusOr<bool> woken = t.TryWait({}, start + absl::Seconds(30));
      if (waker.joinable()) waker.join();
      if (!woken.ok()) return woken.status();
      if (*woken) return absl::InternalError("TryWait naming nothing returned true");
      if (absl::Now() - start > absl::Seconds(10)) {
        return absl::InternalError(absl::StrCat("Wake did not end the TryWait (",
                                                from_another_thread ? "another thread" : "before",
                                                ")"));
      }
    }
    return absl::OkStatus();
  });
  if (absl::IsUnimplemented(results[0])) GTEST_SKIP() << results[0];
  for (int r = 0; r < world(); ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

// Wake ends a TryWait that names a receive still pending (its peer sends only
// later): false, and the receive still pending for a Wait after it.
TEST_P(TransportConformanceTest, WakeEndsATryWaitOnAPendingRequest) {
  if (world() < 2) GTEST_SKIP() << "needs two ranks";
  const std::vector<absl::Status> results = RunEach([](Transport& t) -> absl::Status {
    if (t.rank() >= 2) return absl::OkStatus();
    const absl::StatusOr<bool> probe = t.TryWait({}, absl::InfinitePast());
    if (!probe.ok()) return probe.status();
    std::vector<std::byte> go(1);
    if (t.rank() == 1) {
      LOOM_ASSIGN_OR_RETURN(Request heard, t.Recv(0, 61, AsWritableBytes(go)));
      LOOM_RETURN_IF_ERROR(t.Wait({heard}, transport_conformance::Soon()));
      const std::vector<std::byte> payload = transport_conformance::Payload(1, 0, 60, 100);
      LOOM_ASSIGN_OR_RETURN(Request send, t.Send(0, 60, AsBytes(payload)));
      return t.Wait({send}, transport_conformance::Soon());
    }
    std::vector<std::byte> buffer(100);
    LOOM_ASSIGN_OR_RETURN(Request recv, t.Recv(1, 60, AsWritableBytes(buffer)));
    std::thread waker([&] {
      absl::SleepFor(absl::Milliseconds(50));
      t.Wake();
    });
    const absl::Time start = absl::Now();
    const absl::StatusOr<bool> woken = t.TryWait({recv}, start + absl::Seconds(30));
    waker.join();
    if (!woken.ok()) return woken.status();
    if (*woken) return absl::InternalError("a receive finished before its peer sent");
    if (absl::Now() - start > absl::Seconds(10)) {
      return absl::InternalError("Wake did not end a TryWait naming a pending receive");
    }
    LOOM_ASSIGN_OR_RETURN(Request say_go, t.Send(1, 61, AsBytes(go)));
    LOOM_RETURN_IF_ERROR(t.Wait({say_go, recv}, transport_conformance::Soon()));
    return transport_conformance::ExpectPayload(buffer, 1, 0, 60);
  });
  if (absl::IsUnimplemented(results[0])) GTEST_SKIP() << results[0];
  for (int r = 0; r < world(); ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

// Many small ring steps with more ranks than cores: waits must block, not livelock.
TEST_P(TransportConformanceTest, RingOfManySmallStepsProgresses) {
  RunAll([](Transport& t) -> absl::Status {
    const int next = (t.rank() + 1) % t.size();
    const int prev = (t.rank() + t.size() - 1) % t.size();
    int64_t token = t.rank();
    for (int step = 0; step < 200; ++step) {
      int64_t incoming = -1;
      LOOM_ASSIGN_OR_RETURN(Request s, t.Send(next, step, AsBytes(absl::MakeConstSpan(&token, 1))));
      LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, step, AsWritableBytes(absl::MakeSpan(&incoming, 1))));
      LOOM_RETURN_IF_ERROR(t.Wait({s, r}, transport_conformance::Soon()));
      token = incoming;
    }
    // After 200 steps the token has travelled 200 ranks backwards around the ring.
    const int64_t expected = ((t.rank() - 200) % t.size() + t.size()) % t.size();
    if (token != expected) {
      return absl::InternalError(absl::StrCat("token ", token, ", expected ", expected));
    }
    return absl::OkStatus();
  });
}

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_CONFORMANCE_H_
