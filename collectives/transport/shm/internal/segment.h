// Segment: the named POSIX shared-memory objects of a job, `/loom.<job_id>.rank<r>`
// (files under /dev/shm), and their lifecycle. A rank creates its own exclusively
// with mode 0600; a leftover of the same name whose creator died (a crash during a
// previous connect) is replaced, one whose creator lives is refused. Names exist only
// while ranks connect: each rank unlinks its own once every peer mapped it, and the
// mappings stay valid, so a crash after connect leaves nothing behind.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SEGMENT_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SEGMENT_H_

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/internal/layout.h"
#include "core/posix.h"

namespace loom {
namespace shm_internal {

// Where glibc's shm_open keeps its objects on Linux.
inline constexpr char kShmDirectory[] = "/dev/shm";

// A leftover that is not ready this long after its creation is a crashed setup.
inline constexpr absl::Duration kSetupGrace = absl::Seconds(5);

// SegmentPrefix returns "/loom.<job_id>."; SegmentName appends "rank<rank>".
std::string SegmentPrefix(absl::string_view job_id);
std::string SegmentName(absl::string_view job_id, int rank);

// Mapping owns one mmap of a shared segment.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  ~Mapping();

  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// The identity of a segment's file, to unlink its name only while it still names it.
struct SegmentId {
  dev_t device = 0;
  ino_t inode = 0;
};

struct CreatedSegment {
  Mapping mapping;
  SegmentId id;
  ScopedFd fd;  // For Commit.
};

// CreateSegment creates `name` with O_CREAT|O_EXCL, mode 0600, `bytes` long (zeroed)
// and maps it. A leftover of that name whose creator is dead is unlinked and
// replaced; one still being set up is waited for until `deadline`. AlreadyExists
// naming the pid when a live process holds it; DeadlineExceeded; Internal for a
// failed system call.
absl::StatusOr<CreatedSegment> CreateSegment(const std::string& name, size_t bytes,
                                             absl::Time deadline);

// Commit allocates the shared memory behind `ranges` of segment `name` now, so that
// a full /dev/shm is a ResourceExhausted error (naming the sizes) at connect rather
// than a SIGBUS at the first touch of a page later.
absl::Status Commit(const ScopedFd& fd, const std::string& name,
                    absl::Span<const ByteRange> ranges);

// UnlinkSegment removes `name` if it still names segment `id`. OK if it is gone.
absl::Status UnlinkSegment(const std::string& name, SegmentId id);

// OpenReadySegment maps the peer segment `name` if it exists, is set up, and its
// creator is alive with the endpoint open; nullopt if not (yet): absent, still being
// set up, or a leftover of a dead process that its rank will replace. Internal for a
// failed system call.
absl::StatusOr<std::optional<Mapping>> OpenReadySegment(const std::string& name);

// ListSegments returns the names ("/loom.<job_id>.*") that exist for `job_id`.
absl::StatusOr<std::vector<std::string>> ListSegments(absl::string_view job_id);

// RemoveSegments unlinks every segment name of `job_id`. Internal naming the first
// name that could not be removed.
absl::Status RemoveSegments(absl::string_view job_id);

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SEGMENT_H_
