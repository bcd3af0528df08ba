// WriteStager (M2): new KV waits in bounded staging memory, as a ready-to-write chunk image, until
// the replicator writes it. Producers block (or are refused) while staging is full. Under the
// deferred write policy, writes run while no read is pending (during the forward pass), when a
// chunk not yet written has waited `max_defer` (reads that never pause do not starve writes: they
// then share the tiers with them), or under pressure: staging above its high-water mark, a
// producer waiting for space, or a drain at shutdown. Thread-safe: producers stage from any
// thread, the loop takes and finishes chunks.
//
// A persist is answered "staged" as soon as its copy is here, so a staged chunk is already the
// store's: lookups find it (StagedVersion, LockStaged) and steps read it from staging memory
// (NewestStaged) from the moment it is staged until it is released, by which time its replicas
// are in the index (or failed). Lock order: the index's lock, then this one.
#pragma once

#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_format.h"
#include "io/reactor.h"
#include "kvstream/policies.h"
#include "kvstream/store.h"
#include "kvstream/types.h"
#include "memory/staging_memory.h"

namespace kvstream {

class ChunkMacKey;

// One chunk in staging: its file image (header, payload, padding) ready to write.
struct StagedChunk {
  uint64_t seq = 0;  // staging order
  std::shared_ptr<const ChunkMeta> meta;
  std::string stem;
  StagingMemory::Buffer image;  // image_size bytes used
  uint64_t image_size = 0;
  uint32_t payload_offset = 0;  // where the payload starts in the image (after the header)
  PersistCallback callback;

  const uint8_t* payload() const { return image.get() + payload_offset; }
};

// Lookup-and-lock's locks on a key taken while only staging held it (Index::Lock's count and
// lease), moved onto its index entry once a replica is indexed.
struct StagedLocks {
  uint32_t count = 0;
  int64_t until_ns = 0;
};

class WriteStager {
 public:
  // `reactor` is woken when a chunk is staged or a producer starts waiting for space; its clock
  // times how long chunks wait (`max_defer_ns`).
  WriteStager(uint64_t limit_bytes, double high_water, uint32_t block_size, int64_t max_defer_ns, Reactor* reactor);
  // The cluster key (format/chunk_mac.h): every chunk staged from now on carries its MAC, so its image,
  // the same on every tier, is one a shared tier accepts. REQUIRES: before the first Stage.
  void set_mac_key(std::shared_ptr<const ChunkMacKey> key) { mac_key_ = std::move(key); }

  // Copies the chunk into staging. When staging is full: waits for space if `block`, else
  // ResourceExhausted. InvalidArgument for a bad key, an empty chunk or one larger than staging;
  // Unavailable once stopped.
  // `verified`: the payload's checksums, already verified (a chunk read from another node's
  // file): reused instead of hashing the copy when its segment size is this stager's block size.
  // A byte of the source that changed since it was verified then fails the copy's reads (never
  // served, the replica dropped), where hashing the copy would store it as valid.
  absl::Status Stage(std::string_view key, const void* data, size_t size, PersistCallback on_written, bool block,
                     const ChunkMeta* verified = nullptr);
  // As Stage, copying the payload from a file with pread (memory/client_memory.h): FailedPrecondition,
  // and nothing staged, when the file no longer covers the range.
  absl::Status StageFromFile(std::string_view key, const FileRange& source, PersistCallback on_written, bool block,
                             const ChunkMeta* verified = nullptr);

  // Loop: moves the chunks staged since the last call (oldest first) to `out`.
  void TakeStaged(std::vector<std::unique_ptr<StagedChunk>>* out);
  // Loop: every replica of the chunk is written or failed. Frees its staging, counts it, runs its
  // callback, and only then lets Flush see it as done. (Acknowledge, then Release.)
  void Finish(std::unique_ptr<StagedChunk> chunk, const PersistResult& result);
  // Loop: the chunk is written where its persist promises it (adaptive replication: on its primary)
  // while more copies may still be written from its image: counts it, runs its callback, and lets
  // Flush see it as done. Its staging stays taken until Release.
  void Acknowledge(StagedChunk* chunk, const PersistResult& result);
  // Loop: the chunk is done (its replicas indexed or failed): lookups and steps no longer find it
  // here, and its key's locks still held here are dropped (TakeLocks first). Idempotent.
  void Unlist(const StagedChunk& chunk);
  // Loop: frees the staging of an acknowledged chunk (Unlist first if not yet).
  void Release(std::unique_ptr<StagedChunk> chunk);

