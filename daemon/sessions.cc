#include "sessions.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data_socket.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"

namespace kvstream {
namespace {

constexpr size_t kTokenBytes = kSessionTokenBytes;
constexpr int kHandOverMs = 2000;  // a peer must send its request within this

// Reads one request frame within kHandOverMs (a slow or silent peer cannot hold the thread).
// `fd` gets the descriptor that came with it, or -1. False when no whole frame came.
bool ReceiveFrame(int c, uint8_t (&frame)[kDataFrameBytes], int* fd) {
  *fd = -1;
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandOverMs);
  while (got < kDataFrameBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{c, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    iovec iov{frame + got, kDataFrameBytes - got};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(c, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); n > 0 && h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
      if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
        if (*fd < 0) {
          *fd = received;
        } else {
          close(received);  // one descriptor per request
        }
      }
    }
    if (n <= 0) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
      return false;
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

bool SameToken(const std::string& a, const char* b) {
  if (a.size() != kTokenBytes) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < kTokenBytes; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::Status ArenaBudget::Take(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > limit_ - used_) {
    return absl::ResourceExhaustedError("an arena of " + std::to_string(bytes) + " bytes exceeds the node's arena budget: " +
                                        std::to_string(used_) + " of " + std::to_string(limit_) + " bytes in use by " +
                                        std::to_string(holders_) + " sessions (sessions.arena_budget)");
  }
  used_ += bytes;
  ++holders_;
  return absl::OkStatus();
}

void ArenaBudget::Give(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  used_ -= bytes;
  --holders_;
}

uint64_t ArenaBudget::used() const {
  absl::MutexLock lock(&mu_);
  return used_;
}

SessionManager::SessionManager(std::string data_socket, uint64_t max_arena_bytes, uint64_t arena_budget_bytes,
                               uint32_t max_sessions, Store* store)
    : data_socket_(std::move(data_socket)),
      max_arena_bytes_(max_arena_bytes),
      max_sessions_(max_sessions),
      budget_(std::make_shared<ArenaBudget>(arena_budget_bytes)),
      store_(store) {}

SessionManager::~SessionManager() { Stop(); }

absl::Status SessionManager::Start(uint32_t mode) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (data_socket_.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError("data socket path is too long: " + data_socket_);
  }
  std::strcpy(addr.sun_path, data_socket_.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return absl::InternalError(std::string("socket: ") + std::strerror(errno));
  unlink(data_socket_.c_str());  // the control socket was checked first: no live daemon owns it
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listen_fd_, 64) != 0) {
    return absl::InternalError("binding " + data_socket_ + ": " + std::strerror(errno));
  }
  chmod(data_socket_.c_str(), mode);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  thread_ = std::thread([this] {
    NameThisThread("kvs-data");
    Serve();
  });
  return absl::OkStatus();
}

void SessionManager::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  std::vector<std::thread> populating;
  {
    absl::MutexLock lock(&populate_mu_);
    populating.swap(populating_);
  }
  for (std::thread& t : populating) t.join();
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(data_socket_.c_str());
    listen_fd_ = -1;
  }
  if (stop_fd_ >= 0) {
    close(stop_fd_);
    stop_fd_ = -1;
  }
}

void SessionManager::Serve() {
  while (true) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    HandOver(c);
    close(c);
  }
}

