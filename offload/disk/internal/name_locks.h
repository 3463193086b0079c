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

#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "core/mutex.h"

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
  Held Lock(absl::string_view name) ABSL_LOCKS_EXCLUDED(mu_) {
    std::string key(name);
    MutexLock lock(&mu_);
    while (held_.count(key) != 0) released_.Wait(&mu_);
    held_.insert(key);
    return Held(this, std::move(key));
  }

 private:
  void Unlock(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    held_.erase(name);
    released_.SignalAll();
  }

  Mutex mu_;
  CondVar released_;  // a name left held_
  std::set<std::string> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_NAME_LOCKS_H_
