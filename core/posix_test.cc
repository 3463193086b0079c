#include "core/posix.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ErrnoToStatusTest, MapsTheCodeAndNamesTheCallAndTheError) {
  EXPECT_THAT(ErrnoToStatus(ENOSPC, "write(/x)"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("write(/x): No space left on device")));
  EXPECT_THAT(ErrnoToStatus(ENOENT, "open(/y)"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("open(/y): No such file")));
  EXPECT_THAT(ErrnoToStatus(EACCES, "open(/z)"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("Permission denied")));
  EXPECT_EQ(StrError(EEXIST), "File exists");
}

TEST(ErrnoToStatusTest, ThreadsFailingAtOnceEachGetTheirOwnText) {
  // Under TSan this is the case that raced with absl::ErrnoToStatus.
  const std::vector<int> errors = {ENOENT, EACCES, ENOSPC, EEXIST, EINVAL, EIO};
  std::vector<std::string> got(errors.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < errors.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) got[i] = std::string(ErrnoToStatus(errors[i], "x").message());
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_EQ(got[i], absl::StrCat("x: ", StrError(errors[i])));
  }
}

TEST(ScopedFdTest, OwnsClosesMovesAndReleases) {
  const std::string dir = FreshTestDirectory("posix_test");
  const std::string path = dir + "/f";
  absl::StatusOr<ScopedFd> opened = OpenFile(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LOOM_ASSERT_OK(opened.status());
  ScopedFd fd = *std::move(opened);
  const int raw = fd.get();
  ASSERT_GE(raw, 0);
  EXPECT_NE(fcntl(raw, F_GETFD) & FD_CLOEXEC, 0);  // OpenFile adds O_CLOEXEC

  ScopedFd moved(std::move(fd));
  EXPECT_FALSE(fd.valid());  // NOLINT: checking the moved-from state is the point
  EXPECT_EQ(moved.get(), raw);
  LOOM_EXPECT_OK(moved.Close(path));
  EXPECT_FALSE(moved.valid());
  EXPECT_EQ(fcntl(raw, F_GETFD), -1);  // closed
  LOOM_EXPECT_OK(moved.Close(path));   // closing an empty one is a no-op

  {
    ScopedFd scoped(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(scoped.valid());
    const int released = scoped.Release();
    EXPECT_FALSE(scoped.valid());
    EXPECT_EQ(::close(released), 0);  // still open after Release: ours to close
  }
  {
    ScopedFd scoped(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    const int closed_at_scope_end = scoped.get();
    ASSERT_GE(closed_at_scope_end, 0);
    scoped = ScopedFd();  // assignment closes the old descriptor
    EXPECT_EQ(fcntl(closed_at_scope_end, F_GETFD), -1);
  }
}

TEST(ScopedFdTest, OpenFileNamesThePathAndMapsTheCode) {
  EXPECT_THAT(OpenFile("/nonexistent-dir-for-loom/x", O_RDONLY).status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("open(/nonexistent-dir-for-loom/x): No such file")));
}

}  // namespace
}  // namespace loom
