// Starts a real kvstreamd (the built binary) on a temporary socket and tier directories, and
// stops it with SIGTERM; clients attached to it.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "kvstream/client.h"
#include "test_util.h"
#include "unix_connection.h"

namespace kvstream::testing {

class DaemonProcess {
 public:
  // `extra_tiers`: YAML list items appended after the two tiers (e.g. a shared one); `sessions`:
  // the sessions mapping; `socket_mode`: the sockets' permission bits; `capacity`: each of the
  // two tiers'.
  explicit DaemonProcess(const TempDir& dir, const std::string& extra_yaml = "", const std::string& extra_tiers = "",
                         const std::string& sessions = "{max_arena: 256MiB}", const std::string& socket_mode = "0600",
                         const std::string& capacity = "1GiB")
      : socket_(dir.sub("kvstreamd.sock")), config_(dir.sub("kvstreamd.yaml")) {
    std::ofstream(config_) << "socket: {path: " << socket_ << ", mode: \"" << socket_mode << "\"}\n"
                           << "sessions: " << sessions << "\n"
                           << "block_size: 256KiB\n"
                           << "logging: {level: warn}\n"
                           << extra_yaml
                           << "tiers:\n"
                           << "  - {name: fast, path: " << dir.sub("t0") << ", capacity: " << capacity << "}\n"
                           << "  - {name: slow, path: " << dir.sub("t1") << ", capacity: " << capacity << "}\n"
                           << extra_tiers;
  }
  ~DaemonProcess() { Stop(); }

  // Before Start: the daemon runs with this RLIMIT_NOFILE (as a unit's LimitNOFILE=soft:hard).
  void set_descriptor_limit(rlim_t soft, rlim_t hard) { descriptors_ = {soft, hard}; }
  // Before Start: the daemon's log (its stderr) goes to `path` instead of the test's stderr.
  void set_log(const std::string& path) { log_ = path; }

  // Starts the daemon and waits until its socket accepts connections. False if it exited.
  bool Start() {
    pid_ = fork();
    if (pid_ == 0) {
      if (descriptors_.rlim_max > 0 && setrlimit(RLIMIT_NOFILE, &descriptors_) != 0) _exit(126);
      if (!log_.empty()) {
        const int log = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (log < 0 || dup2(log, STDERR_FILENO) < 0) _exit(126);
      }
      execl(KVSTREAMD_PATH, "kvstreamd", "--config", config_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500; ++i) {
      if (Connectable()) return true;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // SIGKILL (a crash: nothing is flushed or saved) and reap.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // SIGTERM and wait; returns the exit status (or -1 if not running).
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  bool Connectable() const {
    const int fd = ConnectUnix(socket_);
    if (fd >= 0) close(fd);
    return fd >= 0;
  }
  // Open descriptors of the daemon process, not counting cached chunk files (the tiers keep up to
  // 1024 of those open for reads, whichever tier happened to read a block).
  size_t OpenFds() const {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid_) + "/fd")) {
      std::error_code ec;
      n += std::filesystem::read_symlink(e.path(), ec).extension() != ".kvc";
    }
    return n;
  }
  const std::string& socket() const { return socket_; }
  const std::string& config() const { return config_; }
  pid_t pid() const { return pid_; }
  int exit_status() const { return exit_status_; }

 private:
  std::string socket_, config_;
  rlimit descriptors_{0, 0};
  std::string log_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
};

// A client attached to `d` as rank `rank` of `world` with an arena of `arena` bytes; fails the test
// where the attach fails.
inline std::unique_ptr<Client> AttachOrFail(const DaemonProcess& d, uint32_t rank = 0, uint32_t world = 1,
                                            uint64_t arena = 64 << 20) {
  auto c = Client::Attach(d.socket(), {"test-model", rank, world, arena});
  if (!c.ok()) FAIL(c.status().ToString());
  return *std::move(c);
}

}  // namespace kvstream::testing
