// Reuse distances under LRU and the storage demand D = V * Pr[d > M] (docs/design.md section 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvsim {

// For each access of a sequence of block ids: its LRU stack distance, the number of distinct
// blocks touched since the previous access of the same block counting that block itself (1 for an
// immediate repeat), or -1 for a first access. An LRU cache of M blocks hits exactly the accesses
// with 1 <= d <= M; the rest of the reuses (d > M) must come from storage.
std::vector<int64_t> ReuseDistances(const std::vector<uint64_t>& accesses);

struct Demand {
  uint64_t reuses = 0;         // accesses with a finite distance (the reused volume V, in blocks)
  uint64_t beyond = 0;         // of those, with d > M: they must come from storage (D, in blocks)
  double fraction() const { return reuses ? static_cast<double>(beyond) / reuses : 0; }  // Pr[d > M]
};

// Demand for a cache of `capacity_blocks` blocks.
Demand StorageDemand(const std::vector<int64_t>& distances, uint64_t capacity_blocks);

}  // namespace kvsim
