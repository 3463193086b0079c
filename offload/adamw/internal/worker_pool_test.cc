#include "offload/adamw/internal/worker_pool.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace adamw_internal {
namespace {

// Every task runs exactly once, whatever the thread and task counts.
TEST(WorkerPoolTest, EachTaskOnce) {
  WorkerPool pool;
  for (const int threads : {1, 2, 3, 8}) {
    for (const int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(tasks));
      pool.Run(threads, tasks, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
      for (int64_t i = 0; i < tasks; ++i) {
        ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
            << "threads " << threads << " tasks " << tasks << " task " << i;
      }
    }
  }
}

TEST(WorkerPoolTest, OneThreadRunsInlineInOrder) {
  WorkerPool pool;
  std::vector<int64_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  pool.Run(1, 5, [&](int64_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST(WorkerPoolTest, UsesSeveralThreads) {
  WorkerPool pool;
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> inside{0};
  // Each task waits until another thread is inside a task too (or gives up after a while on
  // a loaded machine), so a pool that ran everything on one thread shows.
  pool.Run(2, 2, [&](int64_t) {
    inside.fetch_add(1);
    for (int spin = 0; spin < 2000000 && inside.load() < 2; ++spin) std::this_thread::yield();
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(WorkerPoolTest, ConcurrentCallersTakeTurns) {
  WorkerPool& pool = WorkerPool::Shared();
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        pool.Run(3, 10, [&](int64_t i) { sum.fetch_add(i + 1); });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(sum.load(), 4 * 50 * 55);
}

TEST(WorkerPoolTest, DestroyedPoolJoinsItsWorkers) {
  for (int i = 0; i < 20; ++i) {
    auto pool = std::make_unique<WorkerPool>();
    std::atomic<int> runs{0};
    pool->Run(4, 16, [&](int64_t) { runs.fetch_add(1); });
    EXPECT_EQ(runs.load(), 16);
  }
}

}  // namespace
}  // namespace adamw_internal
}  // namespace loom
