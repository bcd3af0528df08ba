// kvstream::Store: the storage core. Owns the tiers, the index, the step pool with its routing
// (M1, M4), the write stager and the replicator (M2, M3), all driven by one I/O completion loop.
// Store is an interface so that what serves it (kvstreamd's service) can be tested against a
// fake; Store::Open builds the real one on directories.
//
// Thread safety: every method may be called from any thread. Callbacks run on the store's I/O
// thread; they must be quick and must not call Retrieve, Persist, Flush, Evict, RegisterMemory,
// UnregisterMemory, SetPolicies or the destructor (those wait for the I/O thread).
// RetrieveAsync, TryPersist, Lookup, PrefixHits, policies and Stats are safe in callbacks.
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

// One chunk to read. The store writes the payload to dst[0, size) where size is the chunk's
// stored size; dst_capacity must be at least that. Reads go straight into dst by O_DIRECT when
// dst is aligned to the tier's memory alignment; otherwise through a bounce buffer. When
// dst_capacity allows, the last block is read whole, so bytes in [size, align_up(size, 4096))
// may be overwritten (with the file's zero padding).
//
// With dst_fd >= 0, dst maps the file dst_fd from dst_fd_offset, and that file belongs to someone
// who may shrink it at any time (a client's unsealed shared memory), where a plain load or store
// of a vanished page would kill the process (SIGBUS). The store then touches dst with the CPU only
// under a SIGBUS guard that turns a vanished page into an error (copying a bounced block in,
// hashing a block to verify it); reads land there by O_DIRECT, where a vanished page fails that
// read. A destination that shrank fails its chunk with FailedPrecondition and counts against no
// tier. Any destination may be written by its owner while a read lands: a block that hashes
// wrong where it landed is read again through a bounce buffer, and only a mismatch there counts
// against its tier.
//
// With `bounce`, every block goes through a bounce buffer and is copied in once verified: for
// memory a device has pinned (cudaHostRegister), whose pages the store must never replace under
// a stalled read (RegisterMemory's take-back would leave the device reading the old ones), yet a
// stalled read must still be abandoned for another tier's.
struct ChunkRead {
  std::string key;
  void* dst = nullptr;
  size_t dst_capacity = 0;
  int dst_fd = -1;
  uint64_t dst_fd_offset = 0;
  bool bounce = false;
};

// Bytes to persist that live in a file another process may shrink at any time: `size` bytes of
// `fd` at `offset`, copied into staging with pread (a short read fails the persist).
struct FileRange {
  int fd = -1;
  uint64_t offset = 0;
  size_t size = 0;
};

