// GoogleMock matchers for absl::Status and absl::StatusOr<T> (testonly).
//
// Example:
//   EXPECT_THAT(ParseDType("f33"),
//               StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f33")));
//   EXPECT_THAT(ParseDType("bf16"), IsOkAndHolds(DType::kBF16));
//   EXPECT_THAT(mesh.Validate(), IsOk());
//   LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create(...));
#ifndef LOOM_CORE_STATUS_MATCHERS_H_
#define LOOM_CORE_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace status_matchers_internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

}  // namespace status_matchers_internal

// StatusIs(code, message_matcher) matches a Status or StatusOr whose code equals
// `code` and whose message matches `message_matcher` (e.g. HasSubstr("dp=2")).
MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = status_matchers_internal::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(status.message()),
                                       result_listener);
}

// IsOk() matches an OK Status or a StatusOr holding a value.
MATCHER(IsOk, "is OK") {
  const absl::Status& status = status_matchers_internal::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.ok();
}

// IsOkAndHolds(m) matches a StatusOr<T> holding a value that matches `m`.
MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "whose status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace loom

#define LOOM_EXPECT_OK(expr) EXPECT_THAT((expr), ::loom::IsOk())
#define LOOM_ASSERT_OK(expr) ASSERT_THAT((expr), ::loom::IsOk())

// LOOM_ASSERT_OK_AND_ASSIGN(lhs, expr) asserts that `expr` (a StatusOr) is OK and
// moves its value into `lhs`.
#define LOOM_ASSERT_OK_AND_ASSIGN(lhs, expr)                                       \
  LOOM_STATUS_MATCHERS_ASSIGN_IMPL_(                                               \
      LOOM_STATUS_MATCHERS_CONCAT_(loom_statusor_, __LINE__), lhs, expr)
#define LOOM_STATUS_MATCHERS_ASSIGN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                      \
  ASSERT_THAT(statusor.status(), ::loom::IsOk());              \
  lhs = std::move(statusor).value()
#define LOOM_STATUS_MATCHERS_CONCAT_INNER_(x, y) x##y
#define LOOM_STATUS_MATCHERS_CONCAT_(x, y) LOOM_STATUS_MATCHERS_CONCAT_INNER_(x, y)

#endif  // LOOM_CORE_STATUS_MATCHERS_H_
