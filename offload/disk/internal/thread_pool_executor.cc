#include "offload/disk/internal/thread_pool_executor.h"

#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "offload/disk/internal/posix_file.h"

namespace loom {
namespace disk_internal {

absl::Status PerformBlocking(const IoOp& op) {
  switch (op.kind) {
    case IoKind::kRead: {
      auto n = PreadFull(op.fd, absl::MakeSpan(op.data, op.length), op.offset, op.path);
      if (!n.ok()) return n.status();
      if (*n < op.length) {
        return absl::DataLossError(absl::StrCat("pread(", op.path, ", ", op.length,
                                                " bytes at offset ", op.offset,
                                                "): unexpected end of file after ", *n, " bytes"));
      }
      return absl::OkStatus();
    }
    case IoKind::kWrite:
      return PwriteFull(op.fd, absl::MakeConstSpan(op.data, op.length), op.offset, op.path);
    case IoKind::kDataSync:
      while (::fdatasync(op.fd) != 0) {
        if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("fdatasync(", op.path, ")"));
      }
      return absl::OkStatus();
  }
  return absl::InternalError("unknown IoKind");
}

absl::StatusOr<std::unique_ptr<ThreadPoolExecutor>> ThreadPoolExecutor::Create(int threads) {
  if (threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("thread pool needs at least 1 thread, got ", threads));
  }
  return std::unique_ptr<ThreadPoolExecutor>(new ThreadPoolExecutor(threads));
}

ThreadPoolExecutor::ThreadPoolExecutor(int threads) : bounce_(threads) {
  workers_.reserve(threads);
  for (int w = 0; w < threads; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPoolExecutor::~ThreadPoolExecutor() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_.SignalAll();
  for (std::thread& t : workers_) t.join();
}

void ThreadPoolExecutor::Schedule(Task task) {
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }
  work_.Signal();
}

void ThreadPoolExecutor::WorkerLoop(int worker) {
  while (true) {
    Task task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task(bounce_[worker]);
  }
}

absl::Status ThreadPoolExecutor::Run(size_t count, const PrepareFn& prepare,
                                     const CompleteFn& complete) {
  if (count == 0) return absl::OkStatus();
  // Lives on this stack frame: Run returns only after every task has finished with it
  // (the last one notifies while holding the mutex).
  struct CallState {
    explicit CallState(size_t tasks) : pending(tasks) {}
    Mutex mu;
    CondVar done;  // pending reached 0
    size_t pending ABSL_GUARDED_BY(mu);
    absl::Status status ABSL_GUARDED_BY(mu);
    std::atomic<bool> failed{false};
  } call(count);
  for (size_t i = 0; i < count; ++i) {
    Schedule([&call, &prepare, &complete, i](BounceBuffer& bounce) {
      absl::Status s;
      if (!call.failed.load(std::memory_order_acquire)) {
        absl::StatusOr<IoOp> op = prepare(i, bounce);
        if (!op.ok()) {
          s = op.status();
        } else {
          s = PerformBlocking(*op);
          if (s.ok()) s = complete(i, *op);
        }
      }
      MutexLock lock(&call.mu);
      if (!s.ok() && call.status.ok()) {
        call.status = std::move(s);
        call.failed.store(true, std::memory_order_release);
      }
      if (--call.pending == 0) call.done.SignalAll();
    });
  }
  MutexLock lock(&call.mu);
  while (call.pending != 0) call.done.Wait(&call.mu);
  return call.status;
}

}  // namespace disk_internal
}  // namespace loom