class Store {
 public:
  // Opens (creating if needed) every tier directory, takes an exclusive lock on it, probes O_DIRECT,
  // removes temporaries and invalid chunk files, rebuilds the index and starts the I/O loop.
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreConfig& config);
  // The most descriptors a store opened with `config` (as validated) opens beyond those it holds
  // once open: the chunk files each tier keeps open for reads and those of its writes in flight.
  static uint64_t DescriptorsToGrow(const StoreConfig& config);

  // Stops accepting work, writes every staged chunk, waits for in-flight I/O and closes the tiers.
  virtual ~Store() = default;

  // Reads every chunk of `step` from the pool shared with all concurrent steps. `on_chunk`
  // (optional) fires per chunk as it completes; `on_done` fires once, after the last one.
  // The destination buffers must stay valid until on_done.
  virtual void RetrieveAsync(std::vector<ChunkRead> step, ChunkCallback on_chunk,
                             std::function<void(StepRecord)> on_done) = 0;

  // Blocking form of RetrieveAsync: returns the step record; `results` (optional) gets one result
  // per chunk, in request order.
  StepRecord Retrieve(std::vector<ChunkRead> step, std::vector<ChunkResult>* results = nullptr,
                      ChunkCallback on_chunk = nullptr);

  // Copies `data` into staging and returns; the chunk is written to its tiers later (M2, M3).
  // Blocks while staging is full. InvalidArgument for a bad key or a chunk larger than staging.
  virtual absl::Status Persist(std::string_view key, const void* data, size_t size,
                               PersistCallback on_written = nullptr) = 0;
  // As Persist, but returns ResourceExhausted instead of blocking when staging is full.
  virtual absl::Status TryPersist(std::string_view key, const void* data, size_t size,
                                  PersistCallback on_written = nullptr) = 0;
  // As Persist (`wait`) or TryPersist (!wait), reading the payload from `source` with pread.
  // FailedPrecondition when the file is shorter than the range (nothing is staged).
  virtual absl::Status PersistFromFile(std::string_view key, const FileRange& source, PersistCallback on_written,
                                       bool wait) = 0;
  // Waits until every chunk staged before the call is written or failed and its callback has run.
  virtual void Flush() = 0;

  virtual std::vector<LookupEntry> Lookup(const std::vector<std::string>& keys) const = 0;
  // Number of leading keys present (the reusable prefix of a request).
  virtual size_t PrefixHits(const std::vector<std::string>& keys) const = 0;
  // The load estimate for what Lookup found (docs/design.md, "Load or recompute"): per entry, the
  // expected seconds from now to have its chunk and every present entry before it read, all tiers
  // reading at once behind the reads already queued, from each tier's current bandwidth, read
  // latency and oldest read in flight. +inf when only stalled or unreachable tiers hold one of
  // them; NaN when a holder has no bandwidth measured yet. A chunk in staging adds nothing.
  virtual std::vector<double> LoadSeconds(const std::vector<LookupEntry>& entries) const = 0;
  // Lookup that also locks each key present against capacity eviction (LMCache's pin, its L2
  // lookup-and-lock) until Unlock or for `lease_seconds` (> 0), whichever ends first: a crashed
  // client's locks end with their lease. Locks count (two locks need two unlocks); an explicit
  // Evict still removes a locked key.
  virtual std::vector<LookupEntry> LookupAndLock(const std::vector<std::string>& keys, double lease_seconds) = 0;
  // Releases one lock of each key; returns how many of the keys held one.
  virtual size_t Unlock(const std::vector<std::string>& keys) = 0;

  virtual absl::StatusOr<EvictResult> Evict(const EvictRequest& request) = 0;

  // Registers long-lived destination memory (a session arena) for fixed-buffer I/O on every tier
  // that supports it, so reads into it skip per-I/O page pinning. With `fd` >= 0, the file that
  // maps [base, base + size) from `fd_offset` (a memfd or a tmpfs file, kept open by the caller
  // until unregistered): the store may then take pages back from a stalled read into it
  // (fallocate PUNCH_HOLE) and serve the step from another tier; reads straight into other memory
  // are waited for when they stall. Unimplemented when no tier can register buffers and there is
  // no fd (reads into it still work). Returns at once, whatever the size: the memory's pages are
  // faulted in off the I/O thread and it is registered piece by piece (16 MiB) as they come in;
  // reads into a piece not registered yet go through bounce buffers. UnregisterMemory stops that; the
  // memory may be freed once it returns. REQUIRES: no retrieval into it is pending when
  // unregistered, and not unregistered while it is being registered.
  virtual absl::Status RegisterMemory(void* base, size_t size, int fd = -1, uint64_t fd_offset = 0) = 0;
  virtual void UnregisterMemory(void* base) = 0;

  // Asks for new routing, batching, write and replication policies (replication for chunks staged
  // from then on) and returns at once. Steps already pending finish under the old ones; the new
  // ones apply to steps placed after every pending step has finished (at once when none is
  // pending). Returns true when they are in force on return.
  virtual bool SetPolicies(const Policies& policies) = 0;
  virtual Policies policies() const = 0;  // the ones in force

  virtual StoreStats Stats() const = 0;
  // The most recent step records, oldest first (at most `max` of them).
  virtual std::vector<StepRecord> RecentSteps(size_t max) const = 0;
  virtual const StoreConfig& config() const = 0;  // as opened (policies may have changed since)
};

}  // namespace kvstream
