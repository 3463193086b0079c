#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/shm/shm_transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Sets the launcher's variables for one test and restores a clean slate after it.
class EnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* variable : {"LOOM_JOB_ID", "LOOM_RANK", "LOOM_WORLD_SIZE"}) unsetenv(variable);
  }
  static void Set(const char* job_id, const char* rank, const char* world_size) {
    if (job_id != nullptr) setenv("LOOM_JOB_ID", job_id, 1);
    if (rank != nullptr) setenv("LOOM_RANK", rank, 1);
    if (world_size != nullptr) setenv("LOOM_WORLD_SIZE", world_size, 1);
  }
};

TEST_F(EnvironmentTest, ReadsTheLaunchersVariables) {
  Set("train-42", "3", "4");
  setenv("LOOM_LOCAL_RANK", "3", 1);  // Also set by the launcher; not needed here.
  LOOM_ASSERT_OK_AND_ASSIGN(const ShmOptions options, ShmOptionsFromEnvironment());
  unsetenv("LOOM_LOCAL_RANK");
  EXPECT_EQ(options.job_id, "train-42");
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.size, 4);
  EXPECT_EQ(options.copy_mode, ShmOptions::CopyMode::kAuto);
  EXPECT_EQ(options.connect_timeout, absl::Seconds(30));
}

TEST_F(EnvironmentTest, NamesTheMissingVariable) {
  EXPECT_THAT(ShmOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOOM_JOB_ID is not set")));
  Set("job", nullptr, "2");
  EXPECT_THAT(ShmOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOOM_RANK is not set")));
  Clear();
  Set("job", "0", nullptr);
  EXPECT_THAT(ShmOptionsFromEnvironment(), StatusIs(absl::StatusCode::kInvalidArgument,
                                                    HasSubstr("LOOM_WORLD_SIZE is not set")));
}

TEST_F(EnvironmentTest, NamesTheMalformedValue) {
  Set("job", "one", "2");
  EXPECT_THAT(
      ShmOptionsFromEnvironment(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOOM_RANK='one' is not an integer")));
  Set("job", "2", "2");
  EXPECT_THAT(ShmOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LOOM_RANK=2 is outside [0, LOOM_WORLD_SIZE=2)")));
  Set("job", "0", "0");
  EXPECT_THAT(ShmOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LOOM_WORLD_SIZE=0 is not in [1, 256]")));
  Set("job/../etc", "0", "1");
  EXPECT_THAT(ShmOptionsFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LOOM_JOB_ID='job/../etc' must match [A-Za-z0-9_.-]{1,96}")));
}

ShmOptions Valid() {
  ShmOptions options;
  options.job_id = "options-test";
  options.rank = 0;
  options.size = 1;
  return options;
}

TEST(ConnectShmTransportTest, RejectsBadOptionsBeforeTouchingSharedMemory) {
  ShmOptions options = Valid();
  for (const std::string& bad : std::vector<std::string>{"", "a b", "a/b", std::string(97, 'x')}) {
    options.job_id = bad;
    EXPECT_THAT(
        ConnectShmTransport(options),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job_id='" + bad + "' must match")));
  }
  options = Valid();
  options.rank = 2;
  options.size = 2;
  EXPECT_THAT(ConnectShmTransport(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("rank=2 is outside [0, size=2)")));
  options.rank = -1;
  EXPECT_THAT(ConnectShmTransport(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank=-1")));
  options = Valid();
  options.size = 257;
  EXPECT_THAT(ConnectShmTransport(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("size=257 is not in [1, 256]")));
  options = Valid();
  options.spin_iterations = -5;
  EXPECT_THAT(ConnectShmTransport(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("spin_iterations=-5 is negative")));
  options = Valid();
  options.host_ranks = -2;
  EXPECT_THAT(ConnectShmTransport(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("host_ranks=-2 is negative")));
  options = Valid();
  options.eager_bytes = 1 << 20;
  EXPECT_THAT(ConnectShmTransport(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("eager_bytes=1048576 is not in [0, 262144]")));
  options = Valid();
  options.staging_bytes = 4096;
  EXPECT_THAT(ConnectShmTransport(options), StatusIs(absl::StatusCode::kInvalidArgument,
                                                     HasSubstr("staging_bytes=4096 is not in")));
  options = Valid();
  options.connect_timeout = absl::ZeroDuration();
  EXPECT_THAT(
      ConnectShmTransport(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("connect_timeout=0 is not positive")));
  options = Valid();
  options.heartbeat_timeout = absl::Milliseconds(50);
  EXPECT_THAT(ConnectShmTransport(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("heartbeat_timeout 50ms is below 200ms")));
  options = Valid();
  options.world_rank = -2;
  EXPECT_THAT(ConnectShmTransport(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world_rank=-2 is below -1")));
}

TEST(ShmSegmentsTest, PrefixFollowsTheConvention) {
  EXPECT_EQ(ShmSegmentPrefix("train-42"), "/loom.train-42.");
  EXPECT_THAT(RemoveShmSegments("../x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job_id='../x' must match")));
  LOOM_EXPECT_OK(RemoveShmSegments("no-such-job-anywhere"));
}

// A world of one needs no other process: connect, self-send, close.
TEST(ConnectShmTransportTest, WorldOfOneSendsToItself) {
  ShmOptions options = Valid();
  options.job_id = "options-test-world-of-one";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> transport, ConnectShmTransport(options));
  EXPECT_EQ(transport->name(), "shm");
  EXPECT_EQ(transport->rank(), 0);
  EXPECT_EQ(transport->size(), 1);
  std::vector<int> out(100000), in(100000);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>(i * 7);
  LOOM_ASSERT_OK_AND_ASSIGN(Request s, transport->Send(0, 5, AsBytes(out)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, transport->Recv(0, 5, AsWritableBytes(in)));
  LOOM_EXPECT_OK(transport->Wait({s, r}, absl::Now() + absl::Seconds(10)));
  EXPECT_EQ(in, out);
  transport.reset();
  EXPECT_EQ(access("/dev/shm/loom.options-test-world-of-one.rank0", F_OK), -1);
}

}  // namespace
}  // namespace loom
