// Job files: where a job's ranks leave what the launcher needs after they are gone,
// and what must be removed when the job ends, however it ends.
//
// A job owns one directory, JobDirectory(job_id) = ${TMPDIR:-/tmp}/loom.<job_id>:
//   reports/<rank>   a failing rank's report: when, and whether a peer caused it
//   owned/<name>     a symbolic link to a path the job made elsewhere (an offload
//                    directory under --nvme_dir), removed with the job
//   ...              anything else a rank keeps for the job's lifetime (the default
//                    offload directories, a Gloo rendezvous store)
// The launcher creates it, passes it to the ranks as LOOM_JOB_DIR, and removes it
// (with the job's /dev/shm/loom.<job_id>.* segments) when the ranks are gone; a
// janitor process does the same if the launcher itself is killed (internal/janitor.h).
//
// Example (in a rank that fails):
//   absl::Status status = Train(...);
//   if (!status.ok()) ReportRankFailure(status);  // no-op outside a launched job
#ifndef LOOM_TOOLS_JOB_FILES_H_
#define LOOM_TOOLS_JOB_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom {

// JobDirectory: ${TMPDIR:-/tmp}/loom.<job_id>.
std::string JobDirectory(absl::string_view job_id);

// CreateJobDirectory makes the job's directory with reports/ and owned/ (mode 0700),
// removing a leftover of an earlier job with the same id first. Returns its path.
absl::StatusOr<std::string> CreateJobDirectory(absl::string_view job_id);

// What a failing rank tells the launcher.
struct RankReport {
  int64_t rank = -1;
  int64_t pid = 0;
  absl::Time when;
  // Set when the rank failed because a peer failed first (died, stopped responding,
  // aborted): the peer's world rank and what happened to it.
  int64_t peer_rank = -1;
  std::string peer_fault;
  std::string message;  // the rank's own error, one line

  bool caused_by_peer() const { return peer_rank >= 0; }
};

// ReportRankFailure writes this process's report to $LOOM_JOB_DIR/reports/$LOOM_RANK,
// from `status` and the transports' first recorded peer failure (peer_failure.h).
// Nothing (OK) outside a launched job (no LOOM_JOB_DIR); otherwise the write's error.
absl::Status ReportRankFailure(const absl::Status& status);

// ReportPeerFailuresAsTheyHappen makes the first peer failure a transport of this
// process records write this rank's report at once (ReportRankFailure later
// overwrites it with the rank's own message): a rank that noticed a dead or silent
// peer may be stopped by the launcher before it has unwound to its own report.
// Nothing outside a launched job.
void ReportPeerFailuresAsTheyHappen();

// WriteRankReport writes `report` as reports/<report.rank> in `job_dir` (atomically:
// a temporary file, then rename).
absl::Status WriteRankReport(const std::string& job_dir, const RankReport& report);

// ReadRankReports returns the reports in `job_dir`, by rank; malformed files are
// skipped.
std::vector<RankReport> ReadRankReports(const std::string& job_dir);

// RegisterOwnedPath links `path` (absolute) from $LOOM_JOB_DIR/owned, so that it is
// removed with the job. Nothing outside a launched job.
absl::Status RegisterOwnedPath(const std::string& path);

// RemoveJobFiles removes what RegisterOwnedPath named, the job directory and the
// job's /dev/shm/loom.<job_id>.* segments. OK when there is nothing to remove.
absl::Status RemoveJobFiles(absl::string_view job_id);

}  // namespace loom

#endif  // LOOM_TOOLS_JOB_FILES_H_
