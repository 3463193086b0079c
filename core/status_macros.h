// Status propagation macros. Debian's Abseil (20220623) predates Abseil's own
// ABSL_RETURN_IF_ERROR / ABSL_ASSIGN_OR_RETURN, so Loom defines its own.
//
// Example:
//   absl::StatusOr<int64_t> ParseSize(absl::string_view s);
//
//   absl::Status Configure(absl::string_view s) {
//     LOOM_ASSIGN_OR_RETURN(int64_t size, ParseSize(s));   // returns the error
//     LOOM_RETURN_IF_ERROR(CheckSize(size));               // returns the error
//     return absl::OkStatus();
//   }
#ifndef LOOM_CORE_STATUS_MACROS_H_
#define LOOM_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

// LOOM_RETURN_IF_ERROR(expr) evaluates `expr` (an absl::Status) once and returns it
// from the enclosing function when it is not OK.
#define LOOM_RETURN_IF_ERROR(expr)                                   \
  do {                                                               \
    ::absl::Status loom_status_macro_status_ = (expr);               \
    if (ABSL_PREDICT_FALSE(!loom_status_macro_status_.ok())) {       \
      return loom_status_macro_status_;                              \
    }                                                                \
  } while (false)

// LOOM_ASSIGN_OR_RETURN(lhs, expr) evaluates `expr` (an absl::StatusOr<T>); on error
// returns its status, otherwise moves the value into `lhs`, which may be a
// declaration (`int64_t n`) or an existing lvalue.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr)                                          \
  LOOM_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(                                      \
      LOOM_STATUS_MACROS_CONCAT_(loom_statusor_, __LINE__), lhs, expr)

#define LOOM_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                              \
  if (ABSL_PREDICT_FALSE(!statusor.ok())) {                            \
    return std::move(statusor).status();                               \
  }                                                                    \
  lhs = std::move(statusor).value()

#define LOOM_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define LOOM_STATUS_MACROS_CONCAT_(x, y) LOOM_STATUS_MACROS_CONCAT_INNER_(x, y)

#endif  // LOOM_CORE_STATUS_MACROS_H_
