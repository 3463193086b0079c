// FreshTestDirectory: a new, empty directory for a test, under $TEST_TMPDIR (which
// Bazel removes after the test) or /tmp. A failure to create it is a test failure
// naming the path and errno, and the result is then empty.
//
// Example:
//   const std::string dir = FreshTestDirectory("ckpt");   // $TEST_TMPDIR/ckpt.AbC123
#ifndef LOOM_CORE_TEMP_DIR_TESTING_H_
#define LOOM_CORE_TEMP_DIR_TESTING_H_

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace loom {

inline std::string FreshTestDirectory(absl::string_view label) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/", label, ".XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    return "";
  }
  return pattern;
}

}  // namespace loom

#endif  // LOOM_CORE_TEMP_DIR_TESTING_H_
