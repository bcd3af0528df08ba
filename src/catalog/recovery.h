// Recovery: rebuilds the index from the tiers alone at start. Every device is scanned (which
// removes temporaries and invalid files), or hands over the index it saved at the last clean
// shutdown (format/index_checkpoint.h; SaveIndex at shutdown writes it); replicas are indexed oldest first, so the LRU order
// starts as creation order; of two versions of a key the newer wins and the older's files are
// removed; each tier is then evicted down to its capacity. Runs before the loop starts.
#pragma once

#include "absl/status/status.h"
#include "index/index.h"
#include "io/tier.h"

namespace kvstream {

// `from_checkpoint` (if given) gets, per tier, whether it came from a saved index (catalog/reconcile.h).
absl::Status RecoverIndex(const Tiers& tiers, Index* index, std::vector<bool>* from_checkpoint = nullptr);
// Saves each tier's chunks for the next start. REQUIRES: the loop has stopped (nothing changes).
void SaveIndexes(const Tiers& tiers, const Index& index);

}  // namespace kvstream
