#ifndef LOOM_CORE_SHAPE_H_
#define LOOM_CORE_SHAPE_H_

// Shapes as Loom's tensors spell them: a list of dimensions, row-major.
//
//   ShapeString({4, 3});                     // "[4,3]"   ("[]" for a scalar)
//   NumElements({4, 3});                     // 12        (1 for a scalar)
//   CheckedNumElements({4, -1});             // -1: a negative dimension
//   CheckedNumElements({1 << 40, 1 << 40});  // -1: the product overflows int64

#include <cstdint>
#include <string>

#include "absl/types/span.h"

namespace loom {

// ShapeString formats `shape` as "[d0,d1,...]", for error messages, plans and files.
std::string ShapeString(absl::Span<const int64_t> shape);

// NumElements returns the product of the dimensions of a shape already checked
// (non-negative, no overflow); 1 for a scalar.
int64_t NumElements(absl::Span<const int64_t> shape);

// CheckedNumElements returns the product of the dimensions, or -1 when one is negative
// or the product overflows int64_t; for shapes that come from outside.
int64_t CheckedNumElements(absl::Span<const int64_t> shape);

}  // namespace loom

#endif  // LOOM_CORE_SHAPE_H_
