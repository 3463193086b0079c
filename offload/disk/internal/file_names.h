// File names of a tensor's stripe files. Tensor names may hold any bytes ("dense/kernel:0"
// included); they are escaped, not hashed, so the files stay readable with `ls`: bytes
// outside [A-Za-z0-9._-] become %XX (uppercase hex), as does a leading '.', so no name
// maps to ".", ".." or a hidden file.
//
// File 0 — the commit record, which also holds directory 0's stripes — is
// "<escaped>.0.ldt"; a Write builds it as "<escaped>.0.ldt.tmp-<pid>-<n>" and renames it
// into place. Files k >= 1 carry the id of the Write that made them,
// "<escaped>.<k>.<write id, 16 hex>.ldt", so a new version never overwrites the files
// the current file 0 points at. Distinct tensor names never share a file name: the
// suffixes parse back uniquely from the right.
//
// Example:
//   EscapeTensorName("layers.0/attn.q");        // "layers.0%2Fattn.q"
//   EscapeTensorName(".hidden");                // "%2Ehidden"
//   StripeFileName("w", 0, 0xAB);               // "w.0.ldt"
//   StripeFileName("w", 2, 0xAB);               // "w.2.00000000000000ab.ldt"
//   IsFileOfTensor("w.2.00000000000000ab.ldt", "w", 2);   // true
//   IsFileOfTensor("w.0.ldt.tmp-17-3", "w", 0);           // true (an unfinished Write)
//   EscapeTensorName("");                       // InvalidArgument
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_FILE_NAMES_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_FILE_NAMES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace disk_internal {

// Longest escaped name: leaves room for the suffixes within NAME_MAX (255).
inline constexpr size_t kMaxEscapedNameBytes = 200;

// EscapeTensorName returns the escaped form of `name`; InvalidArgument when `name` is
// empty or its escaped form exceeds kMaxEscapedNameBytes (both lengths in the message).
absl::StatusOr<std::string> EscapeTensorName(absl::string_view name);

// StripeFileName returns the name of file `file_index` of the Write `write_id` (which
// file 0's name does not include).
std::string StripeFileName(absl::string_view escaped, uint32_t file_index, uint64_t write_id);

// TempFileName returns "<final_name>.tmp-<pid>-<sequence>".
std::string TempFileName(absl::string_view final_name, uint64_t sequence);

// IsFileOfTensor returns true when `file`, found in directory `file_index`, belongs to
// the tensor `escaped`: its file 0 or file 0's temporary (file_index 0), or a file
// `file_index` of any Write (file_index >= 1).
bool IsFileOfTensor(absl::string_view file, absl::string_view escaped, uint32_t file_index);

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_FILE_NAMES_H_
