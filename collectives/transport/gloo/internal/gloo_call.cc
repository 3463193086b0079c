#include "collectives/transport/gloo/internal/gloo_call.h"

#include <gloo/common/error.h>

#include <exception>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace gloo_internal {
namespace {

// gloo words its timeouts "Timed out waiting ..." (waits) and "Wait timeout ..."
// (stores); it has no exception type of its own for them.
bool SaysTimeout(const std::string& text) {
  const std::string lower = absl::AsciiStrToLower(text);
  return absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout");
}

}  // namespace

absl::Status GlooExceptionStatus(std::exception_ptr error, absl::string_view call) {
  try {
    std::rethrow_exception(error);
  } catch (const gloo::IoException& e) {
    const std::string text = e.what();
    if (SaysTimeout(text)) {
      return absl::DeadlineExceededError(absl::StrCat("gloo: ", call, " timed out: ", text));
    }
    return absl::UnavailableError(absl::StrCat("gloo: ", call, " failed: ", text));
  } catch (const gloo::Exception& e) {
    const std::string text = e.what();
    if (SaysTimeout(text)) {
      return absl::DeadlineExceededError(absl::StrCat("gloo: ", call, " timed out: ", text));
    }
    return absl::InternalError(absl::StrCat("gloo: ", call, " failed: ", text));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo: ", call, " failed: ", e.what()));
  } catch (...) {
    return absl::InternalError(absl::StrCat("gloo: ", call, " threw a non-standard exception"));
  }
  return absl::InternalError(absl::StrCat("gloo: ", call, " threw nothing"));
}

}  // namespace gloo_internal
}  // namespace loom
