#include "offload/prefetch_stream.h"

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/mutex.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

// The byte tensor `index` holds at `offset`: distinct per tensor and position.
std::byte Pattern(size_t index, size_t offset) {
  return std::byte{static_cast<unsigned char>((index * 131 + offset * 7 + (offset >> 8)) & 0xFF)};
}

struct Fixture {
  Fixture() {
    HostPoolOptions pool_options;
    pool_options.budget_bytes = 16 << 20;
    pool_options.kind = HostMemoryKind::kPageable;
    pool = *HostMemoryPool::Create(pool_options);
    engine = *PrefetchEngine::Create({2, 64});
  }
  std::unique_ptr<HostMemoryPool> pool;
  std::unique_ptr<PrefetchEngine> engine;
};

std::vector<StreamTensor> Tensors(int count) {
  std::vector<StreamTensor> tensors;
  for (int i = 0; i < count; ++i) {
    tensors.push_back({absl::StrCat("layer", i, ".w"), size_t(1000 + 4093 * (i % 3) + i)});
  }
  return tensors;
}

// Writes the pattern and records, under a lock, which fetches have started.
struct PatternSource {
  absl::Status Fetch(size_t index, absl::Span<std::byte> into) {
    {
      MutexLock lock(&mu);
      highest_started = std::max<int64_t>(highest_started, index);
      ++fetches;
    }
    for (size_t i = 0; i < into.size(); ++i) into[i] = Pattern(index, i);
    return absl::OkStatus();
  }
  int64_t HighestStarted() {
    MutexLock lock(&mu);
    return highest_started;
  }
  Mutex mu;
  int64_t highest_started ABSL_GUARDED_BY(mu) = -1;
  int fetches ABSL_GUARDED_BY(mu) = 0;
};

TEST(PrefetchStreamTest, HandsOutEveryTensorInOrderWithItsBytes) {
  for (int depth : {1, 2, 3}) {
    Fixture f;
    const std::vector<StreamTensor> tensors = Tensors(9);
    PatternSource source;
    LOOM_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<PrefetchStream> stream,
        PrefetchStream::Create(*f.engine, *f.pool, tensors, {depth, absl::Seconds(10)},
                               [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
                                 return source.Fetch(i, into);
                               }));
    // depth + 1 buffers of the largest tensor (1000 + 2*4093 + 8 bytes, one 4 KiB unit
    // rounded: 12 KiB each).
    EXPECT_EQ(f.pool->stats().in_use_bytes, size_t(depth + 1) * 12288);
    for (size_t k = 0; k < tensors.size(); ++k) {
      LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> item, stream->Next(Soon()));
      ASSERT_TRUE(item.has_value());
      ASSERT_EQ(item->index, k);
      ASSERT_EQ(*item->name, tensors[k].name);
      ASSERT_EQ(item->data.size(), tensors[k].bytes);
      // While tensor k is in use, nothing past k + depth may be fetched: its buffer
      // would be k's.
      EXPECT_LE(source.HighestStarted(), int64_t(k) + depth) << "depth " << depth;
      // And the tensors ahead do arrive meanwhile (the overlap), up to k + depth.
      const int64_t ahead = std::min<int64_t>(k + depth, tensors.size() - 1);
      const absl::Time give_up = Soon();
      while (source.HighestStarted() < ahead && absl::Now() < give_up) {
        absl::SleepFor(absl::Microseconds(50));
      }
      EXPECT_EQ(source.HighestStarted(), ahead);
      for (size_t i = 0; i < item->data.size(); ++i) {
        ASSERT_EQ(item->data[i], Pattern(k, i)) << "tensor " << k << " byte " << i;
      }
    }
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> end, stream->Next(Soon()));
    EXPECT_FALSE(end.has_value());
    MutexLock lock(&source.mu);
    EXPECT_EQ(source.fetches, 9);
  }
}

TEST(PrefetchStreamTest, AFetchErrorStopsTheStreamNamingTheTensor) {
  Fixture f;
  const std::vector<StreamTensor> tensors = Tensors(6);
  PatternSource source;
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PrefetchStream> stream,
      PrefetchStream::Create(*f.engine, *f.pool, tensors, {2, absl::Seconds(10)},
                             [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
                               if (i == 3) return absl::DataLossError("block 2 checksum mismatch");
                               return source.Fetch(i, into);
                             }));
  for (int k = 0; k < 3; ++k) LOOM_ASSERT_OK(stream->Next(Soon()).status());
  EXPECT_THAT(stream->Next(Soon()).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("prefetch of 'layer3.w': block 2 checksum mismatch")));
  EXPECT_THAT(stream->Next(Soon()).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("stopped after an earlier error"), HasSubstr("layer3.w"))));
}

