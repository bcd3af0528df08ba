#include "sessions.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "data_socket.h"
#include "epoll_thread.h"
#include "spdlog/spdlog.h"
#include "thread_name.h"

namespace kvstream {
namespace {

constexpr size_t kTokenBytes = kSessionTokenBytes;

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
    return absl::ResourceExhaustedError(absl::StrCat("an arena of ", bytes, " bytes exceeds ", owner_, " arena budget: ", used_,
                                                     " of ", limit_, " bytes in use by ", holders_, " sessions (", setting_, ")"));
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
                               uint32_t max_sessions, Store* store, AccessOptions access, UidLimits uid_limits,
                               const DescriptorCaps& caps)
    : max_arena_bytes_(max_arena_bytes),
      max_sessions_(max_sessions),
      budget_(std::make_shared<ArenaBudget>(arena_budget_bytes)),
      store_(store),
      access_(std::move(access)),
      uid_limits_(uid_limits),
      callers_(&access_, caps.identities),
      regions_("client regions", caps.regions),
      data_server_(
          std::move(data_socket), &callers_,
          [this](int c, const DataRequest& request, int fd, const PeerCredentials& peer) { HandOver(c, request, fd, peer); },
          caps) {}

SessionManager::~SessionManager() { Stop(); }

absl::Status SessionManager::Start(uint32_t mode) { return data_server_.Start(mode); }

void SessionManager::Stop() {
  data_server_.Stop();
  populating_.Stop();
}

void SessionManager::HandOver(int c, const DataRequest& request, int fd, const PeerCredentials& peer) {
  std::shared_ptr<Session> session = FindByToken(request.token);
  // Under isolation, a session's memory changes hands only with a process of the session's uid
  // (a leaked token is not enough).
  if (session != nullptr && access_.isolated() && session->uid != peer.uid) {
    foreign_tokens_.Warn(SteadyNowMs(), absl::StrCat("data socket: uid ", peer.uid, " presented the token of session ",
                                                     session->id, " (uid ", session->uid, "); refused"));
    session = nullptr;
  }
  const DataOp op = request.op;
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
        unknown_tokens_.Warn(SteadyNowMs(), "data socket: a peer presented an unknown or used session token");
        return;
      }
      if (absl::Status s = SendFd(c, session->arena->fd()); !s.ok()) {
        failed_hand_overs_.Warn(SteadyNowMs(), absl::StrCat("session ", session->id, ": ", s.message()));
      }
      return;
    case DataOp::kAddRegion:
    case DataOp::kAddPinnedRegion:
      if (session == nullptr) {
        if (fd >= 0) close(fd);
      } else if (fd < 0) {
        answer = absl::InvalidArgumentError("adding a region needs its descriptor attached");
      } else {
        answer = AddRegion(*session, fd, request.argument, op == DataOp::kAddPinnedRegion);
      }
      break;
    case DataOp::kRemoveRegion:
      if (session != nullptr) {
        const absl::Status removed = request.argument > UINT32_MAX
                                         ? absl::NotFoundError("no such region")
                                         : RemoveRegion(*session, static_cast<uint32_t>(request.argument));
        answer = removed.ok() ? absl::StatusOr<uint32_t>(0) : removed;
      }
      break;
    default:
      unknown_requests_.Warn(SteadyNowMs(), absl::StrCat("data socket: unknown request ",
                                                         absl::Hex(static_cast<uint8_t>(op), absl::kZeroPad2)));
      if (fd >= 0) close(fd);
      return;
  }
  SendDataReply(c, answer.status(), answer.ok() ? *answer : 0).IgnoreError();
}

absl::Status SessionManager::Lease(uid_t uid, uint64_t bytes, BudgetLease* lease) {
  std::shared_ptr<ArenaBudget> uid_budget;
  if (uid_limits_.arena_bytes > 0) {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<ArenaBudget>& b = uid_budgets_[uid];
    if (b == nullptr) {
      b = std::make_shared<ArenaBudget>(uid_limits_.arena_bytes,
                                        uid == kAnonymousUid ? "anonymous callers'" : absl::StrCat("uid ", uid, "'s"),
                                        "sessions.arena_budget_per_uid");
    }
    uid_budget = b;
  }
  if (uid_budget != nullptr) {
    if (absl::Status s = uid_budget->Take(bytes); !s.ok()) return s;
  }
  if (absl::Status s = budget_->Take(bytes); !s.ok()) {
    if (uid_budget != nullptr) uid_budget->Give(bytes);
    return s;
  }
  lease->node = budget_;
  lease->uid = std::move(uid_budget);
  lease->bytes = bytes;
  return absl::OkStatus();
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
  absl::StatusOr<UidSlots::Slot> slot = regions_.Take(session.uid);
  if (!slot.ok()) {
    close(fd);
    return slot.status();
  }
  absl::StatusOr<std::unique_ptr<ClientRegion>> memory = ClientRegion::Adopt(fd, size);
  if (!memory.ok()) return memory.status();
  auto region = std::make_shared<SessionRegion>();
  region->slot = *std::move(slot);
  if (absl::Status s = Lease(session.uid, size, &region->lease); !s.ok()) return s;
  region->memory = *std::move(memory);
  region->device_pinned = device_pinned;
  ClientRegion& m = *region->memory;
  // Fixed-buffer reads where the tiers allow it; with the descriptor, so the store can take pages
  // back from a stalled read (it punches the client's file under that range only). Not memory a
  // device pinned: punched pages would leave the device reading the old ones (reads into it go
  // through bounce buffers instead, ChunkRead::bounce).
  if (store_ != nullptr && !device_pinned) store_->RegisterMemory(m.data(), m.size(), m.fd(), 0).IgnoreError();
  // Registration faults a region's pages in off the loop (memory/page_faulter.h); a device-pinned
  // one is not registered but copied into by the loop thread, so its pages are faulted in here
  // rather than by the first steps' copies. In the background, one region at a time: a pool of
  // hundreds of GiB takes longer than the client waits for the answer, and reads into it work
  // meanwhile (they fault what is not in yet). The task holds the region, so it stays mapped until
  // the task is done. With too many queued, the region's pages are faulted in by the first reads
  // instead.
  if (device_pinned) {
    const bool queued = populating_.Post([this, region, session_id = session.id] {
      const ClientRegion& r = *region->memory;
      if (madvise(r.data(), r.size(), MADV_POPULATE_WRITE) != 0) {
        unpopulated_.Warn(SteadyNowMs(), absl::StrCat("session ", session_id, ": cannot fault in the pinned region's pages (",
                                                      std::strerror(errno), "); the first reads into it pay for that"));
      }
    });
    if (!queued) {
      unpopulated_.Warn(SteadyNowMs(), absl::StrCat("session ", session.id, ": too many pinned regions are being faulted "
                                                    "in; the first reads into this one pay for that"));
    }
  }
  uint32_t id;
  {
    absl::MutexLock lock(&session.regions_mu);
    if (session.removed) {  // detached while this was added: Remove has unregistered the others
      if (store_ != nullptr && !device_pinned) store_->UnregisterMemory(m.data());
      return absl::NotFoundError(absl::StrCat("session ", session.id, " was detached"));
    }
    id = session.next_region++;
    region->id = id;
    session.regions[id] = region;
  }
  spdlog::debug("session {}: client region {} added: {} bytes, {}{}", session.id, id, m.size(),
               m.direct() ? "a sealed tmpfs memfd (touched directly)" : "reached through its descriptor",
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
                                                                uint32_t world_size, uint64_t arena_bytes, uid_t uid) {
  if (arena_bytes == 0 || arena_bytes > max_arena_bytes_) {
    return absl::InvalidArgumentError("arena of " + std::to_string(arena_bytes) + " bytes is outside (0, " +
                                      std::to_string(max_arena_bytes_) + "] (sessions.max_arena)");
  }
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError("rank " + std::to_string(rank) + " is not below world size " +
                                      std::to_string(world_size));
  }
  auto too_many = [this, uid]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (sessions_.size() >= max_sessions_) {
      return absl::ResourceExhaustedError(absl::StrCat(sessions_.size(), " sessions are attached, the most ",
                                                       "sessions.max_sessions allows; detach one or raise it"));
    }
    if (uid_limits_.max_sessions == 0) return absl::OkStatus();
    const auto held = std::count_if(sessions_.begin(), sessions_.end(), [uid](const auto& kv) { return kv.second->uid == uid; });
    if (static_cast<uint64_t>(held) < uid_limits_.max_sessions) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(uid == kAnonymousUid ? std::string("anonymous callers") : absl::StrCat("uid ", uid),
                                                     " has ", held, " sessions attached, the most sessions.max_sessions_per_uid allows"));
  };
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = too_many(); !s.ok()) return s;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto session = std::make_shared<Session>();
  session->uid = uid;
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
  // From here on, the session gives the bytes back when freed.
  if (absl::Status s = Lease(uid, bytes, &session->lease); !s.ok()) return s;
  auto arena = Arena::Create("kvstream-session-" + std::to_string(session->id), bytes);
  if (!arena.ok()) return arena.status();
  session->arena = *std::move(arena);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = too_many(); !s.ok()) return s;  // others attached meanwhile
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
    session->removed = true;  // a region added from here on is undone by AddRegion
  }
  for (const auto& [region_id, region] : regions) {
    Unregister(*region);
    region->lease.Release();  // calls in flight may hold the region a while longer
  }
  session->lease.Release();  // as its arena: only the removal (once) releases it before the end
}

size_t SessionManager::count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace kvstream
