// ParseByteSize: byte counts as people write them in flags and config strings, in
// powers of 1024: "4096", "64K", "1.5G", "2t" (suffixes K, M, G, T, either case).
// One parser for every tool and config, exact for whole numbers of any size a
// size_t holds (no detour through double).
//
// Example:
//   ParseByteSize("64K");    // 65536
//   ParseByteSize("1.5G");   // 1610612736
//   ParseByteSize("0.3K");   // 307 (307.2 rounded to the nearest byte)
//   ParseByteSize("lots");   // InvalidArgument: "'lots' is not a byte size such as 4096, 64K, 1.5G"
#ifndef LOOM_CORE_BYTE_SIZE_H_
#define LOOM_CORE_BYTE_SIZE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// ParseByteSize returns the byte count `text` spells (surrounding spaces ignored);
// a fraction is allowed with a suffix and rounds to the nearest byte.
// InvalidArgument quoting `text` for anything else: no digits, a sign, a fraction
// without a suffix, trailing characters, or a count past SIZE_MAX.
absl::StatusOr<size_t> ParseByteSize(absl::string_view text);

}  // namespace loom

#endif  // LOOM_CORE_BYTE_SIZE_H_
