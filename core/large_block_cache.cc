#include "core/large_block_cache.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/mutex.h"

namespace loom {
namespace {

struct Cache {
  Mutex mu;
  bool enabled ABSL_GUARDED_BY(mu) = false;
  size_t max_bytes ABSL_GUARDED_BY(mu) = 0;
  size_t cached_bytes ABSL_GUARDED_BY(mu) = 0;
  // Freed blocks by their size; a step's temporaries repeat their sizes exactly.
  std::multimap<size_t, void*> blocks ABSL_GUARDED_BY(mu);
  int64_t hits ABSL_GUARDED_BY(mu) = 0;
  int64_t misses ABSL_GUARDED_BY(mu) = 0;
};

// Never destroyed: blocks may be freed by static destructors after main returns.
Cache& TheCache() {
  static Cache* const cache = new Cache();
  return *cache;
}

// Removes blocks until at most `keep` bytes are cached; returns them for freeing
// outside the lock.
std::vector<void*> TrimTo(Cache& c, size_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
  std::vector<void*> out;
  while (c.cached_bytes > keep && !c.blocks.empty()) {
    // The largest first: the fewest blocks freed for the bytes.
    auto last = std::prev(c.blocks.end());
    c.cached_bytes -= last->first;
    out.push_back(last->second);
    c.blocks.erase(last);
  }
  return out;
}

void FreeAll(const std::vector<void*>& blocks) {
  for (void* block : blocks) std::free(block);
}

}  // namespace

void EnableLargeBlockCache(size_t max_cached_bytes) {
  Cache& c = TheCache();
  std::vector<void*> drop;
  {
    MutexLock lock(&c.mu);
    c.enabled = true;
    c.max_bytes = max_cached_bytes;
    drop = TrimTo(c, max_cached_bytes);
  }
  FreeAll(drop);
}

void DisableLargeBlockCache() {
  Cache& c = TheCache();
  std::vector<void*> drop;
  {
    MutexLock lock(&c.mu);
    c.enabled = false;
    c.hits = 0;
    c.misses = 0;
    drop = TrimTo(c, 0);
  }
  FreeAll(drop);
}

void ReleaseLargeBlockCache() {
  Cache& c = TheCache();
  std::vector<void*> drop;
  {
    MutexLock lock(&c.mu);
    drop = TrimTo(c, 0);
  }
  FreeAll(drop);
}

LargeBlockCacheStats GetLargeBlockCacheStats() {
  Cache& c = TheCache();
  MutexLock lock(&c.mu);
  LargeBlockCacheStats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.cached_blocks = static_cast<int64_t>(c.blocks.size());
  s.cached_bytes = static_cast<int64_t>(c.cached_bytes);
  return s;
}

namespace large_block_cache_internal {

void* TakeBlock(size_t bytes, size_t alignment) {
  if (bytes < kLargeBlockBytes) return nullptr;
  Cache& c = TheCache();
  MutexLock lock(&c.mu);
  if (!c.enabled) return nullptr;
  auto [first, last] = c.blocks.equal_range(bytes);
  for (auto it = first; it != last; ++it) {
    // A block allocated for a smaller alignment may not suit a larger one.
    if (reinterpret_cast<uintptr_t>(it->second) % alignment != 0) continue;
    void* block = it->second;
    c.cached_bytes -= bytes;
    c.blocks.erase(it);
    ++c.hits;
    return block;
  }
  ++c.misses;
  return nullptr;
}

bool GiveBlock(void* block, size_t bytes) {
  if (block == nullptr || bytes < kLargeBlockBytes) return false;
  Cache& c = TheCache();
  MutexLock lock(&c.mu);
  if (!c.enabled || c.cached_bytes + bytes > c.max_bytes) return false;
  c.blocks.emplace(bytes, block);
  c.cached_bytes += bytes;
  return true;
}

}  // namespace large_block_cache_internal
}  // namespace loom
