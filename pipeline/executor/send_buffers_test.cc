#include "pipeline/executor/send_buffers.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

std::vector<float> Distinct(size_t n, float base) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = base + static_cast<float>(i) * 0.25f;
  return values;
}

// inproc's memory is ordinary: nothing is staged, the caller sends from its tensor.
TEST(SendBuffersTest, OrdinaryMemoryIsNotStaged) {
  std::shared_ptr<InprocGroup> group = *InprocGroup::Create(1);
  std::unique_ptr<Transport> endpoint = *group->Endpoint(0);
  SendBuffers buffers;
  const std::vector<float> values = Distinct(5000, 1);
  LOOM_ASSERT_OK_AND_ASSIGN(CommBuffer staged, buffers.Stage(*endpoint, values));
  EXPECT_TRUE(staged.empty());
  LOOM_ASSERT_OK_AND_ASSIGN(staged, buffers.Stage(*endpoint, values));
  EXPECT_TRUE(staged.empty());
  EXPECT_EQ(buffers.staged(), 0);
  // The one probe the verdict took.
  EXPECT_EQ(buffers.allocated_bytes(), static_cast<int64_t>(values.size() * sizeof(float)));
}

// A Status naming what differs, for the checks that run in the shm child.
absl::Status Expect(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError(what);
}

// shm's memory is zero-copy: Stage copies the values into a SharedBuffer, a returned
// buffer is reused for a payload that fits, a larger payload gets a new one, empty
// payloads are not staged, and at most kMaxFree buffers are kept.
TEST(SendBuffersTest, ShmStagesIntoReusedZeroCopyBuffers) {
  ShmHarness harness;
  const std::vector<absl::Status> results = harness.Run(1, [](Transport& t) -> absl::Status {
    SendBuffers buffers;
    const std::vector<float> values = Distinct(3000, 7);
    LOOM_ASSIGN_OR_RETURN(CommBuffer staged, buffers.Stage(t, values));
    LOOM_RETURN_IF_ERROR(Expect(!staged.empty(), "shm memory was not staged"));
    LOOM_RETURN_IF_ERROR(Expect(staged.zero_copy(), "the staged buffer is not zero-copy"));
    const absl::Span<const float> copy = staged.As<float>().first(values.size());
    LOOM_RETURN_IF_ERROR(Expect(std::vector<float>(copy.begin(), copy.end()) == values,
                                "the staged copy differs from the values"));
    const std::byte* first = staged.data();
    buffers.Return(std::move(staged));

    // A smaller payload reuses the returned buffer.
    const std::vector<float> smaller = Distinct(1000, -3);
    LOOM_ASSIGN_OR_RETURN(staged, buffers.Stage(t, smaller));
    LOOM_RETURN_IF_ERROR(Expect(!staged.empty() && staged.data() == first,
                                "a returned buffer was not reused"));
    LOOM_RETURN_IF_ERROR(Expect(staged.As<float>()[999] == smaller[999], "stale contents"));
    // A larger one, while the first is out, gets a new buffer.
    const std::vector<float> larger = Distinct(9000, 2);
    LOOM_ASSIGN_OR_RETURN(CommBuffer second, buffers.Stage(t, larger));
    LOOM_RETURN_IF_ERROR(Expect(!second.empty() && second.data() != first &&
                                    second.size() >= larger.size() * sizeof(float),
                                "a larger payload did not get its own buffer"));
    LOOM_RETURN_IF_ERROR(Expect(buffers.staged() == 3, absl::StrCat("staged ", buffers.staged())));
    const int64_t allocated = buffers.allocated_bytes();
    LOOM_RETURN_IF_ERROR(Expect(allocated == static_cast<int64_t>((3000 + 9000) * sizeof(float)),
                                absl::StrCat("allocated ", allocated, " bytes")));

    LOOM_ASSIGN_OR_RETURN(CommBuffer empty, buffers.Stage(t, {}));
    LOOM_RETURN_IF_ERROR(Expect(empty.empty(), "an empty payload was staged"));

    // More buffers out than kMaxFree, all returned: the next kMaxFree + 1 stagings
    // of the smallest size reuse at most kMaxFree of them.
    std::vector<CommBuffer> out;
    for (size_t i = 0; i < SendBuffers::kMaxFree + 4; ++i) {
      LOOM_ASSIGN_OR_RETURN(CommBuffer b, buffers.Stage(t, smaller));
      out.push_back(std::move(b));
    }
    for (CommBuffer& b : out) buffers.Return(std::move(b));
    buffers.Return(std::move(staged));
    buffers.Return(std::move(second));
    const int64_t before = buffers.allocated_bytes();
    for (size_t i = 0; i < SendBuffers::kMaxFree; ++i) {
      LOOM_ASSIGN_OR_RETURN(CommBuffer b, buffers.Stage(t, smaller));
      out[i] = std::move(b);
    }
    LOOM_RETURN_IF_ERROR(Expect(buffers.allocated_bytes() == before,
                                "kMaxFree free buffers were not all kept"));
    LOOM_ASSIGN_OR_RETURN(CommBuffer extra, buffers.Stage(t, smaller));
    return Expect(buffers.allocated_bytes() > before,
                  "more than kMaxFree buffers were kept free");
  });
  ASSERT_EQ(results.size(), 1u);
  EXPECT_THAT(results[0], IsOk());
  EXPECT_TRUE(harness.last_leftovers().empty());
}

}  // namespace
}  // namespace loom
