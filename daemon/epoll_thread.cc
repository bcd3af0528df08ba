#include "epoll_thread.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "thread_name.h"

namespace kvstream {

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status EpollThread::Create() {
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (stop_fd_ < 0 || epoll_fd_ < 0) return absl::InternalError(absl::StrCat("eventfd/epoll: ", std::strerror(errno)));
  epoll_event stop_event{EPOLLIN, {.fd = stop_fd_}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd_, &stop_event);
  return absl::OkStatus();
}

void EpollThread::Start(const char* name, std::function<void()> serve) {
  thread_ = std::thread([name, serve = std::move(serve)] {
    NameThisThread(name);
    serve();
  });
}

void EpollThread::Join() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
  thread_.join();
}

void EpollThread::Close() {
  Join();
  for (int* fd : {&stop_fd_, &epoll_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

}  // namespace kvstream
