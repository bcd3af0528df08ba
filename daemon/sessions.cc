#include "sessions.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace kvstream {
namespace {

constexpr size_t kTokenBytes = 32;
constexpr int kHandOverMs = 2000;  // a peer must present its token within this

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
                               uint32_t max_sessions)
    : data_socket_(std::move(data_socket)),
      max_arena_bytes_(max_arena_bytes),
      max_sessions_(max_sessions),
      budget_(std::make_shared<ArenaBudget>(arena_budget_bytes)) {}

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
  thread_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

void SessionManager::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
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

// Reads a token within one overall deadline (a slow or silent peer cannot hold the thread) and
// sends the arena of the session it names, once.
void SessionManager::HandOver(int c) {
  timeval send_timeout{1, 0};
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  char token[kTokenBytes];
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandOverMs);
  while (got < kTokenBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{c, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    const ssize_t n = recv(c, token + got, kTokenBytes - got, MSG_DONTWAIT);
    if (n <= 0) return;
    got += static_cast<size_t>(n);
  }
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, s] : sessions_) {
      if (SameToken(s->token, token)) session = s;
    }
  }
  if (!session || session->fd_sent.load()) {
    spdlog::warn("data socket: a peer presented an unknown or used session token");
    return;
  }
  if (absl::Status s = SendFd(c, session->arena->fd()); !s.ok()) {
    spdlog::warn("session {}: {}", session->id, std::string(s.message()));
    return;
  }
  session->fd_sent = true;
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
  absl::MutexLock lock(&mu_);
  sessions_.erase(id);
}

size_t SessionManager::count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace kvstream
