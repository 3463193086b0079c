// Transport::ReserveTags and TagReservation (see "Tag ranges" in transport.h).

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"

namespace loom {
namespace transport_internal {

// One endpoint's live reservations, shared with them so that one may outlive it.
class TagTable : public std::enable_shared_from_this<TagTable> {
 public:
  absl::StatusOr<TagReservation> Reserve(Tag first, Tag last, absl::string_view user) {
    if (first > last) {
      return absl::InvalidArgumentError(absl::StrCat(user, ": tag range [", first, ", ", last,
                                                     "] is empty (first > last)"));
    }
    if (last >= kCommunicatorTagsBegin) {
      return absl::InvalidArgumentError(
          absl::StrCat(user, ": tags [", first, ", ", last, "] reach ", kCommunicatorTagsBegin,
                       " (2^40), where the Communicators' tags begin"));
    }
    MutexLock lock(&mu_);
    // The live range starting at or before `last` with the largest start is the only
    // one that can overlap, since live ranges are disjoint.
    auto it = ranges_.upper_bound(last);
    if (it != ranges_.begin()) {
      --it;
      if (it->second.last >= first) {
        return absl::AlreadyExistsError(absl::StrCat(
            user, ": tags [", first, ", ", last, "] overlap [", it->first, ", ",
            it->second.last, "], which ", it->second.user, " holds on this endpoint"));
      }
    }
    ranges_.emplace(first, Range{last, std::string(user)});
    return TagReservation(shared_from_this(), first, last);
  }

  void Release(Tag first) {
    MutexLock lock(&mu_);
    ranges_.erase(first);
  }

 private:
  struct Range {
    Tag last;
    std::string user;
  };
  Mutex mu_;
  std::map<Tag, Range> ranges_ ABSL_GUARDED_BY(mu_);  // by first tag; disjoint
};

}  // namespace transport_internal

TagReservation::TagReservation(TagReservation&& other) noexcept
    : table_(std::move(other.table_)), first_(other.first_), last_(other.last_) {}

TagReservation& TagReservation::operator=(TagReservation&& other) noexcept {
  if (this != &other) {
    Release();
    table_ = std::move(other.table_);
    first_ = other.first_;
    last_ = other.last_;
  }
  return *this;
}

TagReservation::~TagReservation() { Release(); }

void TagReservation::Release() {
  if (table_ != nullptr) table_->Release(first_);
  table_.reset();
}

Transport::Transport() : tag_table_(std::make_shared<transport_internal::TagTable>()) {}

Transport::~Transport() = default;

absl::StatusOr<TagReservation> Transport::ReserveTags(Tag first, Tag last,
                                                      absl::string_view user) {
  return tag_table_->Reserve(first, last, user);
}

}  // namespace loom
