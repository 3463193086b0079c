// HostMemoryPool: host memory for offloaded tensors under a hard byte budget.
//
// ZeRO-style offload keeps optimizer state, and often parameters and gradients, in
// host memory. Without a budget, a large model grows that memory until the kernel's
// OOM killer ends the job; with this pool an allocation past the budget returns
// ResourceExhausted instead, naming the request, the budget and what is in use, so
// the caller can spill to disk or fail cleanly.
//
// Blocks are page-locked (pinned: `cudaHostAlloc`) when Loom is built with
// --config=cuda and a device is usable, so device copies can run asynchronously;
// otherwise they are plain aligned memory. Freed blocks are cached by size and reused
// (pinning is expensive); the cache counts against the budget and is released when
// an allocation would not fit otherwise.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<HostMemoryPool> pool,
//                         HostMemoryPool::Create({.budget_bytes = 64 << 20}));
//   LOOM_ASSIGN_OR_RETURN(HostBlock block, pool->Allocate(48 << 20));
//   block.bytes();                    // 48 MiB, zeroed, 4096-byte aligned
//   pool->Allocate(32 << 20);         // ResourceExhausted: "... 32 MiB ... budget 64 MiB,
//                                     //   48 MiB in use ..."
//   pool->stats().peak_in_use_bytes;  // 50331648
//   block = HostBlock();              // back to the pool (cached for reuse)
//
// Thread-safe. Blocks may outlive the pool object: the pool's state lives until the
// last block is returned.
#ifndef LOOM_OFFLOAD_HOST_POOL_H_
#define LOOM_OFFLOAD_HOST_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

// Where a pool's memory comes from.
enum class HostMemoryKind {
  kAuto,      // Pinned when built with CUDA and a device is usable, else pageable.
  kPageable,  // Plain aligned host memory.
  kPinned,    // Page-locked through CUDA; FailedPrecondition where unavailable.
};

const char* HostMemoryKindName(HostMemoryKind kind);

struct HostPoolOptions {
  // Hard limit on the bytes the pool holds (in use plus cached). Must be > 0.
  size_t budget_bytes = 0;
  // Alignment of every block: a power of two, at least 64 (AVX-512 loads) and at most
  // 1 MiB. 4096 also satisfies O_DIRECT file I/O.
  size_t alignment = 4096;
  HostMemoryKind kind = HostMemoryKind::kAuto;
  // Freed blocks kept for reuse, in bytes; 0 disables the cache. Clamped to the
  // budget.
  size_t max_cached_bytes = SIZE_MAX;
};

struct HostPoolStats {
  size_t budget_bytes = 0;
  size_t in_use_bytes = 0;       // Held by live HostBlocks (rounded to the alignment).
  size_t peak_in_use_bytes = 0;  // Highest in_use_bytes since creation.
  size_t cached_bytes = 0;       // Freed blocks kept for reuse.
  int64_t blocks_in_use = 0;
  int64_t allocations = 0;       // Successful Allocate calls.
  int64_t cache_hits = 0;        // Of those, served from the cache.
  int64_t refusals = 0;          // Allocate calls that returned ResourceExhausted.
  HostMemoryKind kind = HostMemoryKind::kPageable;  // What the pool actually uses.
};

namespace host_pool_internal {
class PoolState;
}  // namespace host_pool_internal

// HostBlock: one allocation from a HostMemoryPool; returns it when destroyed or
// reassigned. Move-only. A default-constructed block is empty.
class HostBlock {
 public:
  HostBlock() = default;
  HostBlock(HostBlock&& other) noexcept;
  HostBlock& operator=(HostBlock&& other) noexcept;
  HostBlock(const HostBlock&) = delete;
  HostBlock& operator=(const HostBlock&) = delete;
  ~HostBlock();

  std::byte* data() const { return data_; }
  // The size asked for; the pool accounts it rounded up to the alignment.
  size_t size() const { return size_; }
  absl::Span<std::byte> bytes() const { return absl::MakeSpan(data_, size_); }
  bool empty() const { return data_ == nullptr; }

  // As<T> views the block as `size() / sizeof(T)` elements of T. T must be trivially
  // copyable, and its alignment at most the pool's.
  template <typename T>
  absl::Span<T> As() const {
    return absl::MakeSpan(reinterpret_cast<T*>(data_), size_ / sizeof(T));
  }

 private:
  friend class host_pool_internal::PoolState;
  HostBlock(std::shared_ptr<host_pool_internal::PoolState> pool, std::byte* data, size_t size,
            size_t capacity);
  void Release();

  // Shared with the pool (and every other block) so a block may outlive the pool
  // object, as blocks handed to an asynchronous engine do.
  std::shared_ptr<host_pool_internal::PoolState> pool_;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // Accounted bytes: size_ rounded up to the alignment.
};

class HostMemoryPool {
 public:
  // Create validates `options` (InvalidArgument naming the value: a zero budget, a
  // budget above the machine's physical memory, a bad alignment) and resolves the
  // memory kind (FailedPrecondition for kPinned where CUDA is not built in or no
  // device is usable).
  static absl::StatusOr<std::unique_ptr<HostMemoryPool>> Create(const HostPoolOptions& options);

  HostMemoryPool(const HostMemoryPool&) = delete;
  HostMemoryPool& operator=(const HostMemoryPool&) = delete;
  ~HostMemoryPool();

  // Allocate returns a zeroed block of `bytes` (> 0). ResourceExhausted when it would
  // take the pool past its budget (after dropping cached blocks) or the system
  // refuses the memory; InvalidArgument for 0 bytes.
  absl::StatusOr<HostBlock> Allocate(size_t bytes);

  // ReleaseCache frees every cached block back to the system.
  void ReleaseCache();

  HostPoolStats stats() const;
  const HostPoolOptions& options() const { return options_; }

 private:
  HostMemoryPool(const HostPoolOptions& options,
                 std::shared_ptr<host_pool_internal::PoolState> state);

  HostPoolOptions options_;
  std::shared_ptr<host_pool_internal::PoolState> state_;
};

// PhysicalMemoryBytes returns the machine's physical memory (sysconf), 0 if unknown.
size_t PhysicalMemoryBytes();

}  // namespace loom

#endif  // LOOM_OFFLOAD_HOST_POOL_H_
