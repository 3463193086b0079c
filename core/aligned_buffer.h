// AlignedBuffer<T>: an owning, fixed-size, aligned host array for trivially copyable
// elements (staging buffers, SIMD-friendly scratch, transport bounce buffers).
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> buf, AlignedBuffer<float>::Create(1000));
//   buf.span()[0] = 1.0f;                  // absl::Span<float> of 1000 zeroed elements
//   reinterpret_cast<uintptr_t>(buf.data()) % 64 == 0;   // true (default alignment)
//   AlignedBuffer<float>::Create(10, 48);  // InvalidArgument: alignment 48 is not a power of two
#ifndef LOOM_CORE_ALIGNED_BUFFER_H_
#define LOOM_CORE_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace loom {

// Cache lines and AVX-512 vectors are 64 bytes.
inline constexpr size_t kDefaultAlignment = 64;

namespace aligned_buffer_internal {
// Frees a block from AllocateAlignedBytes: one of kLargeBlockBytes or more goes
// back to core/large_block_cache.h's cache where that is on.
struct FreeDeleter {
  size_t bytes = 0;  // the block's size as allocated (rounded to the alignment)
  void operator()(void* p) const;
};

// AllocateAlignedBytes returns memory of at least `bytes` bytes (rounded up to the
// alignment, as std::aligned_alloc requires) aligned to `alignment`, zeroed when
// `zero` is set: a block of the same size from core/large_block_cache.h's cache
// where it is on and holds one, else from std::aligned_alloc.
absl::StatusOr<std::unique_ptr<void, FreeDeleter>> AllocateAlignedBytes(size_t bytes,
                                                                       size_t alignment,
                                                                       bool zero = true);
}  // namespace aligned_buffer_internal

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedBuffer holds trivially copyable T");

 public:
  AlignedBuffer() = default;

  // Create allocates `size` zero-initialized elements aligned to `alignment` bytes.
  // Returns InvalidArgument if `alignment` is not a power of two or is smaller than
  // alignof(T), or if size * sizeof(T) overflows; ResourceExhausted if the allocation
  // fails.
  static absl::StatusOr<AlignedBuffer> Create(size_t size, size_t alignment = kDefaultAlignment) {
    return Allocate(size, alignment, /*zero=*/true);
  }

  // CreateUninitialized is Create without the zero fill, for a caller that writes
  // every element before it reads one (a copy's destination): filling first would
  // be a second pass over memory the copy makes anyway. Errors as Create's.
  static absl::StatusOr<AlignedBuffer> CreateUninitialized(size_t size,
                                                           size_t alignment = kDefaultAlignment) {
    return Allocate(size, alignment, /*zero=*/false);
  }

  T* data() { return static_cast<T*>(memory_.get()); }
  const T* data() const { return static_cast<const T*>(memory_.get()); }
  size_t size() const { return size_; }
  size_t size_bytes() const { return size_ * sizeof(T); }
  bool empty() const { return size_ == 0; }
  absl::Span<T> span() { return absl::Span<T>(data(), size_); }
  absl::Span<const T> span() const { return absl::Span<const T>(data(), size_); }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }

 private:
  static absl::StatusOr<AlignedBuffer> Allocate(size_t size, size_t alignment, bool zero) {
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment < alignof(T)) {
      return absl::InvalidArgumentError(absl::StrCat("alignment ", alignment,
                                                     " is not a power of two >= alignof(T) = ",
                                                     alignof(T)));
    }
    if (size > std::numeric_limits<size_t>::max() / sizeof(T)) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer of ", size, " elements of ", sizeof(T), " bytes overflows size_t"));
    }
    auto memory =
        aligned_buffer_internal::AllocateAlignedBytes(size * sizeof(T), alignment, zero);
    if (!memory.ok()) return memory.status();
    return AlignedBuffer(std::move(memory).value(), size);
  }

  AlignedBuffer(std::unique_ptr<void, aligned_buffer_internal::FreeDeleter> memory, size_t size)
      : memory_(std::move(memory)), size_(size) {}

  std::unique_ptr<void, aligned_buffer_internal::FreeDeleter> memory_;
  size_t size_ = 0;
};

}  // namespace loom

#endif  // LOOM_CORE_ALIGNED_BUFFER_H_
