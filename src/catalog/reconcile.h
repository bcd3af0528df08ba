// Reconcile: after a start from an index saved at the last clean shutdown (no header was read),
// a background pass compares each such tier's files with what the index says it holds, as a full
// scan would have: a replica whose file is gone (deleted while the daemon was down) leaves the
// index, one whose file has another size (torn) leaves it and the file is removed, and a chunk
// file the index lacks is read (its header checked) and indexed, or removed when the index holds
// a newer version of its key. Only state from before this start is judged: replicas and files
// created by this run are the loop's business. Until the pass reaches a file, a read of a gone or
// torn replica fails over like any lost replica (the checksums make a torn file a miss, never bad
// bytes).
#pragma once

#include <atomic>
#include <cstdint>

#include "index/index.h"
#include "io/tier.h"

namespace kvstream {

struct ReconcileReport {
  uint64_t checked = 0;   // indexed replicas found in place with their size
  uint64_t missing = 0;   // indexed replicas whose file was gone: out of the index
  uint64_t torn = 0;      // indexed replicas whose file had another size: out, file removed
  uint64_t unconfirmed = 0;  // indexed replicas whose file could not be looked at (EIO, EACCES...):
                             // out of the index, file left for the next start's scan
  uint64_t added = 0;     // files the index lacked, valid: indexed
  uint64_t removed = 0;   // files the index lacked, invalid or of an older version: removed
};

// Reconciles tier `t` against the index. `started_unix_ns`: when this run started (state created
// since then is left alone). Returns early, with what it did, once `stop` is set.
ReconcileReport ReconcileTier(const Tiers& tiers, int t, GuardedIndex* index, int64_t started_unix_ns,
                              const std::atomic<bool>& stop);

}  // namespace kvstream
