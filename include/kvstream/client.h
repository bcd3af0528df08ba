// kvstream::Client: one tensor-parallel rank's connection to kvstreamd. Attaching creates a
// session with a shared-memory arena that both sides map; retrieves land in the arena and persists
// are copied from it. The session ends when the Client is destroyed (or the process dies).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream/policies.h"
#include "kvstream/types.h"

namespace kvstream {

struct AttachOptions {
  std::string model;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t arena_bytes = 256ull << 20;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Attach(const std::string& socket_path, const AttachOptions& options);
  // A connection without a session (no arena): Lookup, Stats, Steps, Evict and SetPolicies only. Fails with
  // Unavailable when no daemon answers on the socket.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& socket_path);
  ~Client();

  uint64_t session_id() const;
  uint8_t* arena() const;
  uint64_t arena_size() const;

  // Hands the daemon `size` bytes of shared memory of the caller's own as a client region of this
  // session and returns its id (ChunkRange::region), so chunks are retrieved into and persisted
  // from memory the caller already uses. `fd`: a memfd or a /dev/shm (or hugetlbfs) file open
  // read-write, at least `size` bytes long; the caller keeps its descriptor. A file that is not a
  // memfd sealed against shrinking may be truncated at any time: chunks in flight into the part
  // that went away fail (FailedPrecondition), nothing else does. Counts against the node's arena
  // budget; at most 64 per session. `device_pinned`: a device reads this memory too (it was
  // registered with cudaHostRegister): the daemon then never replaces its pages under a stalled
  // read, and reads into it land through its bounce buffers (one copy in the daemon) instead of
  // straight by O_DIRECT.
  absl::StatusOr<uint32_t> AddRegion(int fd, uint64_t size, bool device_pinned = false);
  // The daemon forgets the region; retrievals and persists in flight into it finish first.
  absl::Status RemoveRegion(uint32_t region);

  // Presence of each key and the number of leading keys present. With `lock_seconds` > 0 (at
  // most 3600), each key present is also locked against capacity eviction until Unlock or for
  // that long (Store::LookupAndLock), unless that would take the caller's tenant past its locked
  // bytes (sessions.locked_bytes_per_uid): LookupEntry::locked says which keys were locked.
  // With `load_seconds`, the daemon's load estimate per key too (Store::LoadSeconds).
  absl::StatusOr<std::vector<LookupEntry>> Lookup(const std::vector<std::string>& keys, size_t* prefix_hits = nullptr,
                                                   double lock_seconds = 0, std::vector<double>* load_seconds = nullptr);
  // Releases one lock of each key; returns how many held one.
  absl::StatusOr<size_t> Unlock(const std::vector<std::string>& keys);
  // One step: `on_chunk` fires per chunk as it lands (on the calling thread). A bad request
  // (unknown session, range outside the arena, malformed key) fails as a whole.
  absl::StatusOr<StepRecord> Retrieve(const std::vector<ChunkRange>& chunks, std::vector<ChunkResult>* results = nullptr,
                                      const std::function<void(const ChunkResult&)>& on_chunk = nullptr);
  // Stages the chunks and waits until each is written to its tiers (or failed); results in
  // request order, each saying which replicas are synced (PersistResult::durable).
  absl::Status Persist(const std::vector<ChunkRange>& chunks, std::vector<PersistResult>* results = nullptr);

  absl::StatusOr<StoreStats> Stats(uint32_t* sessions = nullptr);
  absl::StatusOr<HealthReport> Health();
  absl::StatusOr<std::vector<StepRecord>> Steps(uint32_t max);
  absl::StatusOr<EvictResult> Evict(const EvictRequest& request);
  // Asks the daemon for new policies, as Store::SetPolicies does (ChangePolicies in policies.h
  // makes them from the current ones and names on a command line). Returns the policies in force
  // on return: the requested ones, or, while steps are pending, the old ones (`pending`: the
  // requested ones follow once those steps finish).
  struct PoliciesInForce {
    Policies policies;
    bool pending = false;
  };
  absl::StatusOr<PoliciesInForce> SetPolicies(const Policies& policies);

  struct Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstream
