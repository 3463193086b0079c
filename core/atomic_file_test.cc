#include "core/atomic_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh, empty directory for one test.
std::string TestDirectory(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  EXPECT_EQ(mkdir(dir.c_str(), 0700), 0) << dir;
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(d);
  return names;
}

TEST(AtomicFileTest, CreatesAndReplaces) {
  const std::string dir = TestDirectory("replace");
  const std::string path = dir + "/out.txt";
  LOOM_ASSERT_OK(WriteFileAtomically(path, "first\n"));
  EXPECT_EQ(ReadAll(path), "first\n");
  const std::string binary("a\0b\xff", 4);
  LOOM_ASSERT_OK(WriteFileAtomically(path, binary));
  EXPECT_EQ(ReadAll(path), binary);
  LOOM_ASSERT_OK(WriteFileAtomically(path, ""));
  EXPECT_EQ(ReadAll(path), "");
  EXPECT_THAT(Entries(dir), ElementsAre("out.txt"));  // no temporary left behind
}

TEST(AtomicFileTest, RelativePath) {
  const std::string dir = TestDirectory("relative");
  char previous[4096];
  ASSERT_NE(getcwd(previous, sizeof(previous)), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  const absl::Status status = WriteFileAtomically("here.txt", "x");
  ASSERT_EQ(chdir(previous), 0);
  LOOM_ASSERT_OK(status);
  EXPECT_EQ(ReadAll(dir + "/here.txt"), "x");
}

TEST(AtomicFileTest, MissingDirectoryNamesPathAndCall) {
  const std::string path = TestDirectory("missing") + "/no/such/out.txt";
  EXPECT_THAT(WriteFileAtomically(path, "x"),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("WriteFileAtomically " + path + ": open(" + path + ".tmp."),
                             HasSubstr("No such file or directory"))));
}

TEST(AtomicFileTest, FailedRenameLeavesTheTargetAndNoTemporary) {
  const std::string dir = TestDirectory("rename");
  const std::string path = dir + "/taken";
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0);  // a file cannot be renamed over a directory
  EXPECT_THAT(WriteFileAtomically(path, "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("rename(" + path + ".tmp."), HasSubstr("Is a directory"))));
  EXPECT_THAT(Entries(dir), ElementsAre("taken"));
  struct stat info;
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
}

}  // namespace
}  // namespace loom
