// The stamp mismatch error of transport.h: a FailedPrecondition with the mismatch
// attached as a payload, so a caller can name both calls without parsing text.
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace {

constexpr char kPayloadUrl[] = "type.loom/transport.StampMismatch";

std::string Words(const Stamp& stamp) {
  return absl::StrCat("scope ", absl::Hex(stamp.scope), " [", absl::Hex(stamp.words[0]), " ",
                      absl::Hex(stamp.words[1]), "]");
}

}  // namespace

absl::Status StampMismatchError(const std::string& backend, const StampMismatch& mismatch) {
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      backend, ": mismatched calls: rank ", mismatch.sender, " sent a message stamped ",
      Words(mismatch.sent), " (tag ", mismatch.tag, ") to rank ", mismatch.receiver,
      ", whose receive is stamped ", Words(mismatch.expected)));
  std::string bytes(sizeof(StampMismatch), '\0');
  std::memcpy(bytes.data(), &mismatch, sizeof(mismatch));
  status.SetPayload(kPayloadUrl, absl::Cord(std::move(bytes)));
  return status;
}

std::optional<StampMismatch> StampMismatchOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return std::nullopt;
  const auto payload = status.GetPayload(kPayloadUrl);
  if (!payload.has_value() || payload->size() != sizeof(StampMismatch)) return std::nullopt;
  const std::string bytes(*payload);
  StampMismatch mismatch;
  std::memcpy(&mismatch, bytes.data(), sizeof(mismatch));
  return mismatch;
}

}  // namespace loom
