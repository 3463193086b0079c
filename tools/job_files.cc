#include "tools/job_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "collectives/transport/peer_failure.h"
#include "core/posix.h"
#include "tools/internal/janitor.h"

namespace loom {
namespace {

absl::Status MakeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) return absl::OkStatus();
  return ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
}

// One line: newlines would break the report's format.
std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\n", " "}, {"\r", " "}});
}

}  // namespace

std::string JobDirectory(absl::string_view job_id) {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp == '/' ? tmp : "/tmp", "/loom.", job_id);
}

absl::StatusOr<std::string> CreateJobDirectory(absl::string_view job_id) {
  const std::string dir = JobDirectory(job_id);
  if (const int error = RemoveTree(dir.c_str()); error != 0) {
    return ErrnoToStatus(error, absl::StrCat("removing the leftover ", dir));
  }
  if (mkdir(dir.c_str(), 0700) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", dir));
  }
  if (absl::Status s = MakeDirectory(dir + "/reports"); !s.ok()) return s;
  if (absl::Status s = MakeDirectory(dir + "/owned"); !s.ok()) return s;
  return dir;
}

absl::Status WriteRankReport(const std::string& job_dir, const RankReport& report) {
  const std::string path = absl::StrCat(job_dir, "/reports/", report.rank);
  const std::string temporary = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << "rank " << report.rank << "\n"
        << "pid " << report.pid << "\n"
        << "when_ns " << absl::ToUnixNanos(report.when) << "\n"
        << "peer_rank " << report.peer_rank << "\n"
        << "peer_fault " << OneLine(report.peer_fault) << "\n"
        << "message " << OneLine(report.message) << "\n";
    out.close();
    if (!out) {
      return absl::UnavailableError(absl::StrCat("cannot write the rank report ", temporary));
    }
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("rename ", temporary));
  }
  return absl::OkStatus();
}

absl::Status ReportRankFailure(const absl::Status& status) {
  const char* job_dir = std::getenv("LOOM_JOB_DIR");
  const char* rank = std::getenv("LOOM_RANK");
  if (job_dir == nullptr || *job_dir == '\0' || rank == nullptr) return absl::OkStatus();
  RankReport report;
  if (!absl::SimpleAtoi(rank, &report.rank) || report.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("LOOM_RANK='", rank, "' is not a rank"));
  }
  report.pid = getpid();
  report.when = absl::Now();
  // The first line: enough for the launcher's report (a rank prints the rest itself).
  const absl::string_view message = status.message();
  report.message = std::string(message.substr(0, message.find('\n')));
  if (const std::optional<PeerFailure> peer = FirstPeerFailure(); peer.has_value()) {
    report.peer_rank = peer->peer.world_rank;
    report.peer_fault = std::string(PeerFaultName(peer->fault));
    // A peer failure recorded without a world rank cannot be blamed on anyone.
    if (report.peer_rank < 0) report.peer_fault.clear();
  }
  return WriteRankReport(job_dir, report);
}

void ReportPeerFailuresAsTheyHappen() {
  if (std::getenv("LOOM_JOB_DIR") == nullptr || std::getenv("LOOM_RANK") == nullptr) return;
  SetPeerFailureObserver([](const PeerFailure& failure) {
    ReportRankFailure(absl::UnavailableError(failure.message)).IgnoreError();
  });
}

std::vector<RankReport> ReadRankReports(const std::string& job_dir) {
  std::vector<RankReport> reports;
  const std::string dir = job_dir + "/reports";
  // Reports are named by rank; the few ranks that failed wrote one each.
  std::unique_ptr<DIR, int (*)(DIR*)> listing(opendir(dir.c_str()), &closedir);
  if (listing == nullptr) return reports;
  while (const struct dirent* entry = readdir(listing.get())) {
    int64_t rank = 0;
    if (!absl::SimpleAtoi(entry->d_name, &rank)) continue;
    std::ifstream in(absl::StrCat(dir, "/", entry->d_name));
    RankReport report;
    std::string line;
    bool complete = false;
    while (std::getline(in, line)) {
      const size_t space = line.find(' ');
      if (space == std::string::npos) continue;
      const absl::string_view key = absl::string_view(line).substr(0, space);
      const absl::string_view value = absl::string_view(line).substr(space + 1);
      int64_t number = 0;
      if (key == "rank" && absl::SimpleAtoi(value, &number)) report.rank = number;
      if (key == "pid" && absl::SimpleAtoi(value, &number)) report.pid = number;
      if (key == "when_ns" && absl::SimpleAtoi(value, &number)) {
        report.when = absl::FromUnixNanos(number);
      }
      if (key == "peer_rank" && absl::SimpleAtoi(value, &number)) report.peer_rank = number;
      if (key == "peer_fault") report.peer_fault = std::string(value);
      if (key == "message") {
        report.message = std::string(value);
        complete = true;
      }
    }
    if (complete && report.rank == rank) reports.push_back(std::move(report));
  }
  std::sort(reports.begin(), reports.end(),
            [](const RankReport& a, const RankReport& b) { return a.rank < b.rank; });
  return reports;
}

absl::Status RegisterOwnedPath(const std::string& path) {
  const char* job_dir = std::getenv("LOOM_JOB_DIR");
  if (job_dir == nullptr || *job_dir == '\0') return absl::OkStatus();
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("owned path \"", path, "\" is not absolute"));
  }
  static int counter = 0;
  const std::string link = absl::StrCat(job_dir, "/owned/", getpid(), "-",
                                        __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
  if (symlink(path.c_str(), link.c_str()) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("symlink ", link));
  }
  return absl::OkStatus();
}

absl::Status RemoveJobFiles(absl::string_view job_id) {
  const std::string dir = JobDirectory(job_id);
  const std::string prefix = absl::StrCat("loom.", job_id, ".");
  if (const int error = RemoveJobTree(dir.c_str(), prefix.c_str()); error != 0) {
    return ErrnoToStatus(error, absl::StrCat("removing the files of job ", dir));
  }
  return absl::OkStatus();
}

}  // namespace loom
