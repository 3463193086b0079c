// IoExecutor: the contract both I/O engines (io_uring, a pread/pwrite thread pool) meet.
// The disk tier describes one call's work as `count` independent operations; an
// executor keeps up to its queue depth of them in flight and returns when all are done.
//
// For each operation i the executor calls prepare(i, bounce) just before issuing it;
// prepare returns the IoOp (which file, where, which memory). `bounce` is a 4096-byte
// aligned scratch buffer reserved for operation i until it completes: prepare may use it
// when the caller's memory is not aligned for O_DIRECT. When the transfer finished
// completely (short transfers and EINTR are retried inside), the executor calls
// complete(i, op). The first error (from prepare, the I/O or complete) stops issuing
// new operations; Run waits for those in flight and returns that error.
//
// Example:
//   LOOM_RETURN_IF_ERROR(executor.Run(
//       stripes,
//       [&](size_t i, BounceBuffer& bounce) -> absl::StatusOr<IoOp> {
//         LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> b, bounce.Get(kStripe));
//         return IoOp{IoKind::kRead, fd, i * kStripe, b.data(), kStripe, path};
//       },
//       [&](size_t i, const IoOp& op) { return Consume(i, op); }));
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_IO_EXECUTOR_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_IO_EXECUTOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"

namespace loom {
namespace disk_internal {

// O_DIRECT needs file offsets, lengths and memory aligned to the logical block size;
// 4096 covers every common device.
inline constexpr size_t kDirectAlignment = 4096;

inline constexpr uint64_t RoundUpToDirect(uint64_t n) {
  return (n + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
}

enum class IoKind {
  kRead,      // fill data[0, length) from the file at offset
  kWrite,     // write data[0, length) to the file at offset (data is never modified)
  kDataSync,  // fdatasync(fd); offset, data and length unused
};

absl::string_view IoKindName(IoKind kind);  // "read", "write", "fdatasync"

struct IoOp {
  IoKind kind = IoKind::kRead;
  int fd = -1;
  uint64_t offset = 0;
  std::byte* data = nullptr;
  size_t length = 0;
  absl::string_view path;  // for error messages; must outlive Run
};

// BounceBuffer: aligned scratch memory, allocated on first use and grown on demand,
// kept for reuse by later operations.
class BounceBuffer {
 public:
  // Get returns `bytes` bytes aligned to kDirectAlignment (contents unspecified);
  // ResourceExhausted when memory is short.
  absl::StatusOr<absl::Span<std::byte>> Get(size_t bytes);

 private:
  AlignedBuffer<std::byte> buffer_;
};

using PrepareFn = std::function<absl::StatusOr<IoOp>(size_t index, BounceBuffer& bounce)>;
using CompleteFn = std::function<absl::Status(size_t index, const IoOp& op)>;

class IoExecutor {
 public:
  virtual ~IoExecutor() = default;

  // Run performs operations 0..count-1 as described above; thread-safe (concurrent
  // calls share the executor's threads or rings). Errors: the first one, with its code;
  // I/O errors name the call, the file and strerror; a read that hits end of file early
  // is DataLoss; io_uring returns DeadlineExceeded when no operation completes within
  // its timeout.
  virtual absl::Status Run(size_t count, const PrepareFn& prepare, const CompleteFn& complete) = 0;

  // MaxInFlight returns how many operations one Run keeps in flight at most.
  virtual int MaxInFlight() const = 0;
};

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_IO_EXECUTOR_H_
