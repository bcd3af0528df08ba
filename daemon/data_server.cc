#include "data_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <memory>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "slotted_accept.h"
#include "spdlog/spdlog.h"

namespace kvstream {

DataServer::DataServer(std::string path, CallerRegistry* callers, Handler handler, const DescriptorCaps& caps)
    : path_(std::move(path)),
      callers_(callers),
      handler_(std::move(handler)),
      pending_("data socket connections still sending their request", caps.pending),
      hand_over_("kvs-hand-over", "arena hand-overs waiting", 1, caps.queued),
      regions_("kvs-data-work", "region requests waiting", 2, caps.queued) {}

DataServer::~DataServer() { Stop(); }

absl::Status DataServer::Start(uint32_t mode) {
  if (absl::Status s = epoll_.Create(); !s.ok()) return s;
  // The control socket was checked first: no live daemon owns the path.
  if (absl::Status s = listener_.Listen(path_, mode, epoll_.epoll_fd()); !s.ok()) return s;
  epoll_.Start("kvs-data", [this] { Serve(); });
  return absl::OkStatus();
}

void DataServer::Stop() {
  epoll_.Join();
  while (!connections_.empty()) Close(connections_.begin()->first);
  hand_over_.pool.Stop();  // each answers the requests already queued
  regions_.pool.Stop();
  listener_.Close();
  epoll_.Close();
}

void DataServer::Serve() {
  epoll_event events[64];
  while (true) {
    // Wake for the earliest deadline of a connection still sending its frame, and at the end of
    // an accept pause.
    int64_t next = listener_.WaitMs(SteadyNowMs());
    const int64_t now = SteadyNowMs();
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
    const int n = epoll_wait(epoll_.epoll_fd(), events, 64, static_cast<int>(next));
    if (n < 0 && errno != EINTR) {
      spdlog::error("data socket: epoll_wait: {}", std::strerror(errno));
      return;
    }
    listener_.ResumeIfDue(SteadyNowMs());
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (epoll_.IsStop(fd)) return;
      if (fd == listener_.fd()) {
        Accept(SteadyNowMs());
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

void DataServer::Accept(int64_t now) {
  // Too many still sending (in all, or of one uid): refused, the client retries; never a wait here.
  while (std::optional<SlottedConnection> accepted = AcceptSlotted(listener_, pending_, refusals_, now)) {
    const int c = accepted->fd;
    epoll_event e{EPOLLIN | EPOLLRDHUP, {.fd = c}};
    if (epoll_ctl(epoll_.epoll_fd(), EPOLL_CTL_ADD, c, &e) != 0) {
      refusals_.Warn(now, absl::StrCat("data socket: refused a connection: ", std::strerror(errno)));
      close(c);
      continue;
    }
    Connection& conn = connections_[c];
    conn.peer = std::move(accepted->peer);
    conn.pending = std::move(accepted->slot);
    conn.deadline_ms = now + kFrameTimeoutMs;
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
  Dispatch(socket, c);
  return false;
}

void DataServer::Dispatch(int socket, Connection& c) {
  // The request goes to its lane with its connection and descriptor: from here on they are the
  // task's (blocking I/O with a send timeout, as the handler expects).
  epoll_ctl(epoll_.epoll_fd(), EPOLL_CTL_DEL, socket, nullptr);
  Lane& lane = ParseDataRequest(c.frame).op == DataOp::kFetchArena ? hand_over_ : regions_;
  const int fd = c.fd;
  PeerCredentials peer = std::move(c.peer);
  auto frame = std::make_shared<std::array<uint8_t, kDataFrameBytes>>();
  std::memcpy(frame->data(), c.frame, kDataFrameBytes);
  connections_.erase(socket);  // and with it the pending slot
  fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) & ~O_NONBLOCK);
  timeval send_timeout{1, 0};
  setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  absl::StatusOr<UidSlots::Slot> slot = lane.queued.Take(peer.uid);
  absl::Status refused = slot.status();
  if (slot.ok()) {
    // The task holds the slot until it has answered.
    auto held = std::make_shared<UidSlots::Slot>(*std::move(slot));
    const bool queued = lane.pool.Post([this, socket, fd, frame, peer = std::move(peer), held] {
      // A client that gave up waiting and closed its end is owed nothing: a region it will never
      // learn the id of is not worth registering.
      pollfd gone{socket, POLLRDHUP, 0};
      if (poll(&gone, 1, 0) == 1 && (gone.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        if (fd >= 0) close(fd);
        close(socket);
        return;
      }
      const uint8_t(&bytes)[kDataFrameBytes] = *reinterpret_cast<const uint8_t(*)[kDataFrameBytes]>(frame->data());
      handler_(socket, ParseDataRequest(bytes), fd, peer);
      close(socket);
    });
    if (queued) return;
    refused = absl::UnavailableError("kvstreamd is stopping");
  }
  refusals_.Warn(SteadyNowMs(), absl::StrCat("data socket: refused a request: ", refused.message()));
  SendDataReply(socket, refused, 0).IgnoreError();
  if (fd >= 0) close(fd);
  close(socket);
}

void DataServer::Identify(int socket, Connection& c) {
  c.pending.reset();  // an identity is counted as one (CallerRegistry) from here on
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
  epoll_ctl(epoll_.epoll_fd(), EPOLL_CTL_DEL, socket, nullptr);
  close(socket);
  connections_.erase(it);
}

}  // namespace kvstream
