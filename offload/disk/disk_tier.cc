#include "offload/disk/disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/aligned_buffer.h"
#include "core/status_macros.h"
#include "core/crc32c.h"
#include "offload/disk/internal/file_header.h"
#include "offload/disk/internal/file_names.h"
#include "offload/disk/internal/io_executor.h"
#include "offload/disk/internal/name_locks.h"
#include "offload/disk/internal/posix_file.h"
#include "offload/disk/internal/stripe_layout.h"
#include "offload/disk/internal/thread_pool_executor.h"
#include "offload/disk/internal/uring_executor.h"

namespace loom {

using disk_internal::BounceBuffer;
using disk_internal::FileHeader;
using disk_internal::IoKind;
using disk_internal::IoOp;
using disk_internal::kDirectAlignment;
using disk_internal::RoundUpToDirect;
using disk_internal::StripeLayout;

namespace {

constexpr size_t kMaxStripeBytes = size_t{256} << 20;
constexpr size_t kMaxDirectories = 1024;

bool IsDirectAligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kDirectAlignment == 0;
}

// Prefixes a Status's message, keeping its code.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

std::string TensorPrefix(absl::string_view name) { return absl::StrCat("tensor '", name, "': "); }

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

absl::Status FsyncDirectory(int fd, absl::string_view path) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return ErrnoToStatus(errno, absl::StrCat("fsync(directory ", path, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

struct DiskTier::Directory {
  std::string path;
  ScopedFd fd;
  bool direct = false;
  std::string direct_note;  // why this directory uses buffered I/O, if it does

  std::string PathOf(absl::string_view file) const { return absl::StrCat(path, "/", file); }
  int OpenFlags() const { return O_CLOEXEC | (direct ? O_DIRECT : 0); }
};

struct DiskTier::OpenedFile {
  ScopedFd fd;
  std::string path;
  FileHeader header;
  uint64_t header_bytes = 0;
};

absl::string_view IoEngineName(IoEngine engine) {
  switch (engine) {
    case IoEngine::kAuto:
      return "auto";
    case IoEngine::kIoUring:
      return "io_uring";
    case IoEngine::kThreadPool:
      return "thread_pool";
  }
  return "unknown";
}

absl::StatusOr<IoEngine> ParseIoEngine(absl::string_view name) {
  for (IoEngine e : {IoEngine::kAuto, IoEngine::kIoUring, IoEngine::kThreadPool}) {
    if (name == IoEngineName(e)) return e;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown I/O engine '", name, "' (auto, io_uring, thread_pool)"));
}

absl::Status ValidateDiskTierOptions(const DiskTierOptions& o) {
  if (o.directories.empty()) {
    return absl::InvalidArgumentError("DiskTierOptions.directories is empty: give at least one");
  }
  if (o.directories.size() > kMaxDirectories) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.directories has ",
                                                   o.directories.size(), " entries, more than ",
                                                   kMaxDirectories));
  }
  for (size_t i = 0; i < o.directories.size(); ++i) {
    if (o.directories[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DiskTierOptions.directories[", i, "] is an empty path"));
    }
  }
  if (o.stripe_bytes < 4096 || o.stripe_bytes % 4096 != 0 || o.stripe_bytes > kMaxStripeBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.stripe_bytes = ", o.stripe_bytes,
                     " is not a multiple of 4096 in [4096, ", kMaxStripeBytes, "]"));
  }
  if (o.checksum_block_bytes < 4096 || o.checksum_block_bytes % 4096 != 0 ||
      o.stripe_bytes % o.checksum_block_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.checksum_block_bytes = ", o.checksum_block_bytes,
                     " must be a multiple of 4096 that divides stripe_bytes = ", o.stripe_bytes));
  }
  if (o.queue_depth < 1 || o.queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.queue_depth = ", o.queue_depth, " is not in [1, 4096]"));
  }
  if (o.threads < 1 || o.threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.threads = ", o.threads, " is not in [1, 1024]"));
  }
  if (o.io_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DiskTierOptions.io_timeout = ", absl::FormatDuration(o.io_timeout), " is not positive"));
  }
  switch (o.engine) {
    case IoEngine::kAuto:
    case IoEngine::kIoUring:
    case IoEngine::kThreadPool:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DiskTierOptions.engine = ", static_cast<int>(o.engine), " is not an IoEngine"));
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Create(DiskTierOptions options) {
  LOOM_RETURN_IF_ERROR(ValidateDiskTierOptions(options));
  std::vector<Directory> directories;
  std::vector<std::pair<dev_t, ino_t>> identities;
  static std::atomic<uint64_t> probe_sequence{0};
  for (size_t i = 0; i < options.directories.size(); ++i) {
    Directory dir;
    dir.path = options.directories[i];
    const std::string field =
        absl::StrCat("DiskTierOptions.directories[", i, "] = '", dir.path, "'");
    const int fd = ::open(dir.path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOTDIR) return absl::InvalidArgumentError(field + " is not a directory");
      return ErrnoToStatus(errno, absl::StrCat(field, ": open"));
    }
    dir.fd = ScopedFd(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrCat(field, ": fstat"));
    for (size_t j = 0; j < identities.size(); ++j) {
      if (identities[j] == std::make_pair(st.st_dev, st.st_ino)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " is the same directory as DiskTierOptions.directories[", j,
                         "] = '", options.directories[j], "'"));
      }
    }
    identities.emplace_back(st.st_dev, st.st_ino);

    // Probe: create, write 4096 aligned bytes, remove. Proves the directory writable and
    // tells whether its filesystem takes O_DIRECT.
    const std::string probe_name =
        absl::StrCat(".loom-disk-probe-", ::getpid(), "-", probe_sequence++);
    const std::string probe_path = dir.PathOf(probe_name);
    const int create = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    dir.direct = options.direct_io;
    if (!options.direct_io) dir.direct_note = "O_DIRECT disabled by DiskTierOptions.direct_io";
    int probe_fd = -1;
    if (dir.direct) {
      probe_fd = ::openat(fd, probe_name.c_str(), create | O_DIRECT, 0600);
      if (probe_fd < 0 && errno == EINVAL) {
        dir.direct = false;
        dir.direct_note = absl::StrCat(dir.path, ": open with O_DIRECT: ", std::strerror(EINVAL));
      }
    }
    if (probe_fd < 0) probe_fd = ::openat(fd, probe_name.c_str(), create, 0600);
    if (probe_fd < 0) {
      return ErrnoToStatus(
          errno, absl::StrCat(field, " is not writable: openat(", probe_path, ", O_CREAT)"));
    }
    ScopedFd probe(probe_fd);
    absl::Cleanup remove_probe = [&] { ::unlinkat(fd, probe_name.c_str(), 0); };
    LOOM_ASSIGN_OR_RETURN(AlignedBuffer<std::byte> block,
                          AlignedBuffer<std::byte>::Create(kDirectAlignment, kDirectAlignment));
    absl::Status wrote = disk_internal::PwriteFull(probe.get(), block.span(), 0, probe_path);
    if (!wrote.ok() && dir.direct && absl::IsInvalidArgument(wrote)) {
      dir.direct = false;
      dir.direct_note = absl::StrCat(dir.path, ": O_DIRECT write refused: ", wrote.message());
    } else if (!wrote.ok()) {
      return Annotate(wrote, absl::StrCat(field, " is not writable: "));
    }
    directories.push_back(std::move(dir));
  }

  std::unique_ptr<disk_internal::IoExecutor> executor;
  IoEngine engine = options.engine;
  std::string engine_note;
  if (engine == IoEngine::kIoUring || engine == IoEngine::kAuto) {
    auto uring = disk_internal::UringExecutor::Create(options.queue_depth, options.io_timeout);
    if (uring.ok()) {
      executor = std::move(uring).value();
      engine = IoEngine::kIoUring;
    } else if (engine == IoEngine::kIoUring) {
      return absl::FailedPreconditionError(
          absl::StrCat("DiskTierOptions.engine = io_uring, but io_uring is unavailable: ",
                       uring.status().message()));
    } else {
      engine_note = absl::StrCat("io_uring unavailable (", uring.status().message(),
                                 "); using the thread pool");
    }
  }
  if (executor == nullptr) {
    LOOM_ASSIGN_OR_RETURN(executor, disk_internal::ThreadPoolExecutor::Create(options.threads));
    engine = IoEngine::kThreadPool;
  }
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(options), std::move(directories),
                                                std::move(executor), engine,
                                                std::move(engine_note)));
}

