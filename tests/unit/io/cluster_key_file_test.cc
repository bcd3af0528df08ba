// LoadClusterKeyFile (io/cluster_key_file.h): the cluster key file is read only when it is a
// private regular file of 32 to 4096 bytes, owned by the daemon's uid or root, named by an absolute
// path without a symlink on the way, and never through a blocking open; the key is made from its
// bytes exactly as they are.
#include "io/cluster_key_file.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/chunk_format.h"
#include "format/chunk_mac.h"
#include "mac_key_util.h"
#include "test_util.h"

namespace kvstream {
namespace {

using testing::MacKey;
using testing::TempDir;

TEST_CASE("a key file is a private regular file of 32 to 4096 bytes") {
  TempDir dir;
  const std::string path = dir.sub("cluster.key");
  std::ofstream(path) << std::string(32, 'x');
  chmod(path.c_str(), 0600);
  auto key = LoadClusterKeyFile(path);
  REQUIRE(key.ok());
  const ChunkMeta meta = DescribeChunk("k", "abc", 3, 4096, 0);
  CHECK((*key)->Compute(meta) == MacKey('x')->Compute(meta));

  chmod(path.c_str(), 0644);
  auto readable = LoadClusterKeyFile(path);
  CHECK(absl::IsPermissionDenied(readable.status()));
  CHECK(readable.status().message().find("0644") != std::string::npos);
  chmod(path.c_str(), 0620);
  CHECK(absl::IsPermissionDenied(LoadClusterKeyFile(path).status()));
  chmod(path.c_str(), 0400);
  CHECK(LoadClusterKeyFile(path).ok());

  const std::string link = dir.sub("link.key");
  std::filesystem::create_symlink(path, link);
  CHECK(absl::IsInvalidArgument(LoadClusterKeyFile(link).status()));

  const std::string fifo = dir.sub("fifo.key");
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const auto started = std::chrono::steady_clock::now();
  CHECK(absl::IsInvalidArgument(LoadClusterKeyFile(fifo).status()));  // never blocks on it
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));

  const std::string dir_key = dir.sub("keydir");
  std::filesystem::create_directory(dir_key);
  chmod(dir_key.c_str(), 0700);
  CHECK(!LoadClusterKeyFile(dir_key).ok());

  const std::string short_key = dir.sub("short.key");
  std::ofstream(short_key) << std::string(31, 'x');
  chmod(short_key.c_str(), 0600);
  CHECK(absl::IsInvalidArgument(LoadClusterKeyFile(short_key).status()));
  const std::string long_key = dir.sub("long.key");
  std::ofstream(long_key) << std::string(4097, 'x');
  chmod(long_key.c_str(), 0600);
  CHECK(absl::IsInvalidArgument(LoadClusterKeyFile(long_key).status()));
  std::filesystem::resize_file(long_key, 4096);
  CHECK(LoadClusterKeyFile(long_key).ok());
  CHECK(absl::IsNotFound(LoadClusterKeyFile(dir.sub("missing.key")).status()));
  CHECK(!ChunkMacKey::FromBytes("short", 5).ok());
}

TEST_CASE("a key file is owned by the daemon's uid or root and reached without a symlink on the way") {
  TempDir dir;
  const std::string real = dir.sub("keys"), path = real + "/cluster.key";
  std::filesystem::create_directory(real);
  std::ofstream(path) << std::string(32, 'k');
  chmod(path.c_str(), 0600);
  REQUIRE(LoadClusterKeyFile(path).ok());
  // A directory on the way that is a symlink (whoever can change it picks the key).
  const std::string linked = dir.sub("linked");
  std::filesystem::create_directory_symlink(real, linked);
  auto through_link = LoadClusterKeyFile(linked + "/cluster.key");
  CHECK(absl::IsInvalidArgument(through_link.status()));
  CHECK(through_link.status().message().find("symbolic link") != std::string::npos);
  CHECK(absl::IsInvalidArgument(LoadClusterKeyFile("keys/cluster.key").status()));  // relative: refused
  if (geteuid() != 0) {
    WARN("the owner cases need root (to give the file away)");
    return;
  }
  REQUIRE(chown(path.c_str(), 65534, 65534) == 0);  // another user's key
  auto others = LoadClusterKeyFile(path);
  CHECK(absl::IsPermissionDenied(others.status()));
  CHECK(others.status().message().find("owned by uid 65534") != std::string::npos);
  REQUIRE(chown(path.c_str(), 0, 0) == 0);  // root's: the daemon's own uid here
  CHECK(LoadClusterKeyFile(path).ok());
}

}  // namespace
}  // namespace kvstream
