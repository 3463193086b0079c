#include "offload/disk/disk_test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom {
namespace disk_testing {

std::string MakeTestDirectory(absl::string_view label, absl::string_view parent) {
  std::string base(parent);
  if (base.empty()) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    base = tmp != nullptr ? tmp : "/tmp";
  }
  std::string templ = absl::StrCat(base, "/", label, ".XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << templ << "): " << std::strerror(errno);
    return "";
  }
  return templ;
}

std::vector<std::byte> SeededBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 1;
  for (size_t i = 0; i < n; i += 8) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<size_t>(8, n - i));
  }
  return out;
}

void FlipByte(const std::string& path, uint64_t offset) {
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  unsigned char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1) << path << " @" << offset;
  c ^= 0xFF;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1) << path << " @" << offset;
  ::close(fd);
}

void TruncateFile(const std::string& path, uint64_t size) {
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0)
      << path << ": " << std::strerror(errno);
}

std::vector<std::byte> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void WriteWholeFile(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
}

uint64_t FileSizeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path << ": " << std::strerror(errno);
  return static_cast<uint64_t>(st.st_size);
}

std::vector<std::string> ListDirectory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    ADD_FAILURE() << "opendir(" << dir << "): " << std::strerror(errno);
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string FindFile(const std::string& dir, absl::string_view prefix) {
  std::vector<std::string> found;
  for (const std::string& name : ListDirectory(dir)) {
    if (absl::StartsWith(name, prefix)) found.push_back(name);
  }
  if (found.size() != 1) {
    ADD_FAILURE() << found.size() << " entries of " << dir << " start with " << prefix;
    return "";
  }
  return dir + "/" + found[0];
}

}  // namespace disk_testing
}  // namespace loom
