#include "collectives/transport/shm/shm_harness.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/segment.h"
#include "core/posix.h"

namespace loom {
namespace {

// A child reports its status as: int32 code, uint32 message length, message bytes.
void WriteAll(int fd, const void* data, size_t bytes) {
  const char* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t wrote = write(fd, cursor, bytes);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;
    cursor += wrote;
    bytes -= static_cast<size_t>(wrote);
  }
}

void ReportStatus(int fd, const absl::Status& status) {
  const int32_t code = static_cast<int32_t>(status.code());
  const std::string message(status.message());
  const uint32_t length = static_cast<uint32_t>(message.size());
  WriteAll(fd, &code, sizeof(code));
  WriteAll(fd, &length, sizeof(length));
  WriteAll(fd, message.data(), message.size());
}

// DecodeStatus returns the reported status, or nullopt for a missing or torn report.
std::optional<absl::Status> DecodeStatus(const std::string& bytes) {
  int32_t code = 0;
  uint32_t length = 0;
  if (bytes.size() < sizeof(code) + sizeof(length)) return std::nullopt;
  std::memcpy(&code, bytes.data(), sizeof(code));
  std::memcpy(&length, bytes.data() + sizeof(code), sizeof(length));
  if (bytes.size() != sizeof(code) + sizeof(length) + length) return std::nullopt;
  return absl::Status(static_cast<absl::StatusCode>(code),
                      bytes.substr(sizeof(code) + sizeof(length)));
}

struct Child {
  pid_t pid = -1;
  int fd = -1;  // Read end of its report pipe; -1 once at EOF.
  std::string report;
  bool killed_at_timeout = false;
};

std::string DescribeExit(int index, pid_t pid, int wait_status, const Child& child,
                         absl::Duration timeout, absl::StatusCode* code) {
  if (child.killed_at_timeout) {
    *code = absl::StatusCode::kDeadlineExceeded;
    return absl::StrCat("process ", index, " (pid ", pid, ") did not finish within ",
                        absl::FormatDuration(timeout), "; killed");
  }
  if (WIFSIGNALED(wait_status)) {
    *code = absl::StatusCode::kUnavailable;
    return absl::StrCat("process ", index, " (pid ", pid, ") was killed by signal ",
                        WTERMSIG(wait_status), " (", strsignal(WTERMSIG(wait_status)),
                        ") before reporting");
  }
  *code = absl::StatusCode::kInternal;
  return absl::StrCat("process ", index, " (pid ", pid, ") exited with code ",
                      WEXITSTATUS(wait_status), " without reporting");
}

const char* ModeName(ShmOptions::CopyMode mode) {
  switch (mode) {
    case ShmOptions::CopyMode::kCma:
      return "cma";
    case ShmOptions::CopyMode::kStaged:
      return "staged";
    case ShmOptions::CopyMode::kStagedOrMapped:
      return "staged_or_mapped";
    case ShmOptions::CopyMode::kAuto:
      break;
  }
  return "auto";
}

}  // namespace