void SessionManager::HandOver(int c) {
  timeval send_timeout{1, 0};
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  uint8_t frame[kDataFrameBytes];
  int fd;
  if (!ReceiveFrame(c, frame, &fd)) return;
  const auto [op, token, argument] = ParseDataRequest(frame);
  std::shared_ptr<Session> session = FindByToken(token);
  const bool adds_region = op == DataOp::kAddRegion || op == DataOp::kAddPinnedRegion;
  if (!adds_region && fd >= 0) {
    close(fd);
    fd = -1;
  }
  absl::StatusOr<uint32_t> answer = absl::NotFoundError("no session has this token");
  switch (op) {
    case DataOp::kFetchArena:
      // The arena goes out once: a second peer with the token gets nothing.
      if (session == nullptr || session->fd_sent.exchange(true)) {
        spdlog::warn("data socket: a peer presented an unknown or used session token");
        return;
      }
      if (absl::Status s = SendFd(c, session->arena->fd()); !s.ok()) {
        spdlog::warn("session {}: {}", session->id, std::string(s.message()));
      }
      return;
    case DataOp::kAddRegion:
    case DataOp::kAddPinnedRegion:
      if (session == nullptr) {
        if (fd >= 0) close(fd);
      } else if (fd < 0) {
        answer = absl::InvalidArgumentError("adding a region needs its descriptor attached");
      } else {
        answer = AddRegion(*session, fd, argument, op == DataOp::kAddPinnedRegion);
      }
      break;
    case DataOp::kRemoveRegion:
      if (session != nullptr) {
        const absl::Status removed =
            argument > UINT32_MAX ? absl::NotFoundError("no such region") : RemoveRegion(*session, static_cast<uint32_t>(argument));
        answer = removed.ok() ? absl::StatusOr<uint32_t>(0) : removed;
      }
      break;
    default:
      spdlog::warn("data socket: unknown request {:#x}", frame[0]);
      if (fd >= 0) close(fd);
      return;
  }
  SendDataReply(c, answer.status(), answer.ok() ? *answer : 0).IgnoreError();
}

std::shared_ptr<Session> SessionManager::FindByToken(const char* token) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, s] : sessions_) {
    if (SameToken(s->token, token)) return s;
  }
  return nullptr;
}

absl::StatusOr<uint32_t> SessionManager::AddRegion(Session& session, int fd, uint64_t size, bool device_pinned) {
  {
    absl::MutexLock lock(&session.regions_mu);
    if (session.regions.size() >= Session::kMaxRegions) {
      close(fd);
      return absl::ResourceExhaustedError(
          absl::StrCat("session ", session.id, " has ", Session::kMaxRegions, " client regions, the most it may"));
    }
  }
  absl::StatusOr<std::unique_ptr<ClientRegion>> memory = ClientRegion::Adopt(fd, size);
  if (!memory.ok()) return memory.status();
  if (absl::Status s = budget_->Take(size); !s.ok()) return s;
  auto region = std::make_shared<SessionRegion>();
  region->memory = *std::move(memory);
  region->budget = budget_;
  region->bytes = size;
  region->device_pinned = device_pinned;
  ClientRegion& m = *region->memory;
  // Fixed-buffer reads where the tiers allow it; with the descriptor, so the store can take pages
  // back from a stalled read (it punches the client's file under that range only). Not memory a
  // device pinned: punched pages would leave the device reading the old ones (reads into it go
  // through bounce buffers instead, ChunkRead::bounce).
  if (store_ != nullptr && !device_pinned) store_->RegisterMemory(m.data(), m.size(), m.fd(), 0).IgnoreError();
  // Registration faults a region's pages in once, here; a device-pinned one is copied into by the
  // loop thread instead, so its pages are faulted in now rather than by the first steps' copies.
  // In the background: a pool of hundreds of GiB takes longer than the client waits for the
  // answer, and reads into it work meanwhile (they fault what is not in yet). The thread holds
  // the region, so it stays mapped until the thread is done; Stop joins it.
  if (device_pinned) {
    absl::MutexLock lock(&populate_mu_);
    populating_.emplace_back([region, session_id = session.id] {
      NameThisThread("kvs-populate");
      const ClientRegion& r = *region->memory;
      if (madvise(r.data(), r.size(), MADV_POPULATE_WRITE) != 0) {
        spdlog::warn("session {}: cannot fault in the pinned region's pages ({}); the first reads into it pay for that",
                     session_id, std::strerror(errno));
      }
    });
  }
  uint32_t id;
  {
    absl::MutexLock lock(&session.regions_mu);
    id = session.next_region++;
    region->id = id;
    session.regions[id] = region;
  }
  spdlog::info("session {}: client region {} added: {} bytes, {}{}", session.id, id, m.size(),
               m.sealed() ? "sealed memfd" : "unsealed (reached through its descriptor)",
               device_pinned ? ", pinned by a device (reads through bounce buffers)" : "");
  return id;
}

