// SharedLookup: on a shared tier (a directory several nodes publish chunks into, io/file_device.h)
// a key this node's index lacks may still be there, published by another node. Before a lookup
// or a step is placed, each key the index lacks is looked for on the shared tiers' file systems
// (one header read per tier: the header's key and size must match the file, so a torn, truncated
// or misnamed file is a miss) and found chunks enter the index as foreign replicas (or as the
// node's own, when the file is its own: after its tier was out of reach, say). A key not found is
// not looked for again on that tier for the tier's miss TTL; a file whose payload failed its
// checksum here is not found again while it holds that version. Thread-safe; runs on the
// caller's thread (a lookup's or a retrieve's), never on the I/O loop. A key held only in other
// nodes' files is checked again (one header read) once the miss TTL has passed since it was last
// found, so a lookup does not promise a chunk its owner removed long ago.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "format/chunk_format.h"
#include "index/index.h"
#include "index/miss_cache.h"
#include "io/reactor.h"
#include "io/tier.h"
#include "kvstream/config.h"

namespace kvstream {

class SharedLookup {
 public:
  static constexpr size_t kMaxRememberedMisses = 1 << 16;  // per tier

  SharedLookup(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, Reactor* reactor);

  // Whether any tier is shared (Discover does nothing otherwise).
  bool active() const { return !shared_.empty(); }
  // Indexes the keys among `keys` that the index lacks and a shared tier holds. With
  // `prefix_only`, stops at the first key found nowhere (a prefix lookup needs no more).
  void Discover(const std::vector<std::string>& keys, bool prefix_only = false);
  // Keys found on a shared tier by Discover, per tier (Stats).
  uint64_t discovered(int tier) const;
  // The file of `meta`'s key on shared tier `tier` holds bad bytes in this version (a read failed
  // its checksum): Discover passes over it until the file holds another version.
  void MarkBad(int tier, const ChunkMeta& meta);

 private:
  struct SharedTier {
    int tier;
    int64_t miss_ttl_ns;
    MissCache misses ABSL_GUARDED_BY(mu){kMaxRememberedMisses};  // stems looked for in vain
    absl::flat_hash_map<std::string, ChunkVersion> bad ABSL_GUARDED_BY(mu);  // stem -> version that failed
    uint64_t discovered ABSL_GUARDED_BY(mu) = 0;
    mutable absl::Mutex mu;
  };
  // Looks `key` up on shared tier `s`; true when it was found and indexed.
  bool Find(SharedTier& s, const std::string& key, const std::string& stem);
  // `key` is held only in other nodes' files, on `tiers`: checks each is still there in the
  // indexed version (recording when), and takes out of the index those that are not. True if
  // any still is.
  bool Recheck(const std::string& key, uint32_t tiers, int64_t now);

  const Tiers& tiers_;
  GuardedIndex* index_;
  Reactor* reactor_;
  std::vector<std::unique_ptr<SharedTier>> shared_;
  int64_t recheck_ns_ = 0;  // a foreign-only key is checked again after this long (the shortest miss TTL)
};

}  // namespace kvstream