std::vector<absl::Status> RunProcesses(int count, absl::Duration timeout,
                                       const std::function<absl::Status(int index)>& child_body) {
  std::vector<Child> children(count);
  std::vector<absl::Status> results(count);
  // Buffered output would otherwise be written once more by every child.
  std::fflush(stdout);
  std::fflush(stderr);
  for (int i = 0; i < count; ++i) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      results[i] = absl::InternalError(absl::StrCat("pipe2 failed: ", StrError(errno)));
      continue;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (int j = 0; j < i; ++j) {
        if (children[j].fd >= 0) close(children[j].fd);
      }
      ReportStatus(fds[1], child_body(i));
      // No exit handlers or static destructors (they belong to the parent), but what
      // the child printed should show.
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      results[i] = absl::InternalError(absl::StrCat("fork failed: ", StrError(errno)));
      continue;
    }
    children[i].pid = pid;
    children[i].fd = fds[0];
  }

  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    std::vector<pollfd> polled;
    std::vector<int> owners;
    for (int i = 0; i < count; ++i) {
      if (children[i].fd < 0) continue;
      polled.push_back(pollfd{children[i].fd, POLLIN, 0});
      owners.push_back(i);
    }
    if (polled.empty()) break;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      for (int i : owners) {
        if (!children[i].killed_at_timeout) {
          kill(children[i].pid, SIGKILL);
          children[i].killed_at_timeout = true;
        }
      }
    }
    const int wait_ms =
        left <= absl::ZeroDuration()
            ? 100
            : static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int ready = poll(polled.data(), polled.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (size_t k = 0; k < polled.size(); ++k) {
      if (polled[k].revents == 0) continue;
      Child& child = children[owners[k]];
      char buffer[4096];
      const ssize_t got = read(child.fd, buffer, sizeof(buffer));
      if (got > 0) {
        child.report.append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(child.fd);
        child.fd = -1;
      }
    }
  }

  for (int i = 0; i < count; ++i) {
    Child& child = children[i];
    if (child.pid < 0) continue;
    if (child.fd >= 0) close(child.fd);
    int wait_status = 0;
    while (waitpid(child.pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    const std::optional<absl::Status> reported = DecodeStatus(child.report);
    if (reported.has_value()) {
      results[i] = *reported;
    } else {
      absl::StatusCode code;
      const std::string what = DescribeExit(i, child.pid, wait_status, child, timeout, &code);
      results[i] = absl::Status(code, what);
    }
  }
  return results;
}

std::string UniqueJobId(absl::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t random = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return absl::StrCat(prefix, "-", getpid(), "-", counter.fetch_add(1), "-", absl::Hex(random));
}

ShmHarness::ShmHarness(ShmHarnessOptions options) : options_(std::move(options)) {}

std::string ShmHarness::name() const {
  return absl::StrCat("shm/", ModeName(options_.transport.copy_mode));
}

std::vector<absl::Status> ShmHarness::Run(int world,
                                          const std::function<absl::Status(Transport&)>& body) {
  last_job_id_ = options_.transport.job_id.empty() ? UniqueJobId() : options_.transport.job_id;
  std::vector<absl::Status> results =
      RunProcesses(world, options_.timeout, [&](int rank) -> absl::Status {
        ShmOptions options = options_.transport;
        options.job_id = last_job_id_;
        options.rank = rank;
        options.size = world;
        absl::StatusOr<std::unique_ptr<Transport>> transport = ConnectShmTransport(options);
        if (!transport.ok()) return transport.status();
        const absl::Status status = body(**transport);
        transport->reset();  // Closing is part of the run: it must not hang either.
        return status;
      });
  absl::StatusOr<std::vector<std::string>> leftovers = shm_internal::ListSegments(last_job_id_);
  last_leftovers_ =
      leftovers.ok() ? *std::move(leftovers) : std::vector<std::string>{"<cannot list /dev/shm>"};
  RemoveShmSegments(last_job_id_).IgnoreError();
  return results;
}

TransportHarnessFactory MakeShmHarnessFactory(ShmOptions::CopyMode mode) {
  return [mode]() -> std::unique_ptr<TransportHarness> {
    ShmHarnessOptions options;
    options.transport.copy_mode = mode;
    return std::make_unique<ShmHarness>(options);
  };
}

absl::Status ProbeShmCma() {
  static const absl::Status probed = [] {
    ShmHarnessOptions options;
    options.transport.copy_mode = ShmOptions::CopyMode::kCma;
    options.transport.connect_timeout = absl::Seconds(20);
    options.timeout = absl::Seconds(30);
    ShmHarness harness(options);
    const std::vector<absl::Status> results =
        harness.Run(2, [](Transport&) { return absl::OkStatus(); });
    absl::Status status;
    for (const absl::Status& result : results) {
      if (!result.ok()) {
        status = result;
        break;
      }
    }
    return status;
  }();
  return probed;
}

}  // namespace loom
