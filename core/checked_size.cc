#include "core/checked_size.h"

#include <unistd.h>

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace loom {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string Spell(absl::Span<const SizeTerm> terms, absl::string_view op) {
  return absl::StrJoin(terms, op, [](std::string* out, const SizeTerm& term) {
    absl::StrAppend(out, term.name, " ", term.value);
  });
}

absl::Status CheckNonNegative(absl::Span<const SizeTerm> terms, absl::string_view op) {
  for (const SizeTerm& term : terms) {
    if (term.value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(term.name, " ", term.value, " is negative (in ", Spell(terms, op), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CheckedMul(absl::Span<const SizeTerm> terms) {
  if (absl::Status s = CheckNonNegative(terms, " x "); !s.ok()) return s;
  int64_t product = 1;
  for (const SizeTerm& term : terms) {
    if (term.value == 0) return 0;  // zero times anything, even what overflows alone
  }
  for (const SizeTerm& term : terms) {
    if (__builtin_mul_overflow(product, term.value, &product)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Spell(terms, " x "), " overflows int64 (", kMax, ")"));
    }
  }
  return product;
}

absl::StatusOr<int64_t> CheckedMul(std::initializer_list<SizeTerm> terms) {
  return CheckedMul(absl::MakeConstSpan(terms.begin(), terms.size()));
}

absl::StatusOr<int64_t> CheckedAdd(absl::Span<const SizeTerm> terms) {
  if (absl::Status s = CheckNonNegative(terms, " + "); !s.ok()) return s;
  int64_t sum = 0;
  for (const SizeTerm& term : terms) {
    if (__builtin_add_overflow(sum, term.value, &sum)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Spell(terms, " + "), " overflows int64 (", kMax, ")"));
    }
  }
  return sum;
}

absl::StatusOr<int64_t> CheckedAdd(std::initializer_list<SizeTerm> terms) {
  return CheckedAdd(absl::MakeConstSpan(terms.begin(), terms.size()));
}

absl::StatusOr<int64_t> SizeFromUnsigned(absl::string_view name, size_t value) {
  if (value > static_cast<uint64_t>(kMax)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", value, " is larger than int64 allows (", kMax, ")"));
  }
  return static_cast<int64_t>(value);
}

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  int64_t bytes = 0;
  if (pages <= 0 || page_size <= 0 ||
      __builtin_mul_overflow(static_cast<int64_t>(pages), static_cast<int64_t>(page_size),
                             &bytes)) {
    return kMax;
  }
  return bytes;
}

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " bytes");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

absl::Status CheckFitsInMemory(absl::string_view what, int64_t bytes) {
  const int64_t physical = PhysicalMemoryBytes();
  if (bytes <= physical) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " need ", bytes, " bytes (", HumanBytes(bytes), "); this machine has ",
                   physical, " bytes (", HumanBytes(physical), ") of physical memory"));
}

}  // namespace loom
