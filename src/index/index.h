// Index: key -> chunk metadata, the tiers holding a written replica, and each tier's LRU order
// and used bytes. Rebuilt at start from the tiers' headers (catalog/recovery.h). Not thread-safe by
// itself: GuardedIndex puts it behind its own lock.
//
// Tenants (TenantLimits): with a tier share, the chunks of each key namespace (KeyNamespace) are
// one tenant's, with an LRU order and used bytes of its own on every tier, guaranteed that share
// of each tier. Room on a full tier is made from the tenant furthest over its share, its least
// recently used chunks first (a writer's own load counts the chunk it writes), and never from
// another tenant within its share: a tenant over its share evicts its own. A tenant may hold at
// most `locked_bytes` of chunks locked, so what it locks cannot keep others from their share.
// The namespace is read off the key, so the same tenants come back when the index is rebuilt
// from the tiers' files. Without a share, every key is one tenant's: one LRU per tier.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_format.h"
#include "index/victim.h"
#include "kvstream/types.h"  // kMaxTiers

namespace kvstream {

struct Tenant;

struct IndexEntry {
  std::shared_ptr<const ChunkMeta> meta;  // replaced, never mutated: readers keep their version
  std::string stem;
  Tenant* tenant = nullptr;  // whose chunk it is (its key's namespace, or the one tenant)
  uint32_t tiers = 0;       // bit k: tier k holds a written replica
  // Bit k: tier k's replica is synced (this node fdatasync'd it before it counted): it survives a
  // power cut. Never set for replicas found on the file system (their history is unknown).
  uint32_t synced = 0;
  // Bit k: tier k's replica is another node's file on a shared tier. It is read like any replica
  // but never evicted here nor counted against this node's capacity of the tier (its owner does).
  uint32_t foreign = 0;
  uint32_t own() const { return tiers & ~foreign; }  // tiers holding this node's own file of it
  int64_t foreign_checked_ns = 0;  // when SharedLookup last found the foreign files in place
  std::list<IndexEntry*>::iterator foreign_lru;  // its place in Index's foreign LRU while foreign != 0
  uint32_t read_pins = 0;   // steps reading it; capacity eviction skips pinned entries
  uint32_t locks = 0;       // clients' locks (Index::Lock); capacity eviction skips it while
  int64_t locked_until_ns = 0;  // ... any is held and the latest lease has not ended
  uint64_t locked_bytes = 0;    // counted against its tenant's TenantLimits::locked_bytes (0: not)
  std::list<IndexEntry*>::iterator locked_at;  // its place in Tenant::locked while counted
  std::array<std::list<IndexEntry*>::iterator, kMaxTiers> lru{};  // its place in its tenant's lru
};

// Limits per tenant (StoreConfig::tenant_tier_share, tenant_locked_bytes).
struct TenantLimits {
  double tier_share = 0;      // of every tier's capacity, guaranteed to each tenant; 0: one tenant
  uint64_t locked_bytes = 0;  // chunk bytes one tenant may hold locked; 0: no limit
};

// One tenant's chunks: every key of one namespace (all keys, without a tier share).
struct Tenant {
  std::string name;                          // the namespace
  std::vector<std::list<IndexEntry*>> lru;   // per tier, its own replicas; front = least recently used
  std::vector<uint64_t> used;                // per tier
  uint64_t entries = 0;                      // index entries of its keys
  uint64_t locked_bytes = 0;                 // of the entries in `locked`
  std::list<IndexEntry*> locked;             // entries whose bytes count in locked_bytes
};

class Index {
 public:
  // `foreign_limit`: ForgetForeign keeps at most this many keys with a foreign replica.
  explicit Index(std::vector<uint64_t> capacities, uint64_t foreign_limit = UINT64_MAX, TenantLimits tenants = {});

  IndexEntry* Find(std::string_view key);
  const IndexEntry* Find(std::string_view key) const;

  // Records a written replica on `tier` (`foreign`: another node's file on a shared tier;
  // `synced`: this node synced it, see IndexEntry::synced). If the
  // entry held a different version (SameVersion: another payload, layout or writer), that version's replicas on other
  // tiers are removed and returned: their files are stale. A foreign replica of a version this
  // node then publishes itself becomes its own.
  std::vector<Victim> AddReplica(int tier, std::shared_ptr<const ChunkMeta> meta, bool foreign = false,
                                 bool synced = false);
  // Removes `tier` from the entry (and the entry once no tier holds it). Returns false if absent.
  bool RemoveReplica(std::string_view key, int tier, Victim* victim = nullptr);

  // Marks the entry most recently used on every tier holding it.
  void Touch(IndexEntry* entry);

  // A step reading the entry pins it against capacity eviction. An entry whose last replica is
  // removed while pinned stays (with tiers == 0, invisible to lookups) until unpinned.
  void Pin(IndexEntry* entry) { ++entry->read_pins; }
  void Unpin(std::string_view key);
  // A client's lock (lookup-and-lock, LMCache's pin) until Unlock or `until_ns`, the lease's
  // end on the store's clock, whichever comes first: a crashed client's locks end with their
  // lease. Capacity eviction skips a locked entry; an explicit eviction still removes it. False,
  // and nothing locked, when the entry is not locked yet and its bytes would take its tenant past
  // TenantLimits::locked_bytes (leases ended by `now_ns` no longer count).
  bool Lock(IndexEntry* entry, int64_t until_ns, int64_t now_ns = 0);
  // Releases one lock of `key`; false if it held none.
  bool Unlock(std::string_view key);
  // Whether a tenant's locked bytes are bounded (TenantLimits::locked_bytes).
  bool locks_limited() const { return limits_.locked_bytes > 0; }
  static bool Locked(const IndexEntry& entry, int64_t now_ns) {
    return entry.locks > 0 && now_ns < entry.locked_until_ns;
  }
  // Entry with at least one replica, or null.
  const IndexEntry* FindLive(std::string_view key) const;

