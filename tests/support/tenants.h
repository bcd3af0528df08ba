// Clients of other uids against a real kvstreamd (daemon_process.h): forked children that drop root,
// each with gRPC state of its own. RunAs runs one to its end; Tenant keeps one running in the
// background (a tenant flooding the daemon) until the test stops it. Needs root.
#pragma once

#include <catch2/catch.hpp>

#include <grp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "test_util.h"

namespace kvstream::testing {

constexpr uid_t kAlice = 60101, kBob = 60102, kCarol = 60103;  // Carol is in the admin group
constexpr gid_t kUsers = 60100, kAdmins = 60199;

// In a child: reports a failed expectation on stderr and returns its number.
#define EXPECT_OR_RETURN(n, cond)                                              \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "expectation %d failed: %s\n", n, #cond);          \
      return n;                                                                \
    }                                                                          \
  } while (0)

// True (and the test is reported skipped) unless the test runs as root.
inline bool SkipWithoutRoot() {
  if (geteuid() == 0) return false;
  WARN("skipped: switching uids needs root");
  return true;
}

// A directory every test uid can reach (the sockets live there).
struct SharedDir {
  SharedDir() : dir("/tmp") { chmod(dir.path().c_str(), 0755); }
  TempDir dir;
};

// In a forked child: becomes `uid` (group kUsers, plus `extra_groups`) with room for `descriptors`
// open files, or as many as the hard limit allows (0: as inherited); exits 100 if it cannot.
inline void BecomeUid(uid_t uid, const std::vector<gid_t>& extra_groups, rlim_t descriptors = 0) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = std::min(descriptors, files.rlim_max);
  if ((descriptors > 0 && setrlimit(RLIMIT_NOFILE, &files) != 0) ||
      setgroups(extra_groups.size(), extra_groups.data()) != 0 || setgid(kUsers) != 0 || setuid(uid) != 0) {
    _exit(100);
  }
}

// Runs `body` in a child process as `uid`. Returns what `body` returned (0: every expectation
// held), or -1 if the child died.
inline int RunAs(uid_t uid, const std::function<int()>& body, std::vector<gid_t> extra_groups = {}) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    BecomeUid(uid, extra_groups);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A tenant running in the background as another uid: `body` sets up what it holds, calls
// Ready(), and keeps going (or just holds on) until Stopping() says the test is done with it.
class Tenant {
 public:
  // What `body` gets to talk to the test.
  class Control {
   public:
    Control(int ready, int stop) : ready_(ready), stop_(stop) {}
    void Ready() {
      if (ready_ < 0) return;
      [[maybe_unused]] ssize_t n = write(ready_, "r", 1);
      close(ready_);
      ready_ = -1;
    }
    // True once the test has called Stop; waits up to `wait_ms` for it.
    bool Stopping(int wait_ms = 0) {
      pollfd p{stop_, POLLIN, 0};
      return poll(&p, 1, wait_ms) > 0;
    }

   private:
    int ready_, stop_;
  };

  // Starts `body` in a child as `uid` with room for `descriptors` open files.
  Tenant(uid_t uid, const std::function<int(Control&)>& body, rlim_t descriptors = 1 << 16) {
    int ready[2], stop[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(stop) == 0);
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(stop[1]);
      BecomeUid(uid, {}, descriptors);
      Control control(ready[1], stop[0]);
      _exit(body(control));
    }
    close(ready[1]);
    close(stop[0]);
    ready_ = ready[0];
    stop_ = stop[1];
  }
  ~Tenant() { Stop(); }
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  // Waits until the body called Ready(); false if it ended first.
  bool WaitReady() {
    char c;
    return read(ready_, &c, 1) == 1;
  }
  // Tells the body to end and returns its exit code (-1 if it died).
  int Stop() {
    if (pid_ <= 0) return -1;
    close(stop_);
    close(ready_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int ready_ = -1, stop_ = -1;
};

}  // namespace kvstream::testing
