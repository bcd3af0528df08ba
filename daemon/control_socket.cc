#include "control_socket.h"

#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "callers.h"
#include "slotted_accept.h"
#include "spdlog/spdlog.h"

namespace kvstream {

ControlSocket::ControlSocket(std::string path, UidSlots::Limits limits)
    : path_(std::move(path)), slots_("control socket connections", limits) {}

ControlSocket::~ControlSocket() { Stop(); }

absl::Status ControlSocket::Listen(uint32_t mode) {
  if (absl::Status s = epoll_.Create(); !s.ok()) return s;
  return listener_.Listen(path_, mode, epoll_.epoll_fd());
}

absl::Status ControlSocket::Serve(grpc::Server* server) {
  if (listener_.fd() < 0) return absl::FailedPreconditionError("the control socket is not listening");
  server_ = server;
  epoll_.Start("kvs-control", [this] { Run(); });
  return absl::OkStatus();
}

void ControlSocket::Stop() {
  epoll_.Join();
  listener_.Close();
  for (auto& [watch_fd, slot] : watched_) close(watch_fd);
  watched_.clear();
  epoll_.Close();
}

void ControlSocket::Run() {
  epoll_event events[64];
  while (true) {
    const int n = epoll_wait(epoll_.epoll_fd(), events, 64, static_cast<int>(listener_.WaitMs(SteadyNowMs())));
    if (n < 0 && errno != EINTR) {
      spdlog::error("control socket: epoll_wait: {}", std::strerror(errno));
      return;
    }
    const int64_t now = SteadyNowMs();
    listener_.ResumeIfDue(now);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (epoll_.IsStop(fd)) return;
      if (fd == listener_.fd()) {
        Accept(now);
        continue;
      }
      // A connection hung up (its peer closed it, or gRPC shut it down): its slot is free.
      epoll_ctl(epoll_.epoll_fd(), EPOLL_CTL_DEL, fd, nullptr);
      close(fd);
      watched_.erase(fd);
    }
  }
}

void ControlSocket::Accept(int64_t now) {
  while (std::optional<SlottedConnection> accepted = AcceptSlotted(listener_, slots_, refusals_, now)) {
    const int c = accepted->fd;
    // The duplicate first: gRPC may close its descriptor (and the number be reused) at any time.
    // Unwatched, the connection's hang-up would never give its slot back: refused then.
    const int watch_fd = fcntl(c, F_DUPFD_CLOEXEC, 0);
    epoll_event hang_up{EPOLLRDHUP, {.fd = watch_fd}};  // EPOLLHUP and EPOLLERR are always reported
    if (watch_fd < 0 || epoll_ctl(epoll_.epoll_fd(), EPOLL_CTL_ADD, watch_fd, &hang_up) != 0) {
      refusals_.Warn(now, absl::StrCat("control socket: refused a connection: ", std::strerror(errno)));
      if (watch_fd >= 0) close(watch_fd);
      close(c);
      continue;
    }
    watched_.emplace(watch_fd, std::move(accepted->slot));
    grpc::AddInsecureChannelFromFd(server_, c);  // the descriptor is gRPC's from here on
  }
}

}  // namespace kvstream