absl::Status SessionManager::RemoveRegion(Session& session, uint32_t id) {
  std::shared_ptr<SessionRegion> region;
  {
    absl::MutexLock lock(&session.regions_mu);
    auto it = session.regions.find(id);
    if (it == session.regions.end()) {
      return absl::NotFoundError(absl::StrCat("session ", session.id, " has no client region ", id));
    }
    region = std::move(it->second);
    session.regions.erase(it);
  }
  Unregister(*region);
  return absl::OkStatus();
}

void SessionManager::Unregister(const SessionRegion& region) {
  // Reads still in flight keep the kernel's reference to the pages; later ones use plain I/O.
  if (store_ != nullptr) store_->UnregisterMemory(region.memory->data());
}

absl::StatusOr<std::shared_ptr<Session>> SessionManager::Create(const std::string& model, uint32_t rank,
                                                                uint32_t world_size, uint64_t arena_bytes) {
  if (arena_bytes == 0 || arena_bytes > max_arena_bytes_) {
    return absl::InvalidArgumentError("arena of " + std::to_string(arena_bytes) + " bytes is outside (0, " +
                                      std::to_string(max_arena_bytes_) + "] (sessions.max_arena)");
  }
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError("rank " + std::to_string(rank) + " is not below world size " +
                                      std::to_string(world_size));
  }
  auto too_many = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::ResourceExhaustedError(absl::StrCat(sessions_.size(), " sessions are attached, the most ",
                                                     "sessions.max_sessions allows; detach one or raise it"));
  };
  {
    absl::MutexLock lock(&mu_);
    if (sessions_.size() >= max_sessions_) return too_many();
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto session = std::make_shared<Session>();
  session->model = model;
  session->rank = rank;
  session->world_size = world_size;
  session->token.resize(kTokenBytes);
  if (getrandom(session->token.data(), kTokenBytes, 0) != static_cast<ssize_t>(kTokenBytes)) {
    return absl::InternalError("getrandom failed");
  }
  // Random ids: a stale id from before a restart names no one else's session.
  do {
    if (getrandom(&session->id, sizeof(session->id), 0) != static_cast<ssize_t>(sizeof(session->id))) {
      return absl::InternalError("getrandom failed");
    }
  } while (session->id == 0 || Find(session->id) != nullptr);
  const uint64_t bytes = (arena_bytes + page - 1) / page * page;
  if (absl::Status s = budget_->Take(bytes); !s.ok()) return s;
  session->budget = budget_;  // from here on, the session gives the bytes back when freed
  session->budget_bytes = bytes;
  auto arena = Arena::Create("kvstream-session-" + std::to_string(session->id), bytes);
  if (!arena.ok()) return arena.status();
  session->arena = *std::move(arena);
  absl::MutexLock lock(&mu_);
  if (sessions_.size() >= max_sessions_) return too_many();  // others attached meanwhile
  sessions_[session->id] = session;
  return session;
}

std::shared_ptr<Session> SessionManager::Find(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

std::shared_ptr<Session> SessionManager::Authorize(uint64_t id, const std::string& token) const {
  std::shared_ptr<Session> s = Find(id);
  if (s == nullptr || token.size() != kTokenBytes || !SameToken(s->token, token.data())) return nullptr;
  return s;
}

void SessionManager::Remove(uint64_t id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    session = std::move(it->second);
    sessions_.erase(it);
  }
  std::map<uint32_t, std::shared_ptr<SessionRegion>> regions;
  {
    absl::MutexLock lock(&session->regions_mu);
    regions.swap(session->regions);
  }
  for (const auto& [region_id, region] : regions) Unregister(*region);
}

size_t SessionManager::count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace kvstream
