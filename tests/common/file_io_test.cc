#include "ax/common/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace ax {
namespace {

// A fresh directory under $TMPDIR (or /tmp); removed by the test.
std::string make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      join_path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "ax-file-io-XXXXXX");
  EXPECT_NE(::mkdtemp(pattern.data()), nullptr);
  return pattern;
}

std::string content_of(size_t size) {
  std::string s(size, '\0');
  for (size_t i = 0; i < size; ++i) s[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return s;
}

Status write_new(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(str_cat("open ", path), errno);
  Status s = write_all(fd, content.data(), content.size(), path);
  ::close(fd);
  return s;
}

TEST(FileIo, JoinPath) {
  EXPECT_EQ(join_path("a", "b"), "a/b");
  EXPECT_EQ(join_path("a/", "b"), "a/b");
  EXPECT_EQ(join_path("", "b"), "b");
}

TEST(FileIo, WriteReadRoundTrip) {
  const std::string dir = make_temp_dir();
  const std::string path = join_path(dir, "data.bin");
  const std::string content = content_of(200000);  // several read() chunks
  ASSERT_TRUE(write_new(path, content).ok());
  StatusOr<std::string> got = read_file(path);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, content);
  EXPECT_TRUE(fsync_dir(dir).ok());
  std::filesystem::remove_all(dir);
}

TEST(FileIo, MissingFileIsNotFoundNamingThePath) {
  const std::string dir = make_temp_dir();
  const std::string path = join_path(dir, "missing.bin");
  StatusOr<std::string> got = read_file(path);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_NE(got.status().message().find("open " + path), std::string::npos)
      << got.status().message();
  StatusOr<FileDigest> digest = xxh64_file(path);
  ASSERT_FALSE(digest.ok());
  EXPECT_EQ(digest.status().code(), StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

TEST(FileIo, Xxh64FileMatchesXxh64OfContent) {
  const std::string dir = make_temp_dir();
  for (size_t size : {size_t{0}, size_t{1}, size_t{3} << 20}) {
    const std::string path = join_path(dir, str_cat("f", size));
    const std::string content = content_of(size);
    ASSERT_TRUE(write_new(path, content).ok());
    StatusOr<FileDigest> digest = xxh64_file(path);
    ASSERT_TRUE(digest.ok()) << digest.status().to_string();
    EXPECT_EQ(digest->size, size);
    EXPECT_EQ(digest->xxh64, XXH64(content.data(), content.size(), 0));
  }
  std::filesystem::remove_all(dir);
}

TEST(FileIo, FsyncMissingDirFails) {
  const std::string dir = join_path(make_temp_dir(), "no-such-dir");
  Status s = fsync_dir(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("open directory " + dir), std::string::npos) << s.message();
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

}  // namespace
}  // namespace ax
