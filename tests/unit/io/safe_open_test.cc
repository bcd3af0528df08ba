// safe_open: names beneath a directory descriptor are opened only when they are regular files
// reached without a symbolic link, never with an open that can block, and removed only when they
// are regular files of this process. Every case runs twice: with openat2 (where the kernel has
// it) and with the component walk that older kernels get.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <filesystem>
#include <fstream>
#include <future>

#include "io/safe_open.h"
#include "safe_open_util.h"
#include "test_util.h"

namespace kvstream::testing {
namespace {

namespace fs = std::filesystem;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

struct Dir {
  int fd = -1;
  explicit Dir(const std::string& path) : fd(open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) { REQUIRE(fd >= 0); }
  ~Dir() { close(fd); }
};

// Opens `rel` on another thread; fails the test (instead of hanging it) if the open blocks.
absl::StatusOr<int> OpenWithin2s(int dir_fd, const std::string& rel) {
  auto opened = std::async(std::launch::async, [=] { return OpenFileBeneath(dir_fd, rel, O_RDONLY); });
  if (opened.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    FAIL("the open of " << rel << " blocked");  // the thread stays blocked; the process exits
  }
  return opened.get();
}

TEST_CASE("a regular file beneath the directory opens, and its descriptor blocks as usual") {
  PickResolution();
  TempDir dir;
  fs::create_directory(dir.sub("ab"));
  WriteFile(dir.sub("ab/file.kvc"), "hello");
  Dir d(dir.path());
  absl::StatusOr<int> fd = OpenFileBeneath(d.fd, "ab/file.kvc", O_RDONLY);
  REQUIRE(fd.ok());
  CHECK((fcntl(*fd, F_GETFL) & O_NONBLOCK) == 0);
  CHECK((fcntl(*fd, F_GETFD) & FD_CLOEXEC) != 0);
  char buf[8] = {};
  CHECK(pread(*fd, buf, sizeof(buf), 0) == 5);
  CHECK(std::string(buf) == "hello");
  close(*fd);
  CHECK(absl::IsNotFound(OpenFileBeneath(d.fd, "ab/missing.kvc", O_RDONLY).status()));
}

TEST_CASE("a FIFO is refused without blocking and without being read") {
  PickResolution();
  TempDir dir;
  REQUIRE(mkfifo(dir.sub("fifo.kvc").c_str(), 0640) == 0);
  Dir d(dir.path());
  absl::StatusOr<int> fd = OpenWithin2s(d.fd, "fifo.kvc");
  CHECK(IsRefused(fd.status()));
  CHECK_THAT(std::string(fd.status().message()), Catch::Contains("FIFO"));
}

TEST_CASE("with O_DIRECT, a FIFO and a directory are refused and a regular file keeps the flag") {
  PickResolution();
  TempDir dir;
  REQUIRE(mkfifo(dir.sub("fifo").c_str(), 0640) == 0);
  fs::create_directory(dir.sub("dir"));
  WriteFile(dir.sub("file"), std::string(4096, 'x'));
  Dir d(dir.path());
  CHECK(IsRefused(OpenFileBeneath(d.fd, "fifo", O_RDONLY | O_DIRECT).status()));
  CHECK(IsRefused(OpenFileBeneath(d.fd, "dir", O_RDONLY | O_DIRECT).status()));
  absl::StatusOr<int> fd = OpenFileBeneath(d.fd, "file", O_RDONLY | O_DIRECT);
  if (!fd.ok()) {
    WARN("no O_DIRECT on this file system: " << fd.status());
    return;
  }
  CHECK((fcntl(*fd, F_GETFL) & O_DIRECT) != 0);
  CHECK((fcntl(*fd, F_GETFL) & O_NONBLOCK) == 0);
  close(*fd);
}

TEST_CASE("a socket, a directory and a symbolic link named like a file are refused") {
  PickResolution();
  TempDir dir;
  WriteFile(dir.sub("target"), "outside");
  MakeSocketFile(dir.sub("sock.kvc"));
  fs::create_directory(dir.sub("dir.kvc"));
  fs::create_symlink(dir.sub("target"), dir.sub("link.kvc"));
  fs::create_symlink("target", dir.sub("relative-link.kvc"));
  Dir d(dir.path());
  for (const char* name : {"sock.kvc", "dir.kvc", "link.kvc", "relative-link.kvc"}) {
    INFO(name);
    CHECK(IsRefused(OpenWithin2s(d.fd, name).status()));
  }
}

TEST_CASE("a symbolic link on the way is not followed, even to a directory inside") {
  PickResolution();
  TempDir dir;
  fs::create_directory(dir.sub("real"));
  WriteFile(dir.sub("real/file.kvc"), "x");
  fs::create_directory_symlink(dir.sub("real"), dir.sub("ab"));
  fs::create_directory_symlink("real", dir.sub("cd"));
  Dir d(dir.path());
  CHECK(IsRefused(OpenFileBeneath(d.fd, "ab/file.kvc", O_RDONLY).status()));
  CHECK(IsRefused(OpenFileBeneath(d.fd, "cd/file.kvc", O_RDONLY).status()));
  CHECK(IsRefused(OpenDirectoryBeneath(d.fd, "ab").status()));
  absl::StatusOr<int> real = OpenDirectoryBeneath(d.fd, "real");
  REQUIRE(real.ok());
  close(*real);
}

TEST_CASE("paths that could leave the directory are refused before any system call") {
  PickResolution();
  TempDir dir;
  Dir d(dir.path());
  for (const char* rel : {"../x", "/etc/passwd", "", "a//b", "./a", "a/.."}) {
    INFO(rel);
    CHECK(IsRefused(OpenFileBeneath(d.fd, rel, O_RDONLY).status()));
  }
}

TEST_CASE("a file of another owner than the expected one is refused") {
  PickResolution();
  TempDir dir;
  WriteFile(dir.sub("file"), "x");
  Dir d(dir.path());
  const int64_t me = geteuid(), my_group = getegid();
  absl::StatusOr<int> mine = OpenFileBeneath(d.fd, "file", O_RDONLY, {me, my_group});
  REQUIRE(mine.ok());
  close(*mine);
  absl::Status s = OpenFileBeneath(d.fd, "file", O_RDONLY, {me + 1, -1}).status();
  CHECK(IsRefused(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("owner_uid"));
  CHECK(IsRefused(OpenFileBeneath(d.fd, "file", O_RDONLY, {-1, my_group + 1}).status()));
}

TEST_CASE("a directory is listed with each entry's kind, symbolic links not followed") {
  PickResolution();
  TempDir dir;
  WriteFile(dir.sub("file"), "x");
  fs::create_directory(dir.sub("sub"));
  fs::create_directory_symlink(dir.sub("sub"), dir.sub("link"));
  REQUIRE(mkfifo(dir.sub("fifo").c_str(), 0640) == 0);
  Dir d(dir.path());
  std::map<std::string, EntryKind> seen;
  REQUIRE(ListDirectory(d.fd, [&](const std::string& name, EntryKind kind) { seen[name] = kind; }).ok());
  CHECK(seen == std::map<std::string, EntryKind>{{"file", EntryKind::kRegular},
                                                 {"sub", EntryKind::kDirectory},
                                                 {"link", EntryKind::kSymlink},
                                                 {"fifo", EntryKind::kOther}});
  // The descriptor listed stays usable (its own offset untouched).
  seen.clear();
  REQUIRE(ListDirectory(d.fd, [&](const std::string& name, EntryKind kind) { seen[name] = kind; }).ok());
  CHECK(seen.size() == 4);
}

TEST_CASE("only regular files of this process are removed, never through a symbolic link") {
  PickResolution();
  TempDir dir, outside;
  WriteFile(outside.sub("victim.kvc.tmp.1"), "keep");
  fs::create_directory(dir.sub("ab"));
  WriteFile(dir.sub("ab/mine.kvc.tmp.1"), "x");
  REQUIRE(mkfifo(dir.sub("ab/fifo.kvc.tmp.1").c_str(), 0640) == 0);
  fs::create_directory_symlink(outside.path(), dir.sub("cd"));
  fs::create_symlink(outside.sub("victim.kvc.tmp.1"), dir.sub("ab/link.kvc.tmp.1"));
  Dir d(dir.path());
  CHECK(RemoveRegularFileBeneath(d.fd, "ab/mine.kvc.tmp.1").ok());
  CHECK(!fs::exists(dir.sub("ab/mine.kvc.tmp.1")));
  CHECK(IsRefused(RemoveRegularFileBeneath(d.fd, "ab/fifo.kvc.tmp.1")));
  CHECK(fs::exists(fs::symlink_status(dir.sub("ab/fifo.kvc.tmp.1"))));
  CHECK(IsRefused(RemoveRegularFileBeneath(d.fd, "ab/link.kvc.tmp.1")));
  CHECK(IsRefused(RemoveRegularFileBeneath(d.fd, "cd/victim.kvc.tmp.1")));
  CHECK(fs::exists(outside.sub("victim.kvc.tmp.1")));
  CHECK(absl::IsNotFound(RemoveRegularFileBeneath(d.fd, "ab/gone")));
}

TEST_CASE("stat beneath a directory sees a symbolic link as one and never follows it on the way") {
  PickResolution();
  TempDir dir;
  WriteFile(dir.sub("file"), "abc");
  fs::create_symlink(dir.sub("file"), dir.sub("link"));
  fs::create_directory_symlink(dir.path(), dir.sub("loop"));
  Dir d(dir.path());
  absl::StatusOr<struct stat> st = StatBeneath(d.fd, "file");
  REQUIRE(st.ok());
  CHECK(S_ISREG(st->st_mode));
  CHECK(st->st_size == 3);
  st = StatBeneath(d.fd, "link");
  REQUIRE(st.ok());
  CHECK(S_ISLNK(st->st_mode));
  CHECK(IsRefused(StatBeneath(d.fd, "loop/file").status()));
  CHECK(absl::IsNotFound(StatBeneath(d.fd, "missing").status()));
}

TEST_CASE("openat2 is used where the kernel offers it, the component walk when forced") {
  ForceComponentWalkForTesting(false);
#ifdef SYS_openat2
  // open_how {flags, mode, resolve}: O_PATH on ".", no resolve flags.
  const uint64_t how[3] = {O_PATH | O_CLOEXEC, 0, 0};
  const long fd = syscall(SYS_openat2, AT_FDCWD, ".", how, sizeof(how));
  if (fd >= 0) {
    close(static_cast<int>(fd));
    CHECK(SafeOpenUsesOpenat2());
  } else {
    WARN("openat2 is not available here (kernel before 5.6, or a seccomp filter): only the walk is tested");
    CHECK(!SafeOpenUsesOpenat2());
  }
#endif
  ForceComponentWalkForTesting(true);
  CHECK(!SafeOpenUsesOpenat2());
  ForceComponentWalkForTesting(false);
}

}  // namespace
}  // namespace kvstream::testing
