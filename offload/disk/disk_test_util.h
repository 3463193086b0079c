// Test helpers for offload/disk (testonly): fresh directories under $TEST_TMPDIR,
// seeded distinct bytes, and file surgery for the corruption tests.
//
// Example:
//   const std::string dir = MakeTestDirectory("roundtrip");   // new, empty, unique
//   std::vector<std::byte> data = SeededBytes(4097, /*seed=*/7);
//   FlipByte(dir + "/w.0.ldt", 8192);                        // xor 0xFF at that offset
#ifndef LOOM_OFFLOAD_DISK_DISK_TEST_UTIL_H_
#define LOOM_OFFLOAD_DISK_DISK_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace loom {
namespace disk_testing {

// MakeTestDirectory creates a new empty directory under $TEST_TMPDIR (or /tmp) whose
// name starts with `label`; fails the test (ADD_FAILURE) and returns "" on error.
std::string MakeTestDirectory(absl::string_view label, absl::string_view parent = "");

// SeededBytes returns n bytes from a SplitMix64 stream seeded with `seed`: distinct
// for distinct seeds and offsets, so a misplaced stripe shows.
std::vector<std::byte> SeededBytes(size_t n, uint64_t seed);

// File surgery; each fails the test on error.
void FlipByte(const std::string& path, uint64_t offset);
void TruncateFile(const std::string& path, uint64_t size);
std::vector<std::byte> ReadWholeFile(const std::string& path);
void WriteWholeFile(const std::string& path, const std::vector<std::byte>& bytes);
uint64_t FileSizeOf(const std::string& path);

// FindFile returns dir + "/" + the one entry of `dir` whose name starts with `prefix`;
// fails the test (and returns "") unless there is exactly one.
std::string FindFile(const std::string& dir, absl::string_view prefix);

// ListDirectory returns the names in `dir` (without "." and ".."), sorted.
std::vector<std::string> ListDirectory(const std::string& dir);

}  // namespace disk_testing
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_DISK_TEST_UTIL_H_
