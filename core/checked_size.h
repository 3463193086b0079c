// CheckedSize: overflow-checked products and sums of sizes, and a check of a byte
// count against this machine's physical memory, for code that turns flags or API
// arguments into an allocation. Every size is checked before anything is allocated,
// so a huge or overflowing request is an error that names its values, never a
// std::bad_alloc or a wrapped-around count.
//
// Example:
//   CheckedMul({{"--vocab", 1000}, {"--hidden", 64}, {"bytes per f32", 4}});
//   // 256000
//   CheckedMul({{"--hidden", 4000000000}, {"--hidden", 4000000000}});
//   // InvalidArgument: "--hidden 4000000000 x --hidden 4000000000 overflows int64 ..."
//   CheckedMul({{"--seq_len", -1}, {"--hidden", 64}});
//   // InvalidArgument: "--seq_len -1 is negative ..."
//   CheckFitsInMemory("--vocab 1000000000000 x --hidden 64 parameters", int64_t{1} << 50);
//   // ResourceExhausted: "... need 1125899906842624 bytes (1024.0 TiB); this machine
//   //                     has 25177669632 bytes (23.4 GiB) of physical memory"
#ifndef LOOM_CORE_CHECKED_SIZE_H_
#define LOOM_CORE_CHECKED_SIZE_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// SizeTerm: one factor or addend and what it is ("--vocab", "bytes per f32"), so an
// error can name it.
struct SizeTerm {
  absl::string_view name;
  int64_t value = 0;
};

// CheckedMul returns the product of the terms' values (1 for none). InvalidArgument
// naming every term when one is negative or the product passes INT64_MAX.
absl::StatusOr<int64_t> CheckedMul(absl::Span<const SizeTerm> terms);
absl::StatusOr<int64_t> CheckedMul(std::initializer_list<SizeTerm> terms);

// CheckedAdd returns the sum of the terms' values (0 for none). InvalidArgument
// naming every term when one is negative or the sum passes INT64_MAX.
absl::StatusOr<int64_t> CheckedAdd(absl::Span<const SizeTerm> terms);
absl::StatusOr<int64_t> CheckedAdd(std::initializer_list<SizeTerm> terms);

// SizeFromUnsigned returns `value` (a size_t, as ParseByteSize gives) as an int64_t
// size; InvalidArgument naming `name` when it passes INT64_MAX.
absl::StatusOr<int64_t> SizeFromUnsigned(absl::string_view name, size_t value);

// PhysicalMemoryBytes returns this machine's physical memory,
// sysconf(_SC_PHYS_PAGES) x sysconf(_SC_PAGESIZE); INT64_MAX when the system does
// not say (a check against it then passes).
int64_t PhysicalMemoryBytes();

// CheckFitsInMemory returns OK when `bytes` (what `what` needs, at once, on this
// machine) is at most PhysicalMemoryBytes(); ResourceExhausted naming `what`, both
// byte counts and their sizes in KiB..TiB otherwise.
absl::Status CheckFitsInMemory(absl::string_view what, int64_t bytes);

// HumanBytes returns e.g. "23.4 GiB" for a byte count, for messages.
std::string HumanBytes(int64_t bytes);

}  // namespace loom

#endif  // LOOM_CORE_CHECKED_SIZE_H_
