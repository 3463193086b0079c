#include "tools/cli.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/posix.h"

namespace loom {
namespace cli {
namespace {

// What a value of the flag's type is, for "--steps=abc is not <this>".
std::string TypeWords(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<bool>()) return "true or false";
  if (flag.IsOfType<int>() || flag.IsOfType<int32_t>()) return "an integer (32-bit)";
  if (flag.IsOfType<int64_t>()) return "an integer (64-bit)";
  if (flag.IsOfType<uint32_t>()) return "a non-negative integer (32-bit)";
  if (flag.IsOfType<uint64_t>()) return "a non-negative integer (64-bit)";
  if (flag.IsOfType<double>() || flag.IsOfType<float>()) return "a number";
  return "a valid value";
}

// Flags the flags library acts on itself while parsing: its flag files and the usage
// flags (--help and the like, which print and exit as they always do).
bool IsParserFlag(absl::string_view name) {
  for (absl::string_view own :
       {"flagfile", "fromenv", "tryfromenv", "undefok", "help", "helpfull", "helpshort",
        "helppackage", "version", "only_check_args", "helpon", "helpmatch"}) {
    if (name == own) return true;
  }
  return false;
}

// CheckFlags walks argv as absl::ParseCommandLine will, up to "--", and returns the
// first problem it would report.
absl::Status CheckFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;  // positional ("-" too)
    absl::string_view body = arg.substr(1);
    absl::ConsumePrefix(&body, "-");
    const size_t equals = body.find('=');
    const absl::string_view name = body.substr(0, equals);
    const bool has_value = equals != absl::string_view::npos;
    absl::string_view value = has_value ? body.substr(equals + 1) : absl::string_view();
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat("malformed flag ", arg));
    if (IsParserFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      absl::CommandLineFlag* negated =
          absl::StartsWith(name, "no") ? absl::FindCommandLineFlag(name.substr(2)) : nullptr;
      if (negated != nullptr && negated->IsOfType<bool>()) {
        if (has_value) {
          return absl::InvalidArgumentError(absl::StrCat(
              arg, ": --", name, " takes no value (use --", name.substr(2), "=", value, ")"));
        }
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (--help lists the flags)"));
    }
    if (flag->IsRetired()) continue;
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    // Setting the flag here is harmless: ParseCommandLine sets it to the same value.
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, " is not ", TypeWords(*flag)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int ExitCode(const absl::Status& status) {
  if (status.ok()) return 0;
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitRuntime;
}

std::string ErrorLine(absl::string_view tool, absl::string_view message) {
  const std::string prefix = absl::StrCat(tool, ": ");
  while (absl::ConsumePrefix(&message, prefix)) {
  }
  message = absl::StripTrailingAsciiWhitespace(message);
  return absl::StrCat(prefix, absl::StrReplaceAll(message, {{"\n", "; "}}), "\n");
}

void PrintError(absl::string_view tool, absl::string_view message) {
  std::cerr << ErrorLine(tool, message) << std::flush;
}

int Fail(absl::string_view tool, const absl::Status& status) {
  return Fail(tool, status, ExitCode(status));
}

int Fail(absl::string_view tool, const absl::Status& status, int exit_code) {
  PrintError(tool, status.message());
  return exit_code;
}

absl::StatusOr<std::vector<char*>> ParseFlags(int argc, char** argv) {
  if (absl::Status s = CheckFlags(argc, argv); !s.ok()) return s;
  return absl::ParseCommandLine(argc, argv);
}

absl::Status CheckNoArguments(const std::vector<char*>& positional) {
  if (positional.size() <= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", positional[1],
                                                 "\" (this tool takes flags only, --name=value)"));
}

absl::Status CheckOutputPath(absl::string_view flag, const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  // Several processes of one job may check the same path at once: one creates and
  // removes it while another finds it, then finds it gone; a few rounds settle that.
  int error = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(path.c_str());
      return absl::OkStatus();
    }
    error = errno;
    if (error != EEXIST) break;
    fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return absl::OkStatus();
    }
    error = errno;
    if (error != ENOENT) break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, "=", path, ": cannot open for writing: ", StrError(error)));
}

}  // namespace cli
}  // namespace loom