TEST(PrefetchStreamTest, ASlowFetchIsADeadlineThatCanBeRetried) {
  Fixture f;
  absl::Notification release;
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PrefetchStream> stream,
      PrefetchStream::Create(*f.engine, *f.pool, Tensors(2), {1, absl::Seconds(10)},
                             [&](size_t, absl::Span<std::byte>, const CancelToken&) {
                               release.WaitForNotificationWithTimeout(absl::Seconds(20));
                               return absl::OkStatus();
                             }));
  EXPECT_THAT(stream->Next(absl::Now() + absl::Milliseconds(20)).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("'layer0.w' did not finish")));
  release.Notify();
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> item, stream->Next(Soon()));
  ASSERT_TRUE(item.has_value());
  EXPECT_EQ(item->index, 0u);
}

TEST(PrefetchStreamTest, AFetchFailingWithItsOwnDeadlineIsAnError) {
  Fixture f;
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PrefetchStream> stream,
      PrefetchStream::Create(*f.engine, *f.pool, Tensors(2), {1, absl::Seconds(10)},
                             [&](size_t, absl::Span<std::byte>, const CancelToken&) {
                               return absl::DeadlineExceededError("disk read timed out");
                             }));
  EXPECT_THAT(stream->Next(Soon()).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("'layer0.w': disk read timed out")));
  EXPECT_THAT(stream->Next(Soon()).status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                       HasSubstr("disk read timed out")));
}

TEST(PrefetchStreamTest, BuffersComeFromTheBudget) {
  Fixture f;
  std::vector<StreamTensor> tensors = {{"big", 6 << 20}, {"big2", 6 << 20}, {"big3", 6 << 20}};
  EXPECT_THAT(PrefetchStream::Create(*f.engine, *f.pool, tensors, {2, absl::Seconds(1)},
                                     [](size_t, absl::Span<std::byte>, const CancelToken&) {
                                       return absl::OkStatus();
                                     })
                  .status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("depth 2 needs 3 buffers of 6291456 bytes"),
                             HasSubstr("budget"))));
  EXPECT_EQ(f.pool->stats().in_use_bytes, 0u);  // The two that fitted went back.
  EXPECT_THAT(PrefetchStream::Create(*f.engine, *f.pool, tensors, {0, absl::Seconds(1)},
                                     [](size_t, absl::Span<std::byte>, const CancelToken&) {
                                       return absl::OkStatus();
                                     })
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth 0")));
}

TEST(PrefetchStreamTest, EmptyListsAndEmptyTensors) {
  Fixture f;
  auto fetch = [](size_t, absl::Span<std::byte> into, const CancelToken&) {
    return into.empty() ? absl::OkStatus() : absl::InternalError("expected an empty buffer");
  };
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<PrefetchStream> none,
                            PrefetchStream::Create(*f.engine, *f.pool, {}, {1, absl::Seconds(1)}, fetch));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> end, none->Next(Soon()));
  EXPECT_FALSE(end.has_value());
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PrefetchStream> zeros,
      PrefetchStream::Create(*f.engine, *f.pool, {{"a", 0}, {"b", 0}}, {1, absl::Seconds(1)}, fetch));
  for (int k = 0; k < 2; ++k) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> item, zeros->Next(Soon()));
    ASSERT_TRUE(item.has_value());
    EXPECT_TRUE(item->data.empty());
  }
}

TEST(PrefetchStreamTest, DestroyingMidStreamCancelsFetchesAndKeepsTheirBuffersAlive) {
  Fixture f;
  std::atomic<int> cancelled{0};
  std::atomic<int> started{0};
  {
    LOOM_ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<PrefetchStream> stream,
        PrefetchStream::Create(*f.engine, *f.pool, Tensors(8), {2, absl::Seconds(10)},
                               [&](size_t, absl::Span<std::byte> into, const CancelToken& cancel) {
                                 ++started;
                                 while (!cancel.cancelled()) absl::SleepFor(absl::Microseconds(100));
                                 ++cancelled;
                                 // Writing after the cancel is still safe: the buffer
                                 // lives as long as this fetch.
                                 for (std::byte& b : into) b = std::byte{1};
                                 return absl::OkStatus();
                               }));
    const absl::Time give_up = Soon();
    while (started.load() < 2 && absl::Now() < give_up) absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_EQ(cancelled.load(), started.load());
  EXPECT_EQ(f.pool->stats().in_use_bytes, 0u);
  EXPECT_EQ(f.engine->stats().cancelled, 3);  // Two running, one still queued.
}

}  // namespace
}  // namespace loom
