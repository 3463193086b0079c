#include "offload/adamw/internal/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/functional/function_ref.h"

namespace loom {
namespace adamw_internal {

WorkerPool& WorkerPool::Shared() {
  // Never destroyed: joining parked workers from a static destructor would race with the
  // teardown of other statics and of threads still calling Run.
  static WorkerPool* const pool = new WorkerPool();
  return *pool;
}

WorkerPool::~WorkerPool() {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void WorkerPool::Drain(absl::FunctionRef<void(int64_t)> task, int64_t num_tasks) {
  for (int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < num_tasks;
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    task(i);
  }
}

void WorkerPool::WorkerLoop(int index, uint64_t seen) {
  while (true) {
    const absl::FunctionRef<void(int64_t)>* task = nullptr;
    int64_t num_tasks = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      // Workers beyond this job's count go back to waiting; Run does not count them.
      if (index >= participants_) continue;
      task = task_;
      num_tasks = num_tasks_;
    }
    Drain(*task, num_tasks);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --busy_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

void WorkerPool::Run(int threads, int64_t num_tasks, absl::FunctionRef<void(int64_t)> task) {
  if (threads <= 1 || num_tasks <= 1) {
    for (int64_t i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, num_tasks - 1));
  while (static_cast<int>(workers_.size()) < helpers) {
    uint64_t generation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      generation = generation_;
    }
    const int index = static_cast<int>(workers_.size());
    workers_.emplace_back([this, index, generation] { WorkerLoop(index, generation); });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = &task;
    num_tasks_ = num_tasks;
    participants_ = helpers;
    busy_ = helpers;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  work_cv_.notify_all();
  Drain(task, num_tasks);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  task_ = nullptr;
}

}  // namespace adamw_internal
}  // namespace loom