DiskTier::DiskTier(DiskTierOptions options, std::vector<Directory> directories,
                   std::unique_ptr<disk_internal::IoExecutor> executor, IoEngine engine,
                   std::string engine_note)
    : options_(std::move(options)),
      directories_(std::move(directories)),
      executor_(std::move(executor)),
      name_locks_(std::make_unique<disk_internal::NameLocks>()),
      engine_(engine),
      engine_note_(std::move(engine_note)) {
  std::random_device seed;
  write_id_state_ =
      (uint64_t{seed()} << 32) ^ seed() ^ static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
}

DiskTier::~DiskTier() = default;

uint64_t DiskTier::NextWriteId() {
  // Distinct within a tier; random across tiers and processes.
  return SplitMix64(write_id_state_.fetch_add(1, std::memory_order_relaxed));
}

DiskTierStats DiskTier::stats() const {
  DiskTierStats s;
  s.engine = engine_;
  s.engine_note = engine_note_;
  s.direct_io = true;
  for (const Directory& dir : directories_) {
    if (dir.direct) continue;
    s.direct_io = false;
    if (!s.direct_io_note.empty()) s.direct_io_note += "; ";
    s.direct_io_note += dir.direct_note;
  }
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.writes = writes_.load(std::memory_order_relaxed);
  s.reads = reads_.load(std::memory_order_relaxed);
  return s;
}