  // Space for writes in progress, counted against capacity until committed or released.
  void Reserve(int tier, uint64_t bytes) { reserved_[tier] += bytes; }
  void Release(int tier, uint64_t bytes) { reserved_[tier] -= bytes; }

  // Evicts replicas on `tier` that are neither pinned nor locked at `now_ns` until used +
  // reserved + `bytes` fits the capacity: least recently used first from the tenant furthest over
  // its share, and never from a tenant within its share other than the writer (the tenant of
  // `for_key`, whose load counts `bytes`; with neither key nor bytes nobody writes and every
  // tenant may give way). Returns false (evicting nothing) if it cannot fit.
  bool MakeRoom(int tier, uint64_t bytes, int64_t now_ns, std::vector<Victim>* victims, std::string_view for_key = {});
  // Evicts replicas on `tier`, in the order MakeRoom would, until `bytes` were freed (all when
  // bytes is UINT64_MAX). Pinned and locked entries are evicted too: their in-flight reads fail
  // over or fail.
  void EvictLru(int tier, uint64_t bytes, std::vector<Victim>* victims);

  // While more than foreign_limit keys have a foreign replica, forgets the foreign replicas of
  // the least recently used (their files are other nodes': nothing is removed, and a later lookup
  // finds them again on the file system), except keys pinned by a step, locked at `now_ns`, or
  // found in place (foreign_checked_ns) at or after `found_since_ns` (a step about to be placed
  // may want them; such keys move to the back, and one call looks at no more than the excess plus
  // 1024 keys, so the index lock is held briefly). Returns how many keys it forgot.
  uint64_t ForgetForeign(int64_t now_ns, int64_t found_since_ns);
  // Forgets every replica of `tier` (its files are gone or out of reach); returns how many.
  uint64_t DropTier(int tier);
  // The versions of this node's own files `tier` holds, least recently used first.
  std::vector<ChunkMeta> Replicas(int tier) const;
  uint64_t used(int tier) const { return used_[tier]; }
  uint64_t capacity(int tier) const { return capacity_[tier]; }
  uint64_t replicas(int tier) const { return replicas_[tier]; }  // this node's own
  uint64_t foreign_replicas(int tier) const { return foreign_[tier]; }
  uint64_t foreign_keys() const { return foreign_lru_.size(); }       // keys with a foreign replica
  bool foreign_over_limit() const { return foreign_lru_.size() > foreign_limit_; }
  uint64_t foreign_forgotten() const { return foreign_forgotten_; }  // keys forgotten over the limit
  uint64_t size() const { return live_; }  // keys with at least one replica
  int tier_count() const { return static_cast<int>(capacity_.size()); }
  // The tenant of the namespace `name` (null when it holds nothing), and how many hold anything.
  const Tenant* FindTenant(std::string_view name) const;
  size_t tenant_count() const { return tenants_.size(); }

 private:
  void Unlink(IndexEntry* e, int tier);
  // The tenant of `key`, made when missing; ForgetEntry drops it with its last entry.
  Tenant* TenantOf(std::string_view key);
  // Before an entry is erased: its lock and its tenant's count of it.
  void ForgetEntry(IndexEntry* e);
  void UncountLock(IndexEntry* e);
  // Replicas on `tier` whose bytes add up to at least `bytes` (fewer if there are not enough), in
  // the order tenants give way (MakeRoom). `writer`: the tenant about to write `writing` bytes
  // (null: none); `skip_held`: passes over entries pinned or locked at `now_ns`.
  std::vector<IndexEntry*> ChooseVictims(int tier, uint64_t bytes, const Tenant* writer, uint64_t writing,
                                         bool skip_held, int64_t now_ns);
  std::vector<uint64_t> capacity_;
  std::vector<uint64_t> used_;
  std::vector<uint64_t> reserved_;
  std::vector<uint64_t> replicas_;           // this node's own, per tier
  TenantLimits limits_;
  absl::node_hash_map<std::string, Tenant> tenants_;  // by namespace ("" only, without a share)
  std::vector<uint64_t> foreign_;            // foreign replicas per tier
  std::list<IndexEntry*> foreign_lru_;       // keys with a foreign replica; front = least recently used
  uint64_t foreign_limit_;
  uint64_t foreign_forgotten_ = 0;
  absl::node_hash_map<std::string, IndexEntry> entries_;
  uint64_t live_ = 0;
};

// The index behind its own lock, so lookups (shared) never wait for the loop's inbox or for I/O.
// The loop takes it exclusively to place steps, commit replicas and drop bad ones. Never held
// across I/O, device calls or callbacks.
class GuardedIndex {
 public:
  explicit GuardedIndex(std::vector<uint64_t> capacities, uint64_t foreign_limit = UINT64_MAX, TenantLimits tenants = {})
      : index_(std::move(capacities), foreign_limit, tenants) {}
  absl::Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }
  Index& get() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return index_; }
  const Index& get_shared() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return index_; }

 private:
  mutable absl::Mutex mu_;
  Index index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvstream
