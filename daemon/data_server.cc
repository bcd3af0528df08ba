#include "data_server.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <memory>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"

namespace kvstream {
namespace {

constexpr size_t kWorkers = 2;
constexpr size_t kMaxQueued = 256;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DataServer::DataServer(std::string path, CallerRegistry* callers, Handler handler)
    : path_(std::move(path)), callers_(callers), handler_(std::move(handler)), workers_("kvs-data-work", kWorkers, kMaxQueued) {}

DataServer::~DataServer() { Stop(); }

absl::Status DataServer::Start(uint32_t mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(addr.sun_path)) return absl::InvalidArgumentError("data socket path is too long: " + path_);
  std::strcpy(addr.sun_path, path_.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  unlink(path_.c_str());  // the control socket was checked first: no live daemon owns it
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listen_fd_, 128) != 0) {
    return absl::InternalError("binding " + path_ + ": " + std::strerror(errno));
  }
  chmod(path_.c_str(), mode);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (stop_fd_ < 0 || epoll_fd_ < 0) return absl::InternalError(std::string("eventfd/epoll: ") + std::strerror(errno));
  epoll_event listen_event{EPOLLIN, {.fd = listen_fd_}}, stop_event{EPOLLIN, {.fd = stop_fd_}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &listen_event);
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd_, &stop_event);
  thread_ = std::thread([this] {
    NameThisThread("kvs-data");
    Serve();
  });
  return absl::OkStatus();
}

void DataServer::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  while (!connections_.empty()) Close(connections_.begin()->first);
  workers_.Stop();  // answers the requests already queued
  for (int* fd : {&listen_fd_, &stop_fd_, &epoll_fd_}) {
    if (*fd >= 0) close(*fd);
    if (fd == &listen_fd_ && *fd >= 0) unlink(path_.c_str());
    *fd = -1;
  }
}

void DataServer::Serve() {
  epoll_event events[64];
  while (true) {
    // Wake for the earliest deadline of a connection still sending its frame.
    int64_t next = -1;
    const int64_t now = NowMs();
    std::vector<int> expired;
    for (const auto& [socket, c] : connections_) {
      if (c.deadline_ms == 0) continue;
      if (c.deadline_ms <= now) {
        expired.push_back(socket);
      } else {
        next = next < 0 ? c.deadline_ms - now : std::min(next, c.deadline_ms - now);
      }
    }
    for (int socket : expired) Close(socket);
    const int n = epoll_wait(epoll_fd_, events, 64, static_cast<int>(next));
    if (n < 0 && errno != EINTR) {
      spdlog::error("data socket: epoll_wait: {}", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) return;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      auto it = connections_.find(fd);
      if (it == connections_.end()) continue;
      if (it->second.deadline_ms == 0) {  // an identity connection: any byte or hang-up ends it
        Close(fd);
        continue;
      }
      Receive(fd, it->second);
    }
  }
}

void DataServer::Accept() {
  while (true) {
    const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EMFILE || errno == ENFILE) spdlog::warn("data socket: out of descriptors ({})", std::strerror(errno));
      return;  // EAGAIN: none left to accept
    }
    const size_t pending = std::count_if(connections_.begin(), connections_.end(),
                                         [](const auto& kv) { return kv.second.deadline_ms != 0; });
    absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(c);
    if (pending >= kMaxPending || !peer.ok()) {
      close(c);  // too many peers still sending: the client retries, never waits on this thread
      continue;
    }
    Connection& conn = connections_[c];
    conn.peer = *std::move(peer);
    conn.deadline_ms = NowMs() + kFrameTimeoutMs;
    epoll_event e{EPOLLIN | EPOLLRDHUP, {.fd = c}};
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c, &e);
  }
}

bool DataServer::Receive(int socket, Connection& c) {
  while (c.got < kDataFrameBytes) {
    iovec iov{c.frame + c.got, kDataFrameBytes - c.got};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(socket, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); n >= 0 && h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
        if (c.fd < 0) {
          c.fd = received;
        } else {
          close(received);  // one descriptor per request
        }
      }
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;  // more later
    if (n <= 0) {
      Close(socket);
      return false;
    }
    c.got += static_cast<size_t>(n);
  }
  const DataRequest request = ParseDataRequest(c.frame);
  if (request.op == DataOp::kIdentify) {
    Identify(socket, c);
    return true;
  }
  // The request goes to the pool with its connection and descriptor: from here on they are the
  // task's (blocking I/O with a send timeout, as the handler expects).
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, socket, nullptr);
  const int fd = c.fd;
  PeerCredentials peer = std::move(c.peer);
  auto frame = std::make_shared<std::array<uint8_t, kDataFrameBytes>>();
  std::memcpy(frame->data(), c.frame, kDataFrameBytes);
  connections_.erase(socket);
  fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) & ~O_NONBLOCK);
  timeval send_timeout{1, 0};
  setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  const bool queued = workers_.Post([this, socket, fd, frame, peer = std::move(peer)] {
    const uint8_t(&bytes)[kDataFrameBytes] = *reinterpret_cast<const uint8_t(*)[kDataFrameBytes]>(frame->data());
    handler_(socket, ParseDataRequest(bytes), fd, peer);
    close(socket);
  });
  if (!queued) {
    SendDataReply(socket, absl::UnavailableError("kvstreamd is busy answering data socket requests; retry"), 0).IgnoreError();
    if (fd >= 0) close(fd);
    close(socket);
  }
  return false;
}

void DataServer::Identify(int socket, Connection& c) {
  if (c.fd >= 0) {
    close(c.fd);
    c.fd = -1;
  }
  absl::StatusOr<std::pair<uint64_t, std::string>> added = callers_->Add(c.peer);
  // The reply is a few dozen bytes into an empty socket buffer: it cannot block.
  if (!added.ok()) {
    SendDataReply(socket, added.status(), 0).IgnoreError();
    Close(socket);
    return;
  }
  c.caller = added->first;
  c.deadline_ms = 0;
  if (!SendDataReply(socket, absl::OkStatus(), 0, absl::BytesToHexString(added->second)).ok()) {
    Close(socket);
  }
}

void DataServer::Close(int socket) {
  auto it = connections_.find(socket);
  if (it == connections_.end()) return;
  if (it->second.fd >= 0) close(it->second.fd);
  if (it->second.caller != 0) callers_->Remove(it->second.caller);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, socket, nullptr);
  close(socket);
  connections_.erase(it);
}

}  // namespace kvstream
