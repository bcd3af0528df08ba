// kvstream::Store: the storage core. Owns the tiers, the index, the step pool with its router
// (M1, M4) and the write stager (M2, M3), all driven by one I/O completion thread.
//
// Thread safety: every method may be called from any thread. Callbacks run on the store's I/O
// thread; they must be quick and must not call Retrieve, Persist, Flush, Evict, RegisterMemory,
// UnregisterMemory or the destructor (those wait for the I/O thread). RetrieveAsync, TryPersist,
// Lookup, PrefixHits and Stats are safe in callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstream/config.h"
#include "kvstream/types.h"

namespace kvstream {

class Engine;

struct LookupResult {
  bool present = false;
  uint64_t size = 0;
  uint32_t tier_mask = 0;  // tiers holding a durable replica
};

struct EvictRequest {
  std::string key;        // non-empty: evict this key (from `tier`, or from every tier)
  std::string tier;       // empty: every tier
  uint64_t bytes = 0;     // with an empty key and bytes > 0: evict LRU chunks until this many bytes are freed per tier
  bool all = false;       // with an empty key: evict everything (from `tier`, or every tier)
};

struct EvictResult {
  uint64_t replicas = 0;
  uint64_t bytes = 0;
};

class Store {
 public:
  // Opens (creating if needed) every tier directory, takes an exclusive lock on it, probes O_DIRECT,
  // removes temporaries and invalid chunk files, rebuilds the index and starts the I/O thread.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreConfig& config);

  // Stops accepting work, writes every staged chunk, waits for in-flight I/O and closes the tiers.
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Reads every chunk of `batch` (one step) from the pool shared with all concurrent retrievals.
  // `on_chunk` (optional) fires per chunk as it completes; `on_done` fires once, after the last one.
  // The destination buffers must stay valid until on_done.
  void RetrieveAsync(std::vector<ChunkRead> batch, ChunkCallback on_chunk,
                     std::function<void(StepRecord)> on_done);

  // Blocking form: returns the step record; `results` (optional) gets one result per chunk, in
  // batch order.
  StepRecord Retrieve(std::vector<ChunkRead> batch, std::vector<ChunkResult>* results = nullptr,
                      ChunkCallback on_chunk = nullptr);

  // Copies `data` into staging and returns; the chunk is written to its tiers later (M2, M3).
  // Blocks while staging is full. InvalidArgument for a bad key or a chunk larger than staging.
  absl::Status Persist(std::string_view key, const void* data, size_t size,
                       PersistCallback on_durable = nullptr);
  // As Persist, but returns ResourceExhausted instead of blocking when staging is full.
  absl::Status TryPersist(std::string_view key, const void* data, size_t size,
                          PersistCallback on_durable = nullptr);
  // Waits until every chunk staged before the call is durable or failed and its callback has run.
  void Flush();

  std::vector<LookupResult> Lookup(const std::vector<std::string>& keys) const;
  // Number of leading keys present (the reusable prefix of a request).
  size_t PrefixHits(const std::vector<std::string>& keys) const;

  absl::StatusOr<EvictResult> Evict(const EvictRequest& request);

  // Registers long-lived destination memory (a session arena) for fixed-buffer I/O on every tier
  // that supports it, so reads into it skip per-I/O page pinning. Unimplemented when no tier can
  // (reads into it still work). REQUIRES: no retrieval into it is pending when unregistered.
  absl::Status RegisterMemory(void* base, size_t size);
  void UnregisterMemory(void* base);

  // Switches routing, batching and write policies. Retrievals already pending finish under the
  // old ones; the new ones apply once no retrieval is pending (at once when idle). Returns then.
  void SetPolicies(const Policies& policies);
  Policies policies() const;  // the ones in force

  StoreStats Stats() const;
  // The most recent step records, oldest first (at most `max` of them).
  std::vector<StepRecord> RecentSteps(size_t max) const;
  const StoreConfig& config() const;  // as opened (policies may have changed since)

  // Wraps an engine built by Open.
  explicit Store(std::unique_ptr<Engine> engine);

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace kvstream
