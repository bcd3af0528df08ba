// Sessions: one per client (tensor-parallel rank). Each owns a sealed memfd arena; the arena's
// descriptor is handed out once, over the data socket (data_socket.h), to the peer presenting the
// session's token. A session may also add shared memory of its own as client regions
// (client_region.h), numbered from 1 (region 0 is the arena) and counted against the node's arena
// budget. A session's arena and regions stay alive while any retrieval or persist into them is in
// flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "arena.h"
#include "client_region.h"
#include "kvstream/store.h"

namespace kvstream {

// The node-wide budget of arena bytes (sessions.arena_budget): every session's arena holds a
// lease on it until the arena is freed (which may be after the session ended, while reads into it
// finish).
class ArenaBudget {
 public:
  explicit ArenaBudget(uint64_t limit_bytes) : limit_(limit_bytes) {}
  // Takes `bytes` of the budget, or ResourceExhausted saying what is in use.
  absl::Status Take(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Give(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t limit() const { return limit_; }
  uint64_t used() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t limit_;
  mutable absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t holders_ ABSL_GUARDED_BY(mu_) = 0;
};

// A client region as its session holds it, with its lease on the arena budget.
struct SessionRegion {
  ~SessionRegion() {
    if (budget) budget->Give(bytes);
  }
  uint32_t id = 0;
  bool device_pinned = false;  // a device reads it too: never registered with the store (no take-back)
  std::unique_ptr<ClientRegion> memory;
  std::shared_ptr<ArenaBudget> budget;
  uint64_t bytes = 0;
};

struct Session {
  static constexpr uint32_t kMaxRegions = 64;

  ~Session() {
    if (budget) budget->Give(budget_bytes);
  }
  // Client region `id` (>= 1), or null.
  std::shared_ptr<SessionRegion> Region(uint32_t id) const ABSL_LOCKS_EXCLUDED(regions_mu) {
    absl::MutexLock lock(&regions_mu);
    auto it = regions.find(id);
    return it == regions.end() ? nullptr : it->second;
  }
  uint64_t id = 0;
  std::string model;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string token;           // 32 random bytes
  std::shared_ptr<Arena> arena;
  std::atomic<bool> fd_sent{false};
  std::shared_ptr<ArenaBudget> budget;  // given back when the session (and its arena) is freed
  uint64_t budget_bytes = 0;
  mutable absl::Mutex regions_mu;
  std::map<uint32_t, std::shared_ptr<SessionRegion>> regions ABSL_GUARDED_BY(regions_mu);
  uint32_t next_region ABSL_GUARDED_BY(regions_mu) = 1;
};

class SessionManager {
 public:
  static constexpr uint32_t kDefaultMaxSessions = 256;

  // `data_socket` is the Unix socket path that hands out arena descriptors; `max_arena` bounds
  // one session's arena, `arena_budget` all arenas and client regions together and
  // `max_sessions` the sessions attached at once (each holds an fd, a mapping and registered
  // buffers on every tier). `store` (optional) registers client regions for fixed-buffer reads.
  SessionManager(std::string data_socket, uint64_t max_arena_bytes, uint64_t arena_budget_bytes,
                 uint32_t max_sessions = kDefaultMaxSessions, Store* store = nullptr);
  ~SessionManager();

  // Binds and listens on the data socket (mode like the control socket) and starts its thread.
  absl::Status Start(uint32_t mode);
  void Stop();

  absl::StatusOr<std::shared_ptr<Session>> Create(const std::string& model, uint32_t rank, uint32_t world_size,
                                                  uint64_t arena_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Session> Find(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The session `id` if `token` is its token (compared in constant time), else null.
  std::shared_ptr<Session> Authorize(uint64_t id, const std::string& token) const ABSL_LOCKS_EXCLUDED(mu_);
  // Detaches session `id`: its client regions are removed (RemoveRegion) at once.
  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Adopts `fd` (owned from here on) as a new client region of `session` of `size` bytes and
  // returns its id. Refused with a clear error when the descriptor is unfit (ClientRegion::Adopt),
  // the session has Session::kMaxRegions, or the arena budget cannot cover it. `device_pinned`:
  // a device reads the region too (cudaHostRegister), so the store never replaces its pages; reads
  // into it go through bounce buffers (ChunkRead::bounce).
  absl::StatusOr<uint32_t> AddRegion(Session& session, int fd, uint64_t size, bool device_pinned = false);
  // Forgets client region `id`: later requests cannot name it; it is unmapped (and its budget given
  // back) once no retrieval or persist uses it. NotFound when there is no such region.
  absl::Status RemoveRegion(Session& session, uint32_t id);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t arena_bytes() const { return budget_->used(); }
  uint64_t arena_budget() const { return budget_->limit(); }
  const std::string& data_socket() const { return data_socket_; }

 private:
  void Serve();
  // Serves one data socket request (data_socket.h).
  void HandOver(int connection) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Session> FindByToken(const char* token) const ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(const SessionRegion& region);

  const std::string data_socket_;
  const uint64_t max_arena_bytes_;
  const uint32_t max_sessions_;
  const std::shared_ptr<ArenaBudget> budget_;
  Store* const store_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
  // Faulting in device-pinned regions' pages (AddRegion), joined by Stop.
  absl::Mutex populate_mu_;
  std::vector<std::thread> populating_ ABSL_GUARDED_BY(populate_mu_);
};

}  // namespace kvstream
