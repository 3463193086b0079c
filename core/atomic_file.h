// WriteFileAtomically: replace a file's contents so that a reader, or the file after
// a crash or power loss, sees either the old contents or the new, never a mix or a
// truncated file. For small files written whole: metrics rewritten on resume, plots,
// checkpoint manifests.
//
// Example:
//   LOOM_RETURN_IF_ERROR(WriteFileAtomically("/runs/7/loss.svg", svg));
//   WriteFileAtomically("/no/such/dir/loss.svg", svg)
//   // NotFound: "WriteFileAtomically /no/such/dir/loss.svg:
//   //   open(/no/such/dir/loss.svg.tmp.4242.0): No such file or directory"
#ifndef LOOM_CORE_ATOMIC_FILE_H_
#define LOOM_CORE_ATOMIC_FILE_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom {

// WriteFileAtomically writes `contents` to a temporary file beside `path` (same
// directory, so the rename cannot cross file systems), fsyncs it, renames it over
// `path` and fsyncs the directory so that the rename itself is durable. The new file
// has mode 0644 less the umask. On error `path` is as it was and the temporary file
// is removed; the Status (from errno) names `path`, the failing call and its file.
// `before_rename` (tests only: a crash or a failure between the durable write and
// the rename) is called with the temporary file's name; a non-OK return is the
// write's error.
absl::Status WriteFileAtomically(
    const std::string& path, absl::string_view contents,
    const std::function<absl::Status(absl::string_view temp_path)>& before_rename = nullptr);

}  // namespace loom

#endif  // LOOM_CORE_ATOMIC_FILE_H_