  // The newest version of `key` staged and not yet released, or null. Any thread.
  std::shared_ptr<const ChunkMeta> StagedVersion(std::string_view key) const;
  // Locks a staged key until `until_ns` (store clock) or UnlockStaged, as Index::Lock does; the
  // lock moves to the index with TakeLocks. False, and nothing locked, when the key is not staged.
  bool LockStaged(std::string_view key, int64_t until_ns);
  // Releases one lock LockStaged took on `key` and still holds here; false if none.
  bool UnlockStaged(std::string_view key);
  // The locks held here on `key`, handed over (forgotten here).
  StagedLocks TakeLocks(std::string_view key);
  // Loop: the newest staged version of `key`, or null; valid until the loop releases it.
  const StagedChunk* NewestStaged(std::string_view key) const;
  // Producers wait for space, staging is above its high-water mark, or the stager is stopping.
  bool pressure() const;
  // As pressure, at half the high-water mark: copies that are only nice to have (adaptive
  // secondaries) give their room back before the chunks that still need writing push staging into
  // pressure (where writes run during reads).
  bool filling() const;

  // Whether writes may run at `now_ns` (the reactor's clock) under `policy`, given whether reads
  // are pending.
  bool MayWrite(WritePolicy policy, bool reads_pending, int64_t now_ns) const;
  // When the oldest chunk not yet written will have waited max_defer (INT64_MAX: none waits):
  // deferred writes run during reads from then on.
  int64_t WritesDueNs() const;
  // Waits until every chunk staged before the call is finished and its callback has run.
  void Flush();
  // Refuses new chunks, wakes blocked producers (they get Unavailable) and writes everything
  // staged during reads too.
  void Stop();
  // Nothing staged and not yet finished.
  bool empty() const;

  uint64_t staged_bytes() const;
  uint64_t staged_chunks() const;
  // Staging memory kept for reuse beyond what staged chunks hold (memory/staging_memory.h).
  uint64_t kept_bytes() const { return memory_->kept_bytes(); }
  uint64_t limit_bytes() const { return limit_bytes_; }
  uint64_t persists() const;
  uint64_t persist_failures() const;
  double stall_seconds() const;  // time producers spent waiting for staging space

 private:
  // Reserves staging for a chunk of `size` payload bytes, lets `fill` write the payload into the
  // image, then checksums it there (or takes `verified`'s checksums, see Stage) and writes the header.
  absl::Status StageWith(std::string_view key, size_t size, absl::FunctionRef<absl::Status(uint8_t*)> fill,
                         PersistCallback on_written, bool block, const ChunkMeta* verified);
  // Stopping, producers waiting for space, or staging above `fraction` of its limit.
  bool Above(double fraction) const ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back a reservation whose chunk was never staged.
  void Unreserve(StagedChunk& chunk) ABSL_LOCKS_EXCLUDED(mu_);
  // The versions of a key staged and not yet released, oldest first, and its staged locks.
  struct StagedKey {
    std::vector<const StagedChunk*> versions;
    StagedLocks locks;
  };
  const StagedChunk* Newest(std::string_view key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t limit_bytes_;
  const double high_water_;
  const uint32_t block_size_;
  const int64_t max_defer_ns_;
  Reactor* const reactor_;
  const std::shared_ptr<StagingMemory> memory_;  // images' memory, kept for reuse up to about the limit
  std::shared_ptr<const ChunkMacKey> mac_key_;  // null: chunks carry no MAC

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // staging space freed, a chunk finished, or stopping
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t space_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t staged_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, int64_t> unfinished_ ABSL_GUARDED_BY(mu_);  // seqs staged, not yet finished -> when
  std::vector<std::unique_ptr<StagedChunk>> new_ ABSL_GUARDED_BY(mu_);  // not yet taken by the loop
  absl::flat_hash_map<std::string, StagedKey> staged_ ABSL_GUARDED_BY(mu_);  // by key, until released
  uint64_t persists_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t persist_failures_ ABSL_GUARDED_BY(mu_) = 0;
  double stall_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvstream
