// DType: the element types Loom moves and reduces, with their sizes and names.
//
// Example:
//   DTypeSize(DType::kBF16);              // 2
//   DTypeName(DType::kF32);               // "f32"
//   ParseDType("bfloat16");               // DType::kBF16 (aliases accepted)
//   ParseDType("f33");                    // InvalidArgument: unknown dtype "f33" ...
//   DTypeOf<int64_t>();                   // DType::kI64
//   VisitDType(DType::kBF16, [](auto zero) {
//     using T = decltype(zero);           // T is BFloat16
//   });
#ifndef LOOM_CORE_DTYPE_H_
#define LOOM_CORE_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {

enum class DType : uint8_t {
  kF32,
  kF64,
  kF16,
  kBF16,
  kI8,
  kU8,
  kI32,
  kI64,
};

// AllDTypes returns every DType, in declaration order (for parametrized tests).
absl::Span<const DType> AllDTypes();

// DTypeSize returns the size of one element in bytes (0 for an invalid enumerator).
// Inline: views, slices and kernels ask for it several times per collective call,
// and an out-of-line call cost more than the switch itself.
constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

// DTypeName returns the canonical short name: "f32", "f64", "f16", "bf16", "i8",
// "u8", "i32", "i64".
absl::string_view DTypeName(DType dtype);

// IsFloatingPoint is true for f32, f64, f16 and bf16.
bool IsFloatingPoint(DType dtype);

// ParseDType accepts the canonical names and the common aliases ("float32",
// "float", "half", "float16", "bfloat16", "int8", "uint8", "int32", "int64",
// "double", "float64"), case-insensitively. Returns InvalidArgument naming the text
// and the accepted names otherwise.
absl::StatusOr<DType> ParseDType(absl::string_view name);

std::ostream& operator<<(std::ostream& os, DType dtype);

// DTypeOf<T>() maps a C++ element type to its DType at compile time.
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() { return DType::kF32; }
template <>
constexpr DType DTypeOf<double>() { return DType::kF64; }
template <>
constexpr DType DTypeOf<Float16>() { return DType::kF16; }
template <>
constexpr DType DTypeOf<BFloat16>() { return DType::kBF16; }
template <>
constexpr DType DTypeOf<int8_t>() { return DType::kI8; }
template <>
constexpr DType DTypeOf<uint8_t>() { return DType::kU8; }
template <>
constexpr DType DTypeOf<int32_t>() { return DType::kI32; }
template <>
constexpr DType DTypeOf<int64_t>() { return DType::kI64; }

// VisitDType calls fn(T{}) with a value of the C++ element type T of `dtype`, so
// that code written once as a template runs for a run-time dtype; returns what fn
// returns (the same type for every T).
template <typename Fn>
decltype(auto) VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(float{});
    case DType::kF64: return fn(double{});
    case DType::kF16: return fn(Float16{});
    case DType::kBF16: return fn(BFloat16{});
    case DType::kI8: return fn(int8_t{});
    case DType::kU8: return fn(uint8_t{});
    case DType::kI32: return fn(int32_t{});
    case DType::kI64: return fn(int64_t{});
  }
  return fn(uint8_t{});  // Unreachable for valid enumerators.
}

}  // namespace loom

#endif  // LOOM_CORE_DTYPE_H_
