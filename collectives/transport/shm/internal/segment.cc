#include "collectives/transport/shm/internal/segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/liveness.h"
#include "core/posix.h"

namespace loom {
namespace shm_internal {
namespace {

std::string PathOf(const std::string& name) { return absl::StrCat(kShmDirectory, name); }

absl::StatusOr<Mapping> MapShared(int fd, size_t bytes, const std::string& name) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return ErrnoToStatus(errno, absl::StrCat("mmap(", name, ", ", bytes, " bytes)"));
  }
  return Mapping(base, bytes);
}

enum class LeftoverKind { kGone, kStale, kLive, kSettingUp };

struct Leftover {
  LeftoverKind kind = LeftoverKind::kGone;
  pid_t pid = 0;
  SegmentId id;
};

// InspectLeftover decides what an existing segment of our own name is.
absl::StatusOr<Leftover> InspectLeftover(const std::string& name) {
  ScopedFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Leftover{};
    return ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat(", name, ")"));
  Leftover leftover;
  leftover.id = SegmentId{st.st_dev, st.st_ino};
  if (static_cast<size_t>(st.st_size) >= sizeof(RankHeader)) {
    absl::StatusOr<Mapping> mapping = MapShared(fd.get(), sizeof(RankHeader), name);
    if (!mapping.ok()) return mapping.status();
    RankHeader* header = static_cast<RankHeader*>(mapping->base());
    leftover.pid = header->pid.load(std::memory_order_acquire);
    const bool ready = header->magic.load(std::memory_order_acquire) == kSegmentMagic;
    if (ready && header->layout_version == kLayoutVersion) {
      // Its creator holds the liveness mutex for as long as it lives.
      const bool held = ProbeLiveness(&header->liveness) == Liveness::kHeld;
      leftover.kind = held ? LeftoverKind::kLive : LeftoverKind::kStale;
      return leftover;
    }
    if (leftover.pid != 0 && !ProcessAlive(leftover.pid)) {
      leftover.kind = LeftoverKind::kStale;
      return leftover;
    }
    if (ready) {
      leftover.kind = LeftoverKind::kLive;  // A live creator from another Loom build.
      return leftover;
    }
  }
  // Not set up yet: give a creator that is still setting up some time.
  const absl::Time modified = absl::TimeFromTimespec(st.st_mtim);
  leftover.kind =
      absl::Now() - modified > kSetupGrace ? LeftoverKind::kStale : LeftoverKind::kSettingUp;
  return leftover;
}

}  // namespace

std::string SegmentPrefix(absl::string_view job_id) { return absl::StrCat("/loom.", job_id, "."); }

std::string SegmentName(absl::string_view job_id, int rank) {
  return absl::StrCat(SegmentPrefix(job_id), "rank", rank);
}

Mapping::Mapping(Mapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

absl::StatusOr<CreatedSegment> CreateSegment(const std::string& name, size_t bytes,
                                             absl::Time deadline) {
  while (true) {
    ScopedFd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.get() >= 0) {
      struct stat st;
      if (fstat(fd.get(), &st) != 0) {
        const int error = errno;
        shm_unlink(name.c_str());
        return ErrnoToStatus(error, absl::StrCat("fstat(", name, ")"));
      }
      const SegmentId id{st.st_dev, st.st_ino};
      if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
        const int error = errno;
        UnlinkSegment(name, id).IgnoreError();
        return ErrnoToStatus(error, absl::StrCat("ftruncate(", name, ", ", bytes, " bytes)"));
      }
      absl::StatusOr<Mapping> mapping = MapShared(fd.get(), bytes, name);
      if (!mapping.ok()) {
        UnlinkSegment(name, id).IgnoreError();
        return mapping.status();
      }
      return CreatedSegment{*std::move(mapping), id, std::move(fd)};
    }
    if (errno != EEXIST) {
      return ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ", O_CREAT | O_EXCL, 0600)"));
    }
    absl::StatusOr<Leftover> leftover = InspectLeftover(name);
    if (!leftover.ok()) return leftover.status();
    switch (leftover->kind) {
      case LeftoverKind::kGone:
        break;
      case LeftoverKind::kStale: {
        const absl::Status unlinked = UnlinkSegment(name, leftover->id);
        if (!unlinked.ok()) return unlinked;
        break;
      }
      case LeftoverKind::kLive:
        return absl::AlreadyExistsError(
            absl::StrCat("shared-memory segment ", PathOf(name), " belongs to live process ",
                         leftover->pid, "; is another job with the same job id running?"));
      case LeftoverKind::kSettingUp:
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(absl::StrCat(
              "shared-memory segment ", PathOf(name), " was still being set up by pid ",
              leftover->pid, " at the connect deadline"));
        }
        absl::SleepFor(absl::Milliseconds(5));
        break;
    }
  }
}

