#include "daemon_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "kvstream/client.h"

namespace kvtorture {

double DaemonRunner::Start(const std::string& log) {
  const auto start = std::chrono::steady_clock::now();
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) dup2(fd, STDERR_FILENO);
    execl(binary_.c_str(), "kvstreamd", "--config", config_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(600)) {
    int status;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return -1;
    }
    auto client = kvstream::Client::Connect(socket_);
    if (client.ok() && (*client)->Health().ok()) {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

bool DaemonRunner::Stop() {
  if (pid_ <= 0) return false;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void DaemonRunner::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace kvtorture
