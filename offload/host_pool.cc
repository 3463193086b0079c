#include "offload/host_pool.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/mutex.h"
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace host_pool_internal {
namespace {

std::string Bytes(size_t bytes) {
  return absl::StrCat(bytes, " bytes (", absl::StrFormat("%.1f", bytes / 1048576.0), " MiB)");
}

size_t RoundUp(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

// PoolState: the accounting and the cache, shared by the pool and its blocks.
class PoolState : public std::enable_shared_from_this<PoolState> {
 public:
  PoolState(const HostPoolOptions& options, HostMemoryKind kind)
      : budget_(options.budget_bytes),
        alignment_(options.alignment),
        max_cached_(std::min(options.max_cached_bytes, options.budget_bytes)),
        kind_(kind) {}

  ~PoolState() { ReleaseCache(); }

  absl::StatusOr<HostBlock> Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_) {
    if (bytes == 0) return absl::InvalidArgumentError("host pool: cannot allocate 0 bytes");
    if (bytes > budget_) {
      MutexLock lock(&mu_);
      ++refusals_;
      return absl::ResourceExhaustedError(absl::StrCat("host pool: allocating ", Bytes(bytes),
                                                       " exceeds the whole budget of ",
                                                       Bytes(budget_)));
    }
    const size_t capacity = RoundUp(bytes, alignment_);
    std::byte* reused = nullptr;
    std::vector<std::byte*> evicted;
    absl::Status refusal;
    {
      MutexLock lock(&mu_);
      auto cached = cache_.find(capacity);
      if (cached != cache_.end()) {
        reused = cached->second;
        cache_.erase(cached);
        cached_bytes_ -= capacity;
        ++cache_hits_;
      } else {
        // Drop cached blocks of other sizes until the new one fits.
        while (in_use_ + cached_bytes_ + capacity > budget_ && !cache_.empty()) {
          auto victim = std::prev(cache_.end());  // The largest frees the most.
          cached_bytes_ -= victim->first;
          evicted.push_back(victim->second);
          cache_.erase(victim);
        }
        if (in_use_ + cached_bytes_ + capacity > budget_) {
          ++refusals_;
          refusal = absl::ResourceExhaustedError(absl::StrCat(
              "host pool: allocating ", Bytes(bytes), " would exceed the budget of ",
              Bytes(budget_), ": ", Bytes(in_use_), " in use in ", blocks_in_use_,
              " blocks"));
        }
      }
      if (refusal.ok()) {
        in_use_ += capacity;  // Reserved now; given back below if the system refuses.
        peak_in_use_ = std::max(peak_in_use_, in_use_);
        ++blocks_in_use_;
        ++allocations_;
      }
    }
    // Outside the lock: freeing (and unpinning) is slow. Evicted blocks go even when
    // the request is refused; they are out of the cache's accounts already.
    for (std::byte* block : evicted) FreeRaw(block);
    if (!refusal.ok()) return refusal;
    std::byte* data = reused;
    if (data == nullptr) {
      absl::StatusOr<std::byte*> fresh = AllocateRaw(capacity);
      if (!fresh.ok()) {
        MutexLock lock(&mu_);
        in_use_ -= capacity;
        --blocks_in_use_;
        --allocations_;
        ++refusals_;
        return fresh.status();
      }
      data = *fresh;
    } else {
      std::memset(data, 0, capacity);  // Fresh memory is zero; reused must look the same.
    }
    return HostBlock(shared_from_this(), data, bytes, capacity);
  }

  void Return(std::byte* data, size_t capacity) ABSL_LOCKS_EXCLUDED(mu_) {
    bool keep = false;
    {
      MutexLock lock(&mu_);
      in_use_ -= capacity;
      --blocks_in_use_;
      keep = cached_bytes_ + capacity <= max_cached_;
      if (keep) {
        cache_.emplace(capacity, data);
        cached_bytes_ += capacity;
      }
    }
    if (!keep) FreeRaw(data);
  }

  void ReleaseCache() ABSL_LOCKS_EXCLUDED(mu_) {
    std::multimap<size_t, std::byte*> cache;
    {
      MutexLock lock(&mu_);
      cache.swap(cache_);
      cached_bytes_ = 0;
    }
    for (const auto& [capacity, data] : cache) FreeRaw(data);
  }

  HostPoolStats Stats() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    HostPoolStats stats;
    stats.budget_bytes = budget_;
    stats.in_use_bytes = in_use_;
    stats.peak_in_use_bytes = peak_in_use_;
    stats.cached_bytes = cached_bytes_;
    stats.blocks_in_use = blocks_in_use_;
    stats.allocations = allocations_;
    stats.cache_hits = cache_hits_;
    stats.refusals = refusals_;
    stats.kind = kind_;
    return stats;
  }

 private:
  absl::StatusOr<std::byte*> AllocateRaw(size_t capacity) {
    void* raw = std::aligned_alloc(alignment_, capacity);
    if (raw == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host pool: the system refused ", Bytes(capacity), " (aligned_alloc)"));
    }
    // Touch every page now: the budget is meant to be real memory, and a lazily
    // mapped block would fault (or be OOM-killed) later, in the middle of a copy.
    std::memset(raw, 0, capacity);
    if (kind_ == HostMemoryKind::kPinned) {
      const absl::Status pinned = offload_internal::Pin(raw, capacity);
      if (!pinned.ok()) {
        std::free(raw);
        return pinned;
      }
    }
    return static_cast<std::byte*>(raw);
  }

  void FreeRaw(std::byte* data) {
    if (kind_ == HostMemoryKind::kPinned) offload_internal::Unpin(data);
    std::free(data);
  }

  const size_t budget_;
  const size_t alignment_;
  const size_t max_cached_;
  const HostMemoryKind kind_;

  mutable Mutex mu_;
  std::multimap<size_t, std::byte*> cache_ ABSL_GUARDED_BY(mu_);  // capacity -> block
  size_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t in_use_ ABSL_GUARDED_BY(mu_) = 0;
  size_t peak_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t blocks_in_use_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t allocations_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cache_hits_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refusals_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace host_pool_internal

const char* HostMemoryKindName(HostMemoryKind kind) {
  switch (kind) {
    case HostMemoryKind::kAuto:
      return "auto";
    case HostMemoryKind::kPageable:
      return "pageable";
    case HostMemoryKind::kPinned:
      return "pinned";
  }
  return "unknown";
}

size_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

HostBlock::HostBlock(std::shared_ptr<host_pool_internal::PoolState> pool, std::byte* data,
                     size_t size, size_t capacity)
    : pool_(std::move(pool)), data_(data), size_(size), capacity_(capacity) {}

HostBlock::HostBlock(HostBlock&& other) noexcept
    : pool_(std::move(other.pool_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      capacity_(std::exchange(other.capacity_, 0)) {}

HostBlock& HostBlock::operator=(HostBlock&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

HostBlock::~HostBlock() { Release(); }

void HostBlock::Release() {
  if (data_ != nullptr) pool_->Return(data_, capacity_);
  pool_.reset();
  data_ = nullptr;
  size_ = 0;
  capacity_ = 0;
}

absl::StatusOr<std::unique_ptr<HostMemoryPool>> HostMemoryPool::Create(
    const HostPoolOptions& options) {
  if (options.budget_bytes == 0) {
    return absl::InvalidArgumentError("host pool: budget_bytes is 0; give it a positive budget");
  }
  const size_t physical = PhysicalMemoryBytes();
  if (physical != 0 && options.budget_bytes > physical) {
    return absl::InvalidArgumentError(
        absl::StrCat("host pool: budget_bytes ", host_pool_internal::Bytes(options.budget_bytes),
                     " is more than this machine's physical memory, ",
                     host_pool_internal::Bytes(physical)));
  }
  const size_t alignment = options.alignment;
  if (alignment < 64 || alignment > (size_t{1} << 20) || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host pool: alignment ", alignment, " must be a power of two in [64, 1048576]"));
  }
  HostMemoryKind kind = options.kind;
  if (kind != HostMemoryKind::kPageable) {
    const absl::Status pinning = offload_internal::PinningAvailable();
    if (pinning.ok()) {
      kind = HostMemoryKind::kPinned;
    } else if (kind == HostMemoryKind::kPinned) {
      return absl::FailedPreconditionError(
          absl::StrCat("host pool: kind=pinned asked for, but ", pinning.message()));
    } else {
      kind = HostMemoryKind::kPageable;
    }
  }
  if (kind == HostMemoryKind::kPinned && alignment < 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host pool: pinned memory is registered page by page; alignment ", alignment,
        " must be at least 4096"));
  }
  return std::unique_ptr<HostMemoryPool>(new HostMemoryPool(
      options, std::make_shared<host_pool_internal::PoolState>(options, kind)));
}

HostMemoryPool::HostMemoryPool(const HostPoolOptions& options,
                               std::shared_ptr<host_pool_internal::PoolState> state)
    : options_(options), state_(std::move(state)) {}

HostMemoryPool::~HostMemoryPool() = default;

absl::StatusOr<HostBlock> HostMemoryPool::Allocate(size_t bytes) { return state_->Allocate(bytes); }

void HostMemoryPool::ReleaseCache() { state_->ReleaseCache(); }

HostPoolStats HostMemoryPool::stats() const { return state_->Stats(); }

}  // namespace loom