absl::Status Commit(const ScopedFd& fd, const std::string& name,
                    absl::Span<const ByteRange> ranges) {
  size_t total = 0;
  for (const ByteRange& range : ranges) total += range.bytes;
  for (const ByteRange& range : ranges) {
    const int error = posix_fallocate(fd.get(), static_cast<off_t>(range.offset),
                                      static_cast<off_t>(range.bytes));
    if (error == 0) continue;
    if (error == ENOSPC) {
      struct statvfs fs;
      const uint64_t free_bytes =
          statvfs(kShmDirectory, &fs) == 0 ? uint64_t{fs.f_bavail} * fs.f_frsize : uint64_t{0};
      return absl::ResourceExhaustedError(
          absl::StrCat(kShmDirectory, " has no room for the ", total, " bytes of ", PathOf(name),
                       " (", free_bytes,
                       " bytes free); enlarge it (e.g. docker run --shm-size) or lower "
                       "ShmOptions::staging_bytes"));
    }
    return ErrnoToStatus(
        error, absl::StrCat("posix_fallocate(", name, ", ", range.offset, ", ", range.bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status UnlinkSegment(const std::string& name, SegmentId id) {
  struct stat st;
  if (stat(PathOf(name).c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoToStatus(errno, absl::StrCat("stat(", PathOf(name), ")"));
  }
  if (st.st_dev != id.device || st.st_ino != id.inode) return absl::OkStatus();  // Replaced.
  if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return ErrnoToStatus(errno, absl::StrCat("shm_unlink(", name, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Mapping>> OpenReadySegment(const std::string& name) {
  ScopedFd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::optional<Mapping>();
    return ErrnoToStatus(errno, absl::StrCat("shm_open(", name, ")"));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat(", name, ")"));
  if (static_cast<size_t>(st.st_size) < sizeof(RankHeader)) return std::optional<Mapping>();
  absl::StatusOr<Mapping> mapping = MapShared(fd.get(), static_cast<size_t>(st.st_size), name);
  if (!mapping.ok()) return mapping.status();
  RankHeader* header = static_cast<RankHeader*>(mapping->base());
  if (header->magic.load(std::memory_order_acquire) != kSegmentMagic)
    return std::optional<Mapping>();
  if (header->layout_version != kLayoutVersion) {
    const pid_t pid = header->pid.load();
    if (!ProcessAlive(pid)) return std::optional<Mapping>();
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", PathOf(name), " of pid ", pid,
                     " has layout version ", header->layout_version, "; this build has ",
                     kLayoutVersion, " (mixed Loom builds in one job)"));
  }
  if (ProbeLiveness(&header->liveness) != Liveness::kHeld) return std::optional<Mapping>();
  return std::optional<Mapping>(*std::move(mapping));
}

absl::StatusOr<std::vector<std::string>> ListSegments(absl::string_view job_id) {
  // Entries are listed without the leading '/' of their shm_open names.
  const std::string prefix = SegmentPrefix(job_id).substr(1);
  DIR* dir = opendir(kShmDirectory);
  if (dir == nullptr) return ErrnoToStatus(errno, absl::StrCat("opendir(", kShmDirectory, ")"));
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) names.push_back(absl::StrCat("/", entry->d_name));
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status RemoveSegments(absl::string_view job_id) {
  absl::StatusOr<std::vector<std::string>> names = ListSegments(job_id);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
      return ErrnoToStatus(errno, absl::StrCat("shm_unlink(", name, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shm_internal
}  // namespace loom
