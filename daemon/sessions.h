// Sessions: one per client (tensor-parallel rank). Each owns a sealed memfd arena; the arena's
// descriptor is handed out once, over the data socket, to the peer presenting the session's token.
// A session's arena stays alive while any retrieval or persist into it is in flight.
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

struct Session {
  ~Session() {
    if (budget) budget->Give(budget_bytes);
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
};

class SessionManager {
 public:
  static constexpr uint32_t kDefaultMaxSessions = 256;

  // `data_socket` is the Unix socket path that hands out arena descriptors; `max_arena` bounds
  // one session's arena, `arena_budget` all arenas together and `max_sessions` the sessions
  // attached at once (each holds an fd, a mapping and registered buffers on every tier).
  SessionManager(std::string data_socket, uint64_t max_arena_bytes, uint64_t arena_budget_bytes,
                 uint32_t max_sessions = kDefaultMaxSessions);
  ~SessionManager();

  // Binds and listens on the data socket (mode like the control socket) and starts its thread.
  absl::Status Start(uint32_t mode);
  void Stop();

  absl::StatusOr<std::shared_ptr<Session>> Create(const std::string& model, uint32_t rank, uint32_t world_size,
                                                  uint64_t arena_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Session> Find(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The session `id` if `token` is its token (compared in constant time), else null.
  std::shared_ptr<Session> Authorize(uint64_t id, const std::string& token) const ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t arena_bytes() const { return budget_->used(); }
  uint64_t arena_budget() const { return budget_->limit(); }
  const std::string& data_socket() const { return data_socket_; }

 private:
  void Serve();
  void HandOver(int connection) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string data_socket_;
  const uint64_t max_arena_bytes_;
  const uint32_t max_sessions_;
  const std::shared_ptr<ArenaBudget> budget_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace kvstream
