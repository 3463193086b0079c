// Cli: how every command-line tool in tools/ (train, collective_bench, launch, mesh,
// schedule) parses its flags, reports an error and picks its exit status, so bad
// input looks and exits the same everywhere (tools/docs/failures.md, "Errors and exit
// status"):
//   - an error is one line on stderr, "<tool>: <message>", the message without a
//     StatusCode prefix and without a second "<tool>: ";
//   - exit 2 for a usage error: a malformed or unknown flag, a flag value that
//     validation refuses (InvalidArgument), a stray positional argument, an output
//     path that cannot be opened for writing;
//   - exit 1 for a failure at run time (any other code).
// A launcher keeps returning 128 + n for a rank killed by signal n.
//
// Example:
//   int main(int argc, char** argv) {
//     absl::StatusOr<std::vector<char*>> args = cli::ParseFlags(argc, argv);
//     if (!args.ok()) return cli::Fail("mesh", args.status());    // exit 2
//     if (absl::Status s = cli::CheckNoArguments(*args); !s.ok()) return cli::Fail("mesh", s);
//     absl::Status s = Run();
//     if (!s.ok()) return cli::Fail("mesh", s);  // "mesh: --rank 9 is outside ...", 2 or 1
//   }
#ifndef LOOM_TOOLS_CLI_H_
#define LOOM_TOOLS_CLI_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace cli {

inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

// ExitCode returns 0 for OK, kExitUsage for InvalidArgument, kExitRuntime otherwise.
int ExitCode(const absl::Status& status);

// ErrorLine returns "<tool>: <message>\n": the status's message without its code,
// a leading "<tool>: " not repeated, line breaks inside it turned into "; ".
std::string ErrorLine(absl::string_view tool, absl::string_view message);

// PrintError writes ErrorLine(tool, message) to stderr and flushes it.
void PrintError(absl::string_view tool, absl::string_view message);

// Fail prints `status` (PrintError) and returns its ExitCode; `exit_code` overrides
// the code when a tool knows better (schedule's failed verification is 1 whatever
// the code).
int Fail(absl::string_view tool, const absl::Status& status);
int Fail(absl::string_view tool, const absl::Status& status, int exit_code);

// ParseFlags parses the command line as absl::ParseCommandLine does (and handles
// --help the same way) and returns the positional arguments, argv[0] first. It first
// checks every flag before "--" itself, so that an unknown flag, a value the flag's
// type cannot hold (--vocab=abc, --steps=99999999999999999999) or a missing value is
// InvalidArgument naming the flag and the value, instead of the flags library's
// several lines and exit 1.
absl::StatusOr<std::vector<char*>> ParseFlags(int argc, char** argv);

// CheckNoArguments returns InvalidArgument quoting the first positional argument
// after argv[0] (ParseFlags' result), for tools that take none.
absl::Status CheckNoArguments(const std::vector<char*>& positional);

// CheckOutputPath checks, before any work, that `path` (the value of flag `flag`) can
// be opened for writing: it opens it (creating it if needed, never truncating it;
// a file it created is removed again) without blocking. InvalidArgument naming the
// flag, the path and strerror(errno) otherwise (a missing directory, no permission,
// a directory, a FIFO nobody reads). OK for an empty path (the flag is unset).
absl::Status CheckOutputPath(absl::string_view flag, const std::string& path);

}  // namespace cli
}  // namespace loom

#endif  // LOOM_TOOLS_CLI_H_
