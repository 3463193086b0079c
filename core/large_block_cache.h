// LargeBlockCache: keeps freed host blocks too large for malloc's heaps for the next
// allocation of the same size.
//
// glibc's malloc maps every block above its largest heap threshold (32 MiB on
// 64-bit, whatever M_MMAP_THRESHOLD says, and any size in a thread's arena whose
// 64 MiB heap cannot hold it) and unmaps it on free, so the next block of the same
// size is fresh pages: the kernel zeroes and faults in one page per 4 KiB on first
// touch. A training step makes the same large temporaries every step (the logits
// and their gradient, 128 MiB a microbatch at vocabulary 32768 and 2 x 512 tokens:
// 854,306 faults a step). With the cache on, AlignedBuffer and Tensor (every
// allocation through core/aligned_buffer.h) take such a block from the cache when
// one of the same size was freed, and give it back on free instead of unmapping it.
//
// Off by default: a library user's memory goes back to the system as before. The
// training job turns it on (tools/training/malloc_policy.h), bounded, as PyTorch's
// caching allocators keep blocks for reuse.
//
// Example:
//   loom::EnableLargeBlockCache(/*max_cached_bytes=*/size_t{8} << 30);
//   { auto a = *AlignedBuffer<float>::Create(size_t{64} << 20); }   // freed: cached
//   auto b = *AlignedBuffer<float>::Create(size_t{64} << 20);       // the same pages
//   loom::GetLargeBlockCacheStats().hits;                           // 1
//   loom::DisableLargeBlockCache();   // frees every cached block
#ifndef LOOM_CORE_LARGE_BLOCK_CACHE_H_
#define LOOM_CORE_LARGE_BLOCK_CACHE_H_

#include <cstddef>
#include <cstdint>

namespace loom {

// Blocks of at least this many bytes are cached (glibc's largest heap threshold).
inline constexpr size_t kLargeBlockBytes = size_t{32} << 20;

// EnableLargeBlockCache turns the cache on (or changes its bound): at most
// `max_cached_bytes` of freed blocks are kept; a block freed beyond the bound goes
// back to the system. Blocks already cached beyond a lowered bound are freed.
void EnableLargeBlockCache(size_t max_cached_bytes);
// DisableLargeBlockCache turns it off, frees every cached block and zeroes the
// counts of GetLargeBlockCacheStats.
void DisableLargeBlockCache();
// ReleaseLargeBlockCache frees every cached block and leaves the cache as it was
// (on or off); an allocation that fails does this and tries once more.
void ReleaseLargeBlockCache();

struct LargeBlockCacheStats {
  int64_t hits = 0;           // large allocations served from the cache
  int64_t misses = 0;         // large allocations with the cache on and no block to take
  int64_t cached_blocks = 0;  // now
  int64_t cached_bytes = 0;   // now
};
LargeBlockCacheStats GetLargeBlockCacheStats();

namespace large_block_cache_internal {
// TakeBlock returns a cached block of exactly `bytes` bytes aligned to `alignment`,
// or nullptr (cache off, the size below kLargeBlockBytes, or none cached).
void* TakeBlock(size_t bytes, size_t alignment);
// GiveBlock keeps `block` (from malloc's family, `bytes` long) and returns true, or
// returns false when the cache is off, the block is small or the bound is reached:
// the caller frees it.
bool GiveBlock(void* block, size_t bytes);
}  // namespace large_block_cache_internal

}  // namespace loom

#endif  // LOOM_CORE_LARGE_BLOCK_CACHE_H_
