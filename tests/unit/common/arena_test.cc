// The data plane's arena: sealed, fixed size, shared through SCM_RIGHTS, ranges checked.
#include "arena.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "test_util.h"

namespace kvstream {
namespace {

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1
#endif

TEST_CASE("an arena is sealed against resizing and further seals, and checks ranges without overflow") {
  auto arena = Arena::Create("test", 1 << 20);
  REQUIRE(arena.ok());
  CHECK(ftruncate((*arena)->fd(), 4096) != 0);       // cannot shrink under the other side
  CHECK(ftruncate((*arena)->fd(), 2 << 20) != 0);    // nor grow
  CHECK(fcntl((*arena)->fd(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE) != 0);  // nor be sealed against writes
  CHECK((*arena)->CheckRange(0, 1 << 20).ok());
  CHECK((*arena)->CheckRange((1 << 20) - 1, 1).ok());
  CHECK(absl::IsOutOfRange((*arena)->CheckRange(1 << 20, 1)));
  CHECK(absl::IsOutOfRange((*arena)->CheckRange(10, 0)));
  CHECK(absl::IsOutOfRange((*arena)->CheckRange(4096, UINT64_MAX - 100)));  // would wrap around
  CHECK(absl::IsOutOfRange((*arena)->CheckRange(UINT64_MAX, 2)));
  CHECK(absl::IsInvalidArgument(Arena::Create("bad", 1000).status()));
  CHECK(absl::IsInvalidArgument(Arena::Create("bad", 0).status()));
}

TEST_CASE("an arena passed over a Unix socket is the same memory in another process") {
  auto arena = Arena::Create("shared", 64 << 10);
  REQUIRE(arena.ok());
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the "client": receive, map, write a pattern, exit
    close(sv[0]);
    auto fd = ReceiveFd(sv[1]);
    if (!fd.ok()) _exit(1);
    auto mapped = Arena::Map(*fd);
    if (!mapped.ok() || (*mapped)->size() != (64 << 10)) _exit(2);
    std::memset((*mapped)->data() + 4096, 0xab, 100);
    _exit(0);
  }
  close(sv[1]);
  REQUIRE(SendFd(sv[0], (*arena)->fd()).ok());
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  close(sv[0]);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  for (int i = 0; i < 100; ++i) REQUIRE((*arena)->data()[4096 + i] == 0xab);
  CHECK((*arena)->data()[4096 + 100] == 0);
}

TEST_CASE("mapping refuses a descriptor that is not a sealed memfd") {
  kvstream::testing::TempDir dir;
  const std::string path = dir.sub("plain");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 4096) == 0);
  CHECK(absl::IsFailedPrecondition(Arena::Map(fd).status()));  // Map closes it
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  const char byte = 'x';
  REQUIRE(write(sv[0], &byte, 1) == 1);  // a message without a descriptor
  CHECK(absl::IsDataLoss(ReceiveFd(sv[1]).status()));
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace kvstream