absl::Status DiskTier::Write(absl::string_view name, absl::Span<const std::byte> data) {
  LOOM_ASSIGN_OR_RETURN(const std::string escaped, disk_internal::EscapeTensorName(name));
  const std::string prefix = TensorPrefix(name);
  const disk_internal::NameLocks::Held held = name_locks_->Lock(name);
  const StripeLayout layout =
      StripeLayout::For(data.size(), options_.stripe_bytes, options_.checksum_block_bytes,
                        static_cast<uint32_t>(directories_.size()));
  const uint32_t file_count = layout.file_count;
  const uint64_t write_id = NextWriteId();

  // Files k >= 1 are written under their final, write-id-specific names: nothing refers
  // to them until file 0 does. File 0 is written under a temporary name and renamed
  // over the previous one last: that rename commits the new version.
  struct NewFile {
    const Directory* dir = nullptr;
    std::string final_name;
    std::string name;  // what it is created as
    std::string path;
    ScopedFd fd;
    uint64_t header_bytes = 0;
    std::vector<uint32_t> crcs;
    bool created = false;
  };
  std::vector<NewFile> files(file_count);
  bool committed = false;
  // On any error before the commit, this Write's files go and the previous version of
  // the tensor stays as it was.
  absl::Cleanup remove_uncommitted = [&files, &committed] {
    if (committed) return;
    for (const NewFile& f : files) {
      if (f.created) ::unlinkat(f.dir->fd.get(), f.name.c_str(), 0);
    }
  };
  for (uint32_t k = 0; k < file_count; ++k) {
    NewFile& f = files[k];
    f.dir = &directories_[k];
    f.final_name = disk_internal::StripeFileName(escaped, k, write_id);
    f.name = k == 0 ? disk_internal::TempFileName(f.final_name, temp_sequence_++) : f.final_name;
    f.path = f.dir->PathOf(f.name);
    f.crcs.resize(layout.FileBlockCount(k));
    f.header_bytes = disk_internal::HeaderBytes(name.size(), f.crcs.size());
    const int fd = ::openat(f.dir->fd.get(), f.name.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | f.dir->OpenFlags(), 0644);
    if (fd < 0) {
      return Annotate(ErrnoToStatus(errno, absl::StrCat("openat(", f.path, ", O_CREAT)")), prefix);
    }
    f.fd = ScopedFd(fd);
    f.created = true;
    // Reserving the extents up front fails early on ENOSPC and keeps the direct writes
    // inside the file: ext4 serializes direct writes that extend a file.
    const off_t file_bytes = static_cast<off_t>(f.header_bytes + layout.FilePaddedDataBytes(k));
    if (::fallocate(fd, 0, 0, file_bytes) != 0 && errno != EOPNOTSUPP) {
      return Annotate(
          ErrnoToStatus(errno, absl::StrCat("fallocate(", f.path, ", ", file_bytes, " bytes)")),
          prefix);
    }
  }

  // 1. Data, one I/O per stripe, computing the block checksums on the way.
  const auto no_completion = [](size_t, const IoOp&) { return absl::OkStatus(); };
  LOOM_RETURN_IF_ERROR(Annotate(
      executor_->Run(
          layout.stripe_count(),
          [&](size_t i, BounceBuffer& bounce) -> absl::StatusOr<IoOp> {
            NewFile& f = files[layout.FileOfStripe(i)];
            const size_t len = layout.StripeLength(i);
            const absl::Span<const std::byte> src = data.subspan(layout.StripeOffset(i), len);
            Crc32cBlocks(src, layout.block_bytes,
                         absl::MakeSpan(f.crcs).subspan(layout.FirstBlockOfStripe(i),
                                                        layout.StripeBlockCount(i)));
            const size_t padded = RoundUpToDirect(len);
            std::byte* ptr = const_cast<std::byte*>(src.data());  // only read by a write
            if (!IsDirectAligned(ptr) || padded != len) {
              LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> b, bounce.Get(padded));
              std::memcpy(b.data(), src.data(), len);
              std::memset(b.data() + len, 0, padded - len);
              ptr = b.data();
            }
            return IoOp{IoKind::kWrite,
                        f.fd.get(),
                        f.header_bytes + layout.SlotOfStripe(i) * layout.stripe_bytes,
                        ptr,
                        padded,
                        f.path};
          },
          no_completion),
      prefix));

  // 2. Headers, now that every checksum is known.
  std::vector<AlignedBuffer<std::byte>> headers;
  headers.reserve(file_count);
  for (uint32_t k = 0; k < file_count; ++k) {
    LOOM_ASSIGN_OR_RETURN(
        AlignedBuffer<std::byte> buffer,
        AlignedBuffer<std::byte>::Create(files[k].header_bytes, kDirectAlignment));
    FileHeader h;
    h.write_id = write_id;
    h.total_bytes = data.size();
    h.stripe_bytes = layout.stripe_bytes;
    h.block_bytes = layout.block_bytes;
    h.file_index = k;
    h.file_count = file_count;
    h.file_data_bytes = layout.FileDataBytes(k);
    h.tensor_name = std::string(name);
    h.block_crcs = std::move(files[k].crcs);
    disk_internal::EncodeHeader(h, buffer.span());
    headers.push_back(std::move(buffer));
  }
  LOOM_RETURN_IF_ERROR(Annotate(executor_->Run(
                                    file_count,
                                    [&](size_t k, BounceBuffer&) -> absl::StatusOr<IoOp> {
                                      return IoOp{
                                          IoKind::kWrite,    files[k].fd.get(), 0,
                                          headers[k].data(), headers[k].size(), files[k].path};
                                    },
                                    no_completion),
                                prefix));

  // 3. Make every file and the new names of files k >= 1 durable.
  LOOM_RETURN_IF_ERROR(Annotate(
      executor_->Run(
          file_count,
          [&](size_t k, BounceBuffer&) -> absl::StatusOr<IoOp> {
            return IoOp{IoKind::kDataSync, files[k].fd.get(), 0, nullptr, 0, files[k].path};
          },
          no_completion),
      prefix));
  for (NewFile& f : files) LOOM_RETURN_IF_ERROR(Annotate(f.fd.Close(f.path), prefix));
  for (uint32_t k = 1; k < file_count; ++k) {
    LOOM_RETURN_IF_ERROR(
        Annotate(FsyncDirectory(directories_[k].fd.get(), directories_[k].path), prefix));
  }

  // 4. Commit: learn which files the previous version used, rename file 0 over it and
  //    make the rename durable.
  auto previous = OpenFileForRead(0, name, escaped, 0);
  NewFile& first = files[0];
  if (::renameat(first.dir->fd.get(), first.name.c_str(), first.dir->fd.get(),
                 first.final_name.c_str()) != 0) {
    return Annotate(ErrnoToStatus(errno, absl::StrCat("renameat(", first.path, ", ",
                                                    first.dir->PathOf(first.final_name), ")")),
                    prefix);
  }
  committed = true;
  LOOM_RETURN_IF_ERROR(
      Annotate(FsyncDirectory(directories_[0].fd.get(), directories_[0].path), prefix));
  bytes_written_.fetch_add(data.size(), std::memory_order_relaxed);
  writes_.fetch_add(1, std::memory_order_relaxed);

  // 5. The previous version's files k >= 1 are garbage now. Failing to delete them does
  //    not undo the Write; Remove reclaims whatever is left.
  if (previous.ok()) {
    const FileHeader& old = previous->header;
    for (uint32_t k = 1; k < old.file_count && k < directories_.size(); ++k) {
      const std::string stale = disk_internal::StripeFileName(escaped, k, old.write_id);
      ::unlinkat(directories_[k].fd.get(), stale.c_str(), 0);
    }
  } else if (!absl::IsNotFound(previous.status())) {
    // The previous file 0 was unreadable: look for its files by name.
    for (uint32_t k = 1; k < directories_.size(); ++k) {
      static_cast<void>(RemoveTensorFiles(k, escaped, k < file_count ? files[k].final_name : ""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> DiskTier::RemoveTensorFiles(uint32_t file, absl::string_view escaped,
                                                absl::string_view keep) const {
  const Directory& dir = directories_[file];
  const int fd = ::openat(dir.fd.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("openat(", dir.path, ")"));
  DIR* listing = ::fdopendir(fd);
  if (listing == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoToStatus(err, absl::StrCat("fdopendir(", dir.path, ")"));
  }
  std::vector<std::string> doomed;
  while (const dirent* entry = ::readdir(listing)) {
    const absl::string_view entry_name = entry->d_name;
    if (entry_name != keep && disk_internal::IsFileOfTensor(entry_name, escaped, file)) {
      doomed.emplace_back(entry_name);
    }
  }
  ::closedir(listing);
  int removed = 0;
  for (const std::string& doomed_name : doomed) {
    if (::unlinkat(dir.fd.get(), doomed_name.c_str(), 0) == 0) {
      ++removed;
    } else if (errno != ENOENT) {
      return ErrnoToStatus(errno, absl::StrCat("unlinkat(", dir.PathOf(doomed_name), ")"));
    }
  }
  return removed;
}

absl::StatusOr<DiskTier::OpenedFile> DiskTier::OpenFileForRead(uint32_t file,
                                                               absl::string_view name,
                                                               absl::string_view escaped,
                                                               uint64_t write_id) const {
  const Directory& dir = directories_[file];
  OpenedFile f;
  const std::string file_name = disk_internal::StripeFileName(escaped, file, write_id);
  f.path = dir.PathOf(file_name);
  const std::string where = absl::StrCat(TensorPrefix(name), "file ", f.path, ": ");
  const int fd = ::openat(dir.fd.get(), file_name.c_str(), O_RDONLY | dir.OpenFlags());
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("openat(", f.path, ", O_RDONLY)"));
  f.fd = ScopedFd(fd);
  LOOM_ASSIGN_OR_RETURN(const uint64_t file_size, disk_internal::FileSize(fd, f.path));

  LOOM_ASSIGN_OR_RETURN(AlignedBuffer<std::byte> buffer,
                        AlignedBuffer<std::byte>::Create(kDirectAlignment, kDirectAlignment));
  LOOM_ASSIGN_OR_RETURN(size_t got, disk_internal::PreadFull(fd, buffer.span(), 0, f.path));
  auto header_bytes = disk_internal::HeaderBytesFromPrefix(buffer.span().first(got));
  if (!header_bytes.ok()) return Annotate(header_bytes.status(), where);
  f.header_bytes = *header_bytes;
  if (f.header_bytes > file_size) {
    return absl::DataLossError(absl::StrCat(where, "truncated: the file has ", file_size,
                                            " bytes, its header alone needs ", f.header_bytes));
  }
  if (f.header_bytes > buffer.size()) {
    LOOM_ASSIGN_OR_RETURN(buffer,
                          AlignedBuffer<std::byte>::Create(f.header_bytes, kDirectAlignment));
    LOOM_ASSIGN_OR_RETURN(got, disk_internal::PreadFull(fd, buffer.span(), 0, f.path));
  }
  auto header =
      disk_internal::DecodeHeader(buffer.span().first(std::min<size_t>(got, f.header_bytes)));
  if (!header.ok()) return Annotate(header.status(), where);
  f.header = std::move(header).value();
  if (f.header.tensor_name != name) {
    return absl::DataLossError(
        absl::StrCat(where, "holds a header of tensor '", f.header.tensor_name, "'"));
  }
  if (f.header.file_index != file) {
    return absl::DataLossError(absl::StrCat(where, "its header says it is file ",
                                            f.header.file_index, ", expected ", file));
  }
  const uint64_t needed = f.header_bytes + f.header.layout().FilePaddedDataBytes(file);
  if (file_size < needed) {
    return absl::DataLossError(absl::StrCat(where, "truncated: the file has ", file_size,
                                            " bytes, its header describes ", needed));
  }
  return f;
}

absl::Status DiskTier::Read(absl::string_view name, absl::Span<std::byte> out) {
  LOOM_ASSIGN_OR_RETURN(const std::string escaped, disk_internal::EscapeTensorName(name));
  const std::string prefix = TensorPrefix(name);
  const disk_internal::NameLocks::Held held = name_locks_->Lock(name);

  std::vector<OpenedFile> files;
  files.reserve(directories_.size());  // h0 below refers into it
  {
    // File 0 is the commit record: without it the tensor is not stored, whatever other
    // files of an unfinished Write may be around.
    auto first = OpenFileForRead(0, name, escaped, 0);
    if (absl::IsNotFound(first.status())) {
      return absl::NotFoundError(
          absl::StrCat("tensor '", name, "' is not stored (", first.status().message(), ")"));
    }
    if (!first.ok())
      return Annotate(first.status(), absl::IsDataLoss(first.status()) ? "" : prefix);
    files.push_back(std::move(first).value());
  }
  const FileHeader& h0 = files[0].header;
  if (h0.total_bytes != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "the output buffer has ", out.size(),
                                                   " bytes, the stored tensor has ",
                                                   h0.total_bytes));
  }
  if (h0.file_count > directories_.size()) {
    return absl::FailedPreconditionError(absl::StrCat(prefix, "stored across ", h0.file_count,
                                                      " directories, this tier has ",
                                                      directories_.size()));
  }
  for (uint32_t k = 1; k < h0.file_count; ++k) {
    auto f = OpenFileForRead(k, name, escaped, h0.write_id);
    if (absl::IsNotFound(f.status())) {
      return absl::DataLossError(absl::StrCat(prefix, "stripe file ", k, " of ", h0.file_count,
                                              " is missing (", f.status().message(), ")"));
    }
    if (!f.ok()) return Annotate(f.status(), absl::IsDataLoss(f.status()) ? "" : prefix);
    const FileHeader& h = f->header;
    if (h.write_id != h0.write_id || h.total_bytes != h0.total_bytes ||
        h.stripe_bytes != h0.stripe_bytes || h.block_bytes != h0.block_bytes ||
        h.file_count != h0.file_count) {
      return absl::DataLossError(absl::StrFormat(
          "%sfile %s and file %s come from different writes (write id %016x vs %016x, %d vs "
          "%d bytes): torn or mixed rewrite",
          prefix, f->path, files[0].path, h.write_id, h0.write_id, h.total_bytes, h0.total_bytes));
    }
    files.push_back(std::move(f).value());
  }

  const StripeLayout layout = h0.layout();
  LOOM_RETURN_IF_ERROR(Annotate(
      executor_->Run(
          layout.stripe_count(),
          [&](size_t i, BounceBuffer& bounce) -> absl::StatusOr<IoOp> {
            const OpenedFile& f = files[layout.FileOfStripe(i)];
            const size_t len = layout.StripeLength(i);
            const size_t padded = RoundUpToDirect(len);
            std::byte* ptr = out.data() + layout.StripeOffset(i);
            if (!IsDirectAligned(ptr) || padded != len) {
              LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> b, bounce.Get(padded));
              ptr = b.data();
            }
            return IoOp{IoKind::kRead,
                        f.fd.get(),
                        f.header_bytes + layout.SlotOfStripe(i) * layout.stripe_bytes,
                        ptr,
                        padded,
                        f.path};
          },
          [&](size_t i, const IoOp& op) -> absl::Status {
            const uint32_t k = layout.FileOfStripe(i);
            const OpenedFile& f = files[k];
            const size_t len = layout.StripeLength(i);
            const absl::Span<const std::byte> got(op.data, len);
            const uint64_t first = layout.FirstBlockOfStripe(i);
            std::vector<uint32_t> crcs(layout.StripeBlockCount(i));
            Crc32cBlocks(got, layout.block_bytes, absl::MakeSpan(crcs));
            for (size_t b = 0; b < crcs.size(); ++b) {
              const uint32_t stored = f.header.block_crcs[first + b];
              if (crcs[b] != stored) {
                const uint64_t begin = layout.StripeOffset(i) + b * layout.block_bytes;
                const uint64_t end =
                    std::min<uint64_t>(begin + layout.block_bytes, layout.StripeOffset(i) + len);
                return absl::DataLossError(absl::StrFormat(
                    "checksum mismatch in block %d of file %s (tensor bytes [%d, %d)): "
                    "stored 0x%08x, computed 0x%08x",
                    first + b, f.path, begin, end, stored, crcs[b]));
              }
            }
            std::byte* dest = out.data() + layout.StripeOffset(i);
            if (op.data != dest) std::memcpy(dest, op.data, len);
            return absl::OkStatus();
          }),
      prefix));
  bytes_read_.fetch_add(out.size(), std::memory_order_relaxed);
  reads_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DiskTier::Remove(absl::string_view name) {
  LOOM_ASSIGN_OR_RETURN(const std::string escaped, disk_internal::EscapeTensorName(name));
  const std::string prefix = TensorPrefix(name);
  const disk_internal::NameLocks::Held held = name_locks_->Lock(name);
  // File 0 first: the tensor disappears at once; then every other file of the name,
  // including leftovers of unfinished Writes.
  bool removed_first = false;
  const std::string first = disk_internal::StripeFileName(escaped, 0, 0);
  if (::unlinkat(directories_[0].fd.get(), first.c_str(), 0) == 0) {
    removed_first = true;
  } else if (errno != ENOENT) {
    return Annotate(
        ErrnoToStatus(errno, absl::StrCat("unlinkat(", directories_[0].PathOf(first), ")")), prefix);
  }
  int removed_others = 0;
  for (uint32_t k = 0; k < directories_.size(); ++k) {
    absl::StatusOr<int> removed = RemoveTensorFiles(k, escaped, "");
    if (!removed.ok()) return Annotate(removed.status(), prefix);
    removed_others += *removed;
  }
  if (!removed_first) {
    if (removed_others == 0) {
      return absl::NotFoundError(absl::StrCat("tensor '", name, "' is not stored"));
    }
    return absl::OkStatus();  // only leftovers of unfinished Writes were there
  }
  return Annotate(FsyncDirectory(directories_[0].fd.get(), directories_[0].path), prefix);
}

bool DiskTier::Contains(absl::string_view name) const {
  auto escaped = disk_internal::EscapeTensorName(name);
  if (!escaped.ok()) return false;
  struct stat st;
  return ::fstatat(directories_[0].fd.get(), disk_internal::StripeFileName(*escaped, 0, 0).c_str(),
                   &st, 0) == 0;
}

absl::StatusOr<uint64_t> DiskTier::StoredBytes(absl::string_view name) {
  LOOM_ASSIGN_OR_RETURN(const std::string escaped, disk_internal::EscapeTensorName(name));
  const std::string prefix = TensorPrefix(name);
  const disk_internal::NameLocks::Held held = name_locks_->Lock(name);
  auto first = OpenFileForRead(0, name, escaped, 0);
  if (absl::IsNotFound(first.status())) {
    return absl::NotFoundError(
        absl::StrCat("tensor '", name, "' is not stored (", first.status().message(), ")"));
  }
  if (!first.ok()) return Annotate(first.status(), absl::IsDataLoss(first.status()) ? "" : prefix);
  return first->header.total_bytes;
}

}  // namespace loom
