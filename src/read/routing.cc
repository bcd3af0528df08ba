#include "read/routing.h"

#include <bit>
#include <cmath>

#include "read/step_pool.h"

namespace kvstream {
namespace {

int LowestTier(uint32_t mask) { return std::countr_zero(mask); }

}  // namespace

Routing::Routing(int tiers, RoutingPolicy policy) : policy_(policy), from_back_(tiers, false) {
  if (tiers >= 2) from_back_[tiers - 1] = true;
}

void Routing::Place(Step* s) const {
  if (policy_.kind == RoutingKind::kFastest) {
    for (StepBlock& blk : s->blocks) blk.pinned = static_cast<int8_t>(LowestTier(s->chunks[blk.chunk].holders));
  } else if (policy_.kind == RoutingKind::kStatic) {
    uint64_t shared = 0;
    for (const StepChunk& c : s->chunks) {
      if (std::popcount(c.holders) >= 2) shared += c.block_count;
    }
    const uint64_t on_first = static_cast<uint64_t>(std::llround(policy_.static_share * shared));
    uint64_t placed = 0;
    for (StepBlock& blk : s->blocks) {
      const uint32_t holders = s->chunks[blk.chunk].holders;
      const int first = LowestTier(holders);
      if (std::popcount(holders) < 2 || placed++ < on_first) {
        blk.pinned = static_cast<int8_t>(first);
      } else {
        blk.pinned = static_cast<int8_t>(LowestTier(holders & ~(1u << first)));
      }
    }
  }
  s->cursor.assign(from_back_.size(), 0);
  for (size_t t = 0; t < from_back_.size(); ++t) {
    if (from_back_[t]) s->cursor[t] = static_cast<int64_t>(s->blocks.size()) - 1;
  }
}

int64_t Routing::Next(Step* s, int tier) const {
  int64_t& cur = s->cursor[tier];
  const int64_t n = static_cast<int64_t>(s->blocks.size());
  while (cur >= 0 && cur < n) {
    const int64_t index = cur;
    cur += from_back_[tier] ? -1 : 1;
    if (s->Claimable(static_cast<uint32_t>(index), tier)) return index;
  }
  return -1;
}

}  // namespace kvstream
