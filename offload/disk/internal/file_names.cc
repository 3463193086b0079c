#include "offload/disk/internal/file_names.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace loom {
namespace disk_internal {
namespace {

bool KeepsAsIs(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool AllOf(absl::string_view s, bool (*pred)(char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); }

}  // namespace

absl::StatusOr<std::string> EscapeTensorName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("tensor name is empty");
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string escaped;
  escaped.reserve(name.size());
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (KeepsAsIs(c) && !(i == 0 && c == '.')) {
      escaped.push_back(c);
    } else {
      const unsigned char u = static_cast<unsigned char>(c);
      escaped.push_back('%');
      escaped.push_back(kHex[u >> 4]);
      escaped.push_back(kHex[u & 0xF]);
    }
  }
  if (escaped.size() > kMaxEscapedNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor name of ", name.size(), " bytes escapes to ", escaped.size(),
                     " bytes, more than the limit of ", kMaxEscapedNameBytes, ": '",
                     name.substr(0, 40), "...'"));
  }
  return escaped;
}

std::string StripeFileName(absl::string_view escaped, uint32_t file_index, uint64_t write_id) {
  if (file_index == 0) return absl::StrCat(escaped, ".0.ldt");
  return absl::StrFormat("%s.%d.%016x.ldt", escaped, file_index, write_id);
}

std::string TempFileName(absl::string_view final_name, uint64_t sequence) {
  return absl::StrCat(final_name, ".tmp-", ::getpid(), "-", sequence);
}

bool IsFileOfTensor(absl::string_view file, absl::string_view escaped, uint32_t file_index) {
  const std::string prefix = absl::StrCat(escaped, ".", file_index, ".");
  if (!absl::ConsumePrefix(&file, prefix)) return false;
  if (file_index == 0) {
    // "ldt" or "ldt.tmp-<pid>-<n>".
    if (file == "ldt") return true;
    if (!absl::ConsumePrefix(&file, "ldt.tmp-")) return false;
    const size_t dash = file.find('-');
    return dash != absl::string_view::npos && AllOf(file.substr(0, dash), IsDigit) &&
           AllOf(file.substr(dash + 1), IsDigit);
  }
  // "<16 hex>.ldt".
  return file.size() == 20 && AllOf(file.substr(0, 16), IsLowerHex) && file.substr(16) == ".ldt";
}

}  // namespace disk_internal
}  // namespace loom
