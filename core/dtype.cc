#include "core/dtype.h"

#include <array>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

constexpr std::array<DType, 8> kAllDTypes = {DType::kF32, DType::kF64, DType::kF16,
                                              DType::kBF16, DType::kI8, DType::kU8,
                                              DType::kI32, DType::kI64};

struct Alias {
  absl::string_view name;
  DType dtype;
};

constexpr Alias kAliases[] = {
    {"f32", DType::kF32},     {"float32", DType::kF32},  {"float", DType::kF32},
    {"f64", DType::kF64},     {"float64", DType::kF64},  {"double", DType::kF64},
    {"f16", DType::kF16},     {"float16", DType::kF16},  {"half", DType::kF16},
    {"fp16", DType::kF16},    {"bf16", DType::kBF16},    {"bfloat16", DType::kBF16},
    {"i8", DType::kI8},       {"int8", DType::kI8},      {"u8", DType::kU8},
    {"uint8", DType::kU8},    {"i32", DType::kI32},      {"int32", DType::kI32},
    {"i64", DType::kI64},     {"int64", DType::kI64},    {"fp32", DType::kF32},
    {"fp64", DType::kF64},
};

}  // namespace

absl::Span<const DType> AllDTypes() { return kAllDTypes; }

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "invalid";
}

bool IsFloatingPoint(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF64 || dtype == DType::kF16 ||
         dtype == DType::kBF16;
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const Alias& alias : kAliases) {
    if (alias.name == lower) return alias.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown dtype \"", name, "\"; expected one of f32, f64, f16, bf16, i8, u8, i32, i64"));
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << DTypeName(dtype); }

}  // namespace loom
