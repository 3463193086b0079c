#include "zero3/internal/agreement.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/buffer_view.h"
#include "core/status_macros.h"

namespace loom {
namespace zero3_internal {
namespace {

constexpr int kHeaderWords = 6;

const char* PassName(int64_t pass) {
  switch (pass) {
    case 1: return "forward";
    case 2: return "backward";
    case 3: return "gradients";
    case 4: return "regather";
  }
  return "unknown";
}

bool Used(const SyncPoint& point, int64_t bucket) {
  return (point.used[static_cast<size_t>(bucket / 64)] >> (bucket % 64)) & 1;
}

}  // namespace

int64_t UsedWords(int64_t buckets) { return (buckets + 63) / 64; }

std::vector<int64_t> SyncPoint::Encode() const {
  std::vector<int64_t> words = {steps, kind, pass, passes_since_step, previous_pass,
                                compare_use ? 1 : 0};
  for (const uint64_t w : used) words.push_back(static_cast<int64_t>(w));
  return words;
}

SyncPoint SyncPoint::Decode(absl::Span<const int64_t> words) {
  SyncPoint point;
  point.steps = words[0];
  point.kind = words[1];
  point.pass = words[2];
  point.passes_since_step = words[3];
  point.previous_pass = words[4];
  point.compare_use = words[5] != 0;
  for (size_t i = kHeaderWords; i < words.size(); ++i) {
    point.used.push_back(static_cast<uint64_t>(words[i]));
  }
  return point;
}

std::string SyncPoint::Describe() const {
  const std::string after = absl::StrCat("after ", steps, " steps, ");
  switch (kind) {
    case kPass:
      return absl::StrCat(after, "starting a ", PassName(pass), " pass with ", passes_since_step,
                          " backward passes since the last step");
    case kReduce:
      return absl::StrCat(after, "reducing the gradients of ", passes_since_step,
                          " backward passes");
    case kGatherAll:
      return absl::StrCat(after, "gathering the whole model");
  }
  return absl::StrCat(after, "at an unknown point ", kind);
}

absl::Status CheckAgreement(Communicator& dp, const SyncPoint& mine,
                            const std::vector<std::string>& bucket_names) {
  const std::vector<int64_t> words = mine.Encode();
  const size_t n = words.size();
  // An all-to-all of the point repeated: every rank receives every rank's.
  std::vector<int64_t> repeated;
  for (int r = 0; r < dp.size(); ++r) repeated.insert(repeated.end(), words.begin(), words.end());
  std::vector<int64_t> all(repeated.size());
  LOOM_RETURN_IF_ERROR(dp.AllToAll(ConstBufferView::Of(absl::MakeConstSpan(repeated)),
                                   BufferView::Of(absl::MakeSpan(all))));
  const absl::Span<const int64_t> view = absl::MakeConstSpan(all);
  const std::vector<int64_t> first(view.begin(), view.begin() + static_cast<ptrdiff_t>(n));
  for (int r = 1; r < dp.size(); ++r) {
    const absl::Span<const int64_t> theirs = view.subspan(static_cast<size_t>(r) * n, n);
    const SyncPoint a = SyncPoint::Decode(first), b = SyncPoint::Decode(theirs);
    const bool same_point = a.steps == b.steps && a.kind == b.kind && a.pass == b.pass &&
                            a.passes_since_step == b.passes_since_step &&
                            a.previous_pass == b.previous_pass;
    if (!same_point) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the data-parallel ranks disagree: rank 0 is ", a.Describe(), "; rank ", r, " is ",
          b.Describe(), " (a rank ran a different number of microbatches or passes)"));
    }
    if (!a.compare_use || !b.compare_use || a.used == b.used) continue;
    for (int64_t bucket = 0; bucket < static_cast<int64_t>(a.used.size()) * 64; ++bucket) {
      if (Used(a, bucket) == Used(b, bucket)) continue;
      const std::string name = bucket < static_cast<int64_t>(bucket_names.size())
                                   ? bucket_names[static_cast<size_t>(bucket)]
                                   : std::string("?");
      return absl::FailedPreconditionError(absl::StrCat(
          "the data-parallel ranks used different parameters in the ", PassName(a.previous_pass),
          " pass before this point (", a.Describe(), "): bucket ", bucket, " (", name,
          ") was used by rank ", Used(a, bucket) ? 0 : r, " and skipped by rank ",
          Used(a, bucket) ? r : 0));
    }
  }
  return absl::OkStatus();
}

}  // namespace zero3_internal
}  // namespace loom
