// NameLocks: one exclusive lock per tensor name, so that a Write, Read or Remove of a
// name never interleaves with another operation on the same name in this process
// (operations on different names run concurrently). Locks exist only while held.
//
// Example:
//   NameLocks locks;
//   {
//     NameLocks::Held held = locks.Lock("w1");   // blocks while another thread holds "w1"
//     ...                                        // released at scope exit
//   }
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_NAME_LOCKS_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_NAME_LOCKS_H_

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace disk_internal {

class NameLocks {
 public:
  class Held {
   public:
    Held(Held&& other) noexcept : locks_(other.locks_), name_(std::move(other.name_)) {
      other.locks_ = nullptr;
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    Held& operator=(Held&&) = delete;
    ~Held() {
      if (locks_ != nullptr) locks_->Unlock(name_);
    }

   private:
    friend class NameLocks;
    Held(NameLocks* locks, std::string name) : locks_(locks), name_(std::move(name)) {}
    NameLocks* locks_;
    std::string name_;
  };

  // Lock blocks until no other holder of `name` remains, then holds it.
  Held Lock(absl::string_view name) {
    std::string key(name);
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait(lock, [&] { return held_.count(key) == 0; });
    held_.insert(key);
    return Held(this, std::move(key));
  }

 private:
  void Unlock(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.erase(name);
    released_.notify_all();
  }

  std::mutex mu_;  // not absl::Mutex: see thread_pool_executor.h
  std::condition_variable released_;
  std::set<std::string> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_NAME_LOCKS_H_
