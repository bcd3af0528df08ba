// Sessions: one per client (tensor-parallel rank), each of the uid of the caller that attached it. Each owns a sealed memfd arena; the arena's
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

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "arena.h"
#include "callers.h"
#include "client_region.h"
#include "data_server.h"
#include "descriptor_caps.h"
#include "task_pool.h"
#include "throttled_warning.h"
#include "uid_slots.h"
#include "kvstream/store.h"

namespace kvstream {

// The node-wide budget of arena bytes (sessions.arena_budget): every session's arena and client
// region holds a lease on it until the session is removed (its memory may outlive it briefly,
// while calls in flight into it finish).
class ArenaBudget {
 public:
  // `owner` and `setting` name the budget in refusals ("the node's", "sessions.arena_budget").
  explicit ArenaBudget(uint64_t limit_bytes, std::string owner = "the node's",
                       std::string setting = "sessions.arena_budget")
      : limit_(limit_bytes), owner_(std::move(owner)), setting_(std::move(setting)) {}
  // Takes `bytes` of the budget, or ResourceExhausted saying what is in use.
  absl::Status Take(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void Give(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t limit() const { return limit_; }
  uint64_t used() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t limit_;
  const std::string owner_, setting_;
  mutable absl::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t holders_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bytes taken from the node's arena budget and from the owner uid's (when it has one), given back
// by Release or when the lease is destroyed, whichever comes first.
struct BudgetLease {
  BudgetLease() = default;
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;
  ~BudgetLease() { Release(); }
  // Gives the bytes back now (once). Not concurrently with itself.
  void Release() {
    if (node) node->Give(bytes);
    if (uid) uid->Give(bytes);
    node.reset();
    uid.reset();
  }
  std::shared_ptr<ArenaBudget> node;
  std::shared_ptr<ArenaBudget> uid;  // null: the uid has no budget of its own
  uint64_t bytes = 0;
};

// A client region as its session holds it, with its lease on the arena budget.
struct SessionRegion {
  UidSlots::Slot slot;  // of DescriptorCaps::regions: the region holds a descriptor
  uint32_t id = 0;
  bool device_pinned = false;  // a device reads it too: never registered with the store (no take-back)
  std::unique_ptr<ClientRegion> memory;
  BudgetLease lease;
};

inline constexpr uid_t kAnonymousUid = static_cast<uid_t>(-1);  // a session attached without a caller token

struct Session {
  static constexpr uint32_t kMaxRegions = 64;

  // Client region `id` (>= 1), or null.
  std::shared_ptr<SessionRegion> Region(uint32_t id) const ABSL_LOCKS_EXCLUDED(regions_mu) {
    absl::MutexLock lock(&regions_mu);
    auto it = regions.find(id);
    return it == regions.end() ? nullptr : it->second;
  }
  uint64_t id = 0;
  uid_t uid = kAnonymousUid;   // of the caller that attached it: its keys' namespace under isolation
  std::string model;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  std::string token;           // 32 random bytes
  std::shared_ptr<Arena> arena;
  std::atomic<bool> fd_sent{false};
  BudgetLease lease;  // given back when the session (and its arena) is freed
  mutable absl::Mutex regions_mu;
  std::map<uint32_t, std::shared_ptr<SessionRegion>> regions ABSL_GUARDED_BY(regions_mu);
  bool removed ABSL_GUARDED_BY(regions_mu) = false;  // detached (SessionManager::Remove)
  uint32_t next_region ABSL_GUARDED_BY(regions_mu) = 1;
};

// Limits per client uid (0: only the node's limits apply).
struct UidLimits {
  uint32_t max_sessions = 0;      // sessions.max_sessions_per_uid
  uint64_t arena_bytes = 0;       // sessions.arena_budget_per_uid
};

class SessionManager {
 public:
  static constexpr uint32_t kDefaultMaxSessions = 256;

  // `data_socket` is the Unix socket path that hands out arena descriptors; `max_arena` bounds
  // one session's arena, `arena_budget` all arenas and client regions together and
  // `max_sessions` the sessions attached at once (each holds an fd, a mapping and registered
  // buffers on every tier). `store` (optional) registers client regions for fixed-buffer reads.
  // `access` and `uid_limits`: who may do what (callers.h) and how much one uid may hold.
  // `caps`: the data socket's connections and requests, identities and client regions, in total
  // and per uid.
  SessionManager(std::string data_socket, uint64_t max_arena_bytes, uint64_t arena_budget_bytes,
                 uint32_t max_sessions = kDefaultMaxSessions, Store* store = nullptr, AccessOptions access = {},
                 UidLimits uid_limits = {}, const DescriptorCaps& caps = {});
  ~SessionManager();

  // Binds and listens on the data socket (mode like the control socket) and starts serving it.
  absl::Status Start(uint32_t mode);
  void Stop();

  // A session for `uid` (the attaching caller's; kAnonymousUid without one). Refused past the
  // node's or the uid's session count or arena budget.
  absl::StatusOr<std::shared_ptr<Session>> Create(const std::string& model, uint32_t rank, uint32_t world_size,
                                                  uint64_t arena_bytes, uid_t uid = kAnonymousUid)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Session> Find(uint64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The session `id` if `token` is its token (compared in constant time), else null.
  std::shared_ptr<Session> Authorize(uint64_t id, const std::string& token) const ABSL_LOCKS_EXCLUDED(mu_);
  // Detaches session `id`: its client regions are removed (RemoveRegion) and its budget, with
  // theirs, given back at once.
  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Adopts `fd` (owned from here on) as a new client region of `session` of `size` bytes and
  // returns its id. Refused with a clear error when the descriptor is unfit (ClientRegion::Adopt),
  // the session has Session::kMaxRegions, the node or the uid has all the regions it may
  // (DescriptorCaps::regions), or the arena budget cannot cover it. `device_pinned`:
  // a device reads the region too (cudaHostRegister), so the store never replaces its pages; reads
  // into it go through bounce buffers (ChunkRead::bounce).
  absl::StatusOr<uint32_t> AddRegion(Session& session, int fd, uint64_t size, bool device_pinned = false);
  // Forgets client region `id`: later requests cannot name it; it is unmapped (and its budget given
  // back) once no retrieval or persist uses it. NotFound when there is no such region.
  absl::Status RemoveRegion(Session& session, uint32_t id);
  size_t count() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t arena_bytes() const { return budget_->used(); }
  uint64_t arena_budget() const { return budget_->limit(); }
  const std::string& data_socket() const { return data_server_.path(); }
  const AccessPolicy& access() const { return access_; }
  const CallerRegistry& callers() const { return callers_; }

 private:
  // Answers one data socket request (data_socket.h) from `peer` on `connection`.
  void HandOver(int connection, const DataRequest& request, int fd, const PeerCredentials& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<Session> FindByToken(const char* token) const ABSL_LOCKS_EXCLUDED(mu_);
  void Unregister(const SessionRegion& region);
  // Takes `bytes` of the node's budget and of `uid`'s into `lease`.
  absl::Status Lease(uid_t uid, uint64_t bytes, BudgetLease* lease) ABSL_LOCKS_EXCLUDED(mu_);

  const uint64_t max_arena_bytes_;
  const uint32_t max_sessions_;
  const std::shared_ptr<ArenaBudget> budget_;
  Store* const store_;
  const AccessPolicy access_;
  const UidLimits uid_limits_;
  CallerRegistry callers_;
  UidSlots regions_;  // every session's client regions
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  std::map<uid_t, std::shared_ptr<ArenaBudget>> uid_budgets_ ABSL_GUARDED_BY(mu_);
  // Faulting in device-pinned regions' pages (AddRegion), one region after another.
  TaskPool populating_{"kvs-populate", 1, 4 * Session::kMaxRegions};
  // What a client can make happen at will, logged at most once per interval each.
  ThrottledWarning foreign_tokens_, unknown_tokens_, failed_hand_overs_, unknown_requests_, unpopulated_;
  DataServer data_server_;  // last: stopped (and destroyed) before what its requests use
};

}  // namespace kvstream
