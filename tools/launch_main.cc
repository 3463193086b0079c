// launch: runs the N ranks of a Loom job as local processes (like torchrun on one host)
// for the shared-memory transport. Each rank gets LOOM_JOB_ID, LOOM_RANK,
// LOOM_WORLD_SIZE, LOOM_LOCAL_RANK and LOOM_LOCAL_WORLD_SIZE; the first rank to fail
// stops the job; the job's leftover /dev/shm/loom.<job_id>.* segments are removed.
//
//   ./bazelw run //tools:launch -- -n 4 -- ./my_trainer --steps=100
//   launch -n 8 --timeout=30m --grace=10s -- python3 train.py
//   launch -n 2 --job_id=smoke -- /bin/sh -c 'echo "rank $LOOM_RANK of $LOOM_WORLD_SIZE"'
//
// Exit status: 0 when every rank exits 0; the first failing rank's exit code, or
// 128 + its signal; 124 when --timeout expired; 128 + a signal launch received and
// forwarded; 2 when the job could not be started for its command line (bad flags,
// program not found or not executable), 1 when it could not for another reason (a
// failed fork). Errors are one line, "launch: <message>" (tools/cli.h).
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/launcher.h"

// -n, --timeout and --grace are read as strings and parsed here, so that a malformed
// value is reported like any other bad input (exit 2) rather than by the flags library.
ABSL_FLAG(std::string, n, "1", "Number of ranks (processes) to start, 1 to 1024.");
ABSL_FLAG(std::string, timeout, "0",
          "Deadline for the whole job, e.g. 90s or 30m; 0 means none. When it passes every "
          "rank is stopped and launch exits 124.");
ABSL_FLAG(std::string, grace, "5s",
          "How long a rank may take to exit after SIGTERM (or a forwarded signal) before it "
          "gets SIGKILL.");
ABSL_FLAG(std::string, max_restarts, "0",
          "When a rank fails on its own (killed, crashed, stopped responding, or exited with a "
          "code other than 2), stop the job and start it again, up to this many times (0 to "
          "100), as torchrun's --max-restarts: ranks that save checkpoints resume from them "
          "(e.g. train --resume).");
ABSL_FLAG(std::string, job_id, "",
          "LOOM_JOB_ID for the ranks: 1 to 64 characters from [A-Za-z0-9_-]. Empty makes a "
          "unique one, <host>-<pid>-<random hex>.");

namespace loom {
namespace {

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view name, const std::string& value) {
  absl::Duration duration;
  if (!absl::ParseDuration(value, &duration)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, "=", value,
                                                   " is not a duration (e.g. 0, 500ms, 90s, 30m)"));
  }
  return duration;
}

absl::StatusOr<LaunchOptions> OptionsFromFlags(const std::vector<char*>& positional) {
  LaunchOptions options;
  const std::string n = absl::GetFlag(FLAGS_n);
  if (!absl::SimpleAtoi(n, &options.num_ranks)) {
    return absl::InvalidArgumentError(absl::StrCat("-n ", n, " is not a number of ranks (1 to ",
                                                   kMaxLaunchRanks, ")"));
  }
  LOOM_ASSIGN_OR_RETURN(options.timeout, ParseDurationFlag("timeout", absl::GetFlag(FLAGS_timeout)));
  LOOM_ASSIGN_OR_RETURN(options.grace, ParseDurationFlag("grace", absl::GetFlag(FLAGS_grace)));
  options.job_id = absl::GetFlag(FLAGS_job_id);
  // positional[0] is launch itself.
  if (positional.size() < 2) {
    return absl::InvalidArgumentError(
        "no PROGRAM given; usage: launch -n N [--timeout=DURATION] [--job_id=ID] -- PROGRAM "
        "ARGS...");
  }
  options.argv.assign(positional.begin() + 1, positional.end());
  return options;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Runs N ranks of a Loom job as local processes and supervises them.\n"
      "  launch -n N [--timeout=DURATION] [--grace=DURATION] [--max_restarts=N] [--job_id=ID] --\n"
      "         PROGRAM ARGS...\n"
      "Flags end at \"--\"; everything after it is the program and its arguments.");
  const absl::StatusOr<std::vector<char*>> positional = loom::cli::ParseFlags(argc, argv);
  if (!positional.ok()) return loom::cli::Fail("launch", positional.status());
  const absl::StatusOr<loom::LaunchOptions> options = loom::OptionsFromFlags(*positional);
  if (!options.ok()) return loom::cli::Fail("launch", options.status());
  const std::string restarts_flag = absl::GetFlag(FLAGS_max_restarts);
  loom::RestartPolicy restarts;
  if (!absl::SimpleAtoi(restarts_flag, &restarts.max_restarts) || restarts.max_restarts < 0 ||
      restarts.max_restarts > 100) {
    return loom::cli::Fail("launch", absl::InvalidArgumentError(absl::StrCat(
                                         "--max_restarts ", restarts_flag, " is not in [0, 100]")));
  }
  restarts.on_restart = [&](int restart, const loom::LaunchResult& failed, loom::LaunchOptions*) {
    std::cerr << loom::Describe(failed)
              << absl::StrFormat("launch: restart %d of %d after rank %d %s\n", restart,
                                 restarts.max_restarts, failed.first_failed_rank.value_or(-1),
                                 failed.first_failure);
    return true;
  };
  const absl::StatusOr<loom::RestartedLaunch> restarted =
      loom::LaunchWithRestarts(*options, restarts);
  const absl::StatusOr<loom::LaunchResult> result =
      restarted.ok() ? absl::StatusOr<loom::LaunchResult>(restarted->last)
                     : absl::StatusOr<loom::LaunchResult>(restarted.status());
  if (!result.ok()) {
    // A PROGRAM that cannot be found or run is the command line's fault, like a
    // bad flag.
    const absl::Status& s = result.status();
    const bool usage =
        absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsPermissionDenied(s);
    return loom::cli::Fail("launch", s, usage ? loom::cli::kExitUsage : loom::cli::kExitRuntime);
  }
  std::cerr << loom::Describe(*result);
  return result->ExitCode();
}
