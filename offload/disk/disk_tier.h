// DiskTier: the NVMe/disk tier of offload. Swaps tensors (named byte arrays) to files
// and back, ZeRO-Infinity style: each tensor is cut into stripes spread round-robin over
// several directories (one per NVMe drive), moved with aligned O_DIRECT I/O by io_uring
// or a pread/pwrite thread pool with many I/Os in flight per call, and protected by a
// CRC-32C per checksum block that every Read verifies. Corrupted, truncated, torn or
// mismatched files are DataLoss errors naming the tensor, the file and the block —
// never silent garbage. Write is durable when it returns OK and atomic per file (see
// README.md for the file format and the crash guarantees).
//
// Thread-safe: any number of threads may call Write/Read/Remove at once; operations on
// different tensors run in parallel, operations on the same name are serialized.
//
// Example:
//   DiskTierOptions options;
//   options.directories = {"/nvme0/swap", "/nvme1/swap"};
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Create(options));
//   LOOM_RETURN_IF_ERROR(tier->Write("layer3.adam_m", bytes));      // durable on OK
//   LOOM_RETURN_IF_ERROR(tier->Read("layer3.adam_m", absl::MakeSpan(out)));
//   tier->Read("nope", out);          // NotFound: tensor 'nope' is not stored ...
//   tier->Read("layer3.adam_m", small);  // InvalidArgument: ... 100 bytes ... 4096 bytes
//   tier->stats().engine;             // IoEngine::kIoUring (or kThreadPool, with a note)
#ifndef LOOM_OFFLOAD_DISK_DISK_TIER_H_
#define LOOM_OFFLOAD_DISK_DISK_TIER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace loom {

namespace disk_internal {
class IoExecutor;
class NameLocks;
}  // namespace disk_internal

enum class IoEngine {
  kAuto,        // io_uring when this process may use it, else the thread pool
  kIoUring,     // io_uring via liburing; Create fails if unavailable
  kThreadPool,  // worker threads issuing pread/pwrite; works everywhere
};

// IoEngineName returns "auto", "io_uring" or "thread_pool".
absl::string_view IoEngineName(IoEngine engine);

// ParseIoEngine accepts the names IoEngineName returns; InvalidArgument otherwise.
absl::StatusOr<IoEngine> ParseIoEngine(absl::string_view name);

struct DiskTierOptions {
  // Where stripe files go; stripe i of a tensor goes to directories[i % size()]. At
  // least one; each must exist, be writable and be distinct. Put one per drive.
  std::vector<std::string> directories;
  // Bytes per stripe, and per I/O: a multiple of 4096 in [4 KiB, 256 MiB].
  size_t stripe_bytes = size_t{1} << 20;
  // Bytes per checksum block: a multiple of 4096 that divides stripe_bytes. Smaller
  // blocks locate corruption more precisely at 4 header bytes per block.
  size_t checksum_block_bytes = size_t{64} << 10;
  IoEngine engine = IoEngine::kAuto;
  // io_uring: I/Os in flight per call, in [1, 4096]. Each concurrent call may hold
  // queue_depth stripe-sized bounce buffers (allocated only when the caller's memory
  // or the tensor's tail is not 4096-aligned).
  int queue_depth = 32;
  // Thread pool: worker threads, in [1, 1024] (I/Os in flight across all calls).
  int threads = 8;
  // Open files with O_DIRECT (bypass the page cache). Directories whose filesystem
  // refuses it fall back to buffered I/O; stats() says which and why.
  bool direct_io = true;
  // io_uring: a call that sees no I/O complete for this long cancels and returns
  // DeadlineExceeded instead of hanging.
  absl::Duration io_timeout = absl::Seconds(60);
};

// ValidateDiskTierOptions checks the values alone (not the directories on disk):
// InvalidArgument naming the field and its value.
absl::Status ValidateDiskTierOptions(const DiskTierOptions& options);

