#include "unix_listener.h"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvstream {

absl::Status UnixListener::Listen(const std::string& path, uint32_t mode, int epoll_fd) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError(absl::StrCat(name_, " path is too long: ", path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) return absl::InternalError(absl::StrCat(name_, ": socket: ", std::strerror(errno)));
  unlink(path.c_str());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, kBacklog) != 0) {
    const int error = errno;
    close(fd_);
    fd_ = -1;
    return absl::InternalError(absl::StrCat("binding ", path, ": ", std::strerror(error)));
  }
  path_ = path;
  chmod(path.c_str(), mode);
  epoll_fd_ = epoll_fd;
  epoll_event listen_event{EPOLLIN, {.fd = fd_}};
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_, &listen_event) != 0) {
    return absl::InternalError(absl::StrCat(name_, ": epoll: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int UnixListener::Accept(int64_t now_ms) {
  if (paused_) return -1;
  const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c >= 0 || (errno != EMFILE && errno != ENFILE)) return c;  // EAGAIN: none left to accept
  warning_.Warn(now_ms, absl::StrCat(name_, ": out of descriptors (", std::strerror(errno),
                                     "): not accepting connections for ", kPauseMs, " ms at a time"));
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd_, nullptr);
  paused_ = true;
  resume_ms_ = now_ms + kPauseMs;
  return -1;
}

int64_t UnixListener::WaitMs(int64_t now_ms) const {
  if (!paused_) return -1;
  return resume_ms_ > now_ms ? resume_ms_ - now_ms : 0;
}

void UnixListener::ResumeIfDue(int64_t now_ms) {
  if (!paused_ || now_ms < resume_ms_) return;
  epoll_event listen_event{EPOLLIN, {.fd = fd_}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_, &listen_event);
  paused_ = false;
}

void UnixListener::Close() {
  if (fd_ < 0) return;
  close(fd_);  // leaves every epoll set with it
  unlink(path_.c_str());
  fd_ = -1;
}

}  // namespace kvstream
