#include "core/byte_size.h"

#include <cstdint>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status NotASize(absl::string_view text) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", text, "' is not a byte size such as 4096, 64K, 1.5G"));
}

}  // namespace

absl::StatusOr<size_t> ParseByteSize(absl::string_view original) {
  absl::string_view text = absl::StripAsciiWhitespace(original);
  int shift = 0;
  if (!text.empty()) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  // Whole part, exactly, with overflow checked digit by digit.
  constexpr uint64_t kMax = std::numeric_limits<size_t>::max();
  uint64_t whole = 0;
  size_t i = 0;
  for (; i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (whole > (kMax - digit) / 10) return NotASize(original);
    whole = whole * 10 + digit;
  }
  const bool has_whole = i > 0;
  // Fraction: up to 18 digits kept (more cannot change a rounding at 2^40 scale).
  uint64_t fraction = 0, denominator = 1;
  bool has_fraction = false;
  if (i < text.size() && text[i] == '.') {
    if (shift == 0) return NotASize(original);
    for (++i; i < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[i])); ++i) {
      has_fraction = true;
      if (denominator <= uint64_t{100'000'000'000'000'000}) {
        fraction = fraction * 10 + static_cast<uint64_t>(text[i] - '0');
        denominator *= 10;
      }
    }
  }
  if (i != text.size() || (!has_whole && !has_fraction)) return NotASize(original);
  if (whole > (kMax >> shift)) return NotASize(original);
  uint64_t bytes = whole << shift;
  if (fraction != 0) {
    // fraction / denominator * 2^shift, rounded: computed in 128 bits to stay exact.
    const unsigned __int128 scaled =
        (static_cast<unsigned __int128>(fraction) << shift) + denominator / 2;
    const uint64_t extra = static_cast<uint64_t>(scaled / denominator);
    if (bytes > kMax - extra) return NotASize(original);
    bytes += extra;
  }
  return static_cast<size_t>(bytes);
}

}  // namespace loom