struct DiskTierStats {
  IoEngine engine = IoEngine::kAuto;  // the engine in use: kIoUring or kThreadPool
  std::string engine_note;            // why kAuto fell back to the thread pool, else empty
  bool direct_io = false;             // every directory uses O_DIRECT
  std::string direct_io_note;         // which directories use buffered I/O and why
  uint64_t bytes_written = 0;         // tensor bytes of successful Writes
  uint64_t bytes_read = 0;            // tensor bytes of successful Reads
  uint64_t writes = 0;
  uint64_t reads = 0;
};

class DiskTier {
 public:
  // Create validates `options`, opens the directories, probes each for O_DIRECT (by
  // writing and removing a small file) and picks the engine. Errors: InvalidArgument
  // for bad values or a path that is not a distinct directory; the open/write errno
  // (NotFound, PermissionDenied, ...) naming the directory; FailedPrecondition when
  // kIoUring is asked for but io_uring is unavailable, with the errno text.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Create(DiskTierOptions options);

  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Write stores `data` under `name`, replacing any previous tensor of that name. When
  // it returns OK every file is fdatasync'ed and in place and the directories
  // fsync'ed. The replacement is atomic even across directories: the new files k >= 1
  // get new names, and renaming file 0 (the commit record) over the old one switches
  // versions; a crash or an error before that rename leaves the previous version
  // readable, after it the new one (see README.md). Errors: InvalidArgument for a bad
  // name; the errno of the failing call (e.g. ResourceExhausted for ENOSPC, OutOfRange
  // for EFBIG) naming the tensor and the file.
  absl::Status Write(absl::string_view name, absl::Span<const std::byte> data);

  // Read fills `out` with the tensor `name`, verifying every checksum. Errors:
  // NotFound if no tensor `name` is stored (its file 0 does not exist); InvalidArgument
  // if out.size() differs from the stored size (both in the message); DataLoss naming
  // the tensor and the file for a checksum mismatch (with the block and its tensor byte
  // range), a truncated or missing stripe file k >= 1, a bad header, a header of another
  // tensor, or files of different Writes; FailedPrecondition if the tensor spans more
  // directories than this tier has. On error `out`'s contents are unspecified.
  absl::Status Read(absl::string_view name, absl::Span<std::byte> out);

  // Remove deletes the tensor's files (file 0 first, so it disappears at once) and any
  // leftovers of its unfinished Writes; NotFound if there was nothing.
  absl::Status Remove(absl::string_view name);

  // Contains returns true when the tensor's first file exists (it is not verified).
  bool Contains(absl::string_view name) const;

  // StoredBytes returns the tensor's size from its first file's header; NotFound or
  // DataLoss as Read.
  absl::StatusOr<uint64_t> StoredBytes(absl::string_view name);

  DiskTierStats stats() const;
  const DiskTierOptions& options() const { return options_; }

 private:
  struct Directory;
  struct OpenedFile;

  DiskTier(DiskTierOptions options, std::vector<Directory> directories,
           std::unique_ptr<disk_internal::IoExecutor> executor, IoEngine engine,
           std::string engine_note);

  // OpenFileForRead opens stripe file `file` of the tensor as written by `write_id`
  // (ignored for file 0) and verifies its header (name, index, size against the file's
  // length): NotFound if it does not exist, DataLoss naming the tensor and the file
  // otherwise.
  absl::StatusOr<OpenedFile> OpenFileForRead(uint32_t file, absl::string_view name,
                                             absl::string_view escaped, uint64_t write_id) const;

  // RemoveTensorFiles deletes every file of the tensor in directory `file` except
  // `keep` (leftovers of unfinished or superseded Writes); returns how many it deleted.
  absl::StatusOr<int> RemoveTensorFiles(uint32_t file, absl::string_view escaped,
                                        absl::string_view keep) const;
  uint64_t NextWriteId();

  const DiskTierOptions options_;
  const std::vector<Directory> directories_;
  const std::unique_ptr<disk_internal::IoExecutor> executor_;
  const std::unique_ptr<disk_internal::NameLocks> name_locks_;
  const IoEngine engine_;
  const std::string engine_note_;
  std::atomic<uint64_t> write_id_state_;
  std::atomic<uint64_t> temp_sequence_{0};
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> reads_{0};
};

}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_DISK_TIER_H_
