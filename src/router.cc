#include "router.h"

#include <algorithm>
#include <cassert>
#include <bit>
#include <cmath>

namespace kvstream {
namespace {

int LowestTier(uint32_t mask) { return std::countr_zero(mask); }

}  // namespace

uint32_t PoolBatch::AddChunk(uint32_t holders, uint32_t block_count) {
  PoolChunk c;
  c.first_block = static_cast<uint32_t>(blocks.size());
  c.block_count = holders ? block_count : 0;
  c.holders = holders;
  c.remaining = c.block_count;
  const uint32_t index = static_cast<uint32_t>(chunks.size());
  for (uint32_t s = 0; s < c.block_count; ++s) blocks.push_back({index, s, -1, BlockState::kUnclaimed});
  chunks.push_back(c);
  ++unfinished;
  return index;
}

Router::Router(int tiers, RoutingPolicy routing, BatchingPolicy batching)
    : tiers_(tiers), routing_(routing), batching_(batching), back_(tiers, false) {
  // First tier from the front, last from the back; tiers in between from the front.
  if (tiers >= 2) back_[tiers - 1] = true;
}

void Router::SetPolicy(RoutingPolicy routing, BatchingPolicy batching) {
  assert(empty());
  routing_ = routing;
  batching_ = batching;
}

void Router::Place(PoolBatch* b) {
  if (routing_.kind == RoutingKind::kFastest) {
    for (PoolBlock& blk : b->blocks) blk.pinned = static_cast<int8_t>(LowestTier(b->chunks[blk.chunk].holders));
  } else if (routing_.kind == RoutingKind::kStatic) {
    // Share g of the blocks of replicated chunks on the first holder, the rest on the second.
    uint64_t shared = 0;
    for (const PoolChunk& c : b->chunks) {
      if (std::popcount(c.holders) >= 2) shared += c.block_count;
    }
    const uint64_t on_first = static_cast<uint64_t>(std::llround(routing_.static_share * shared));
    uint64_t placed = 0;
    for (PoolBlock& blk : b->blocks) {
      const uint32_t holders = b->chunks[blk.chunk].holders;
      const int first = LowestTier(holders);
      if (std::popcount(holders) < 2) {
        blk.pinned = static_cast<int8_t>(first);
      } else if (placed++ < on_first) {
        blk.pinned = static_cast<int8_t>(first);
      } else {
        blk.pinned = static_cast<int8_t>(LowestTier(holders & ~(1u << first)));
      }
    }
  }
}

void Router::Add(PoolBatch* b) {
  Place(b);
  b->cursor.assign(tiers_, 0);
  for (int t = 0; t < tiers_; ++t) {
    if (back_[t]) b->cursor[t] = static_cast<int64_t>(b->blocks.size()) - 1;
  }
  b->serial_chunk = 0;
  batches_.push_back(b);
}

void Router::Remove(PoolBatch* b) {
  batches_.erase(std::remove(batches_.begin(), batches_.end(), b), batches_.end());
}

bool Router::Claimable(const PoolBatch& b, const PoolBlock& blk, int tier) const {
  const PoolChunk& c = b.chunks[blk.chunk];
  return blk.state == BlockState::kUnclaimed && !c.failing && !c.finished &&
         (c.holders & (1u << tier)) && (blk.pinned < 0 || blk.pinned == tier);
}

void Router::Take(PoolBatch* b, uint32_t index, BlockRef* out) {
  PoolBlock& blk = b->blocks[index];
  blk.state = BlockState::kInFlight;
  ++b->chunks[blk.chunk].in_flight;
  *out = {b, index};
}

bool Router::ClaimFrom(PoolBatch* b, int tier, BlockRef* out) {
  for (size_t i = 0; i < b->retry.size(); ++i) {
    const uint32_t index = b->retry[i];
    if (!Claimable(*b, b->blocks[index], tier)) continue;
    b->retry[i] = b->retry.back();
    b->retry.pop_back();
    Take(b, index, out);
    return true;
  }
  if (batching_ == BatchingPolicy::kSerial) {
    while (b->serial_chunk < b->chunks.size() && b->chunks[b->serial_chunk].finished) ++b->serial_chunk;
    if (b->serial_chunk == b->chunks.size()) return false;
    const PoolChunk& c = b->chunks[b->serial_chunk];
    for (uint32_t k = 0; k < c.block_count; ++k) {
      const uint32_t index = back_[tier] ? c.first_block + c.block_count - 1 - k : c.first_block + k;
      if (Claimable(*b, b->blocks[index], tier)) {
        Take(b, index, out);
        return true;
      }
    }
    return false;
  }
  // Blocks passed over stay passed: they are claimed, or this tier may not read them. A block
  // that becomes claimable again after a failure is in `retry`.
  int64_t& cur = b->cursor[tier];
  const int64_t n = static_cast<int64_t>(b->blocks.size());
  while (cur >= 0 && cur < n) {
    const uint32_t index = static_cast<uint32_t>(cur);
    cur += back_[tier] ? -1 : 1;
    if (Claimable(*b, b->blocks[index], tier)) {
      Take(b, index, out);
      return true;
    }
  }
  return false;
}

bool Router::Claim(int tier, BlockRef* out) {
  if (batching_ == BatchingPolicy::kSerial) {
    // Request after request: only the oldest unfinished batch.
    for (PoolBatch* b : batches_) {
      if (b->unfinished > 0) return ClaimFrom(b, tier, out);
    }
    return false;
  }
  for (PoolBatch* b : batches_) {
    if (ClaimFrom(b, tier, out)) return true;
  }
  return false;
}

void Router::Done(BlockRef ref) {
  PoolBlock& blk = ref.batch->blocks[ref.block];
  PoolChunk& c = ref.batch->chunks[blk.chunk];
  blk.state = BlockState::kDone;
  --c.in_flight;
  --c.remaining;
}

Router::Outcome Router::ChunkOutcome(const PoolBatch& b, uint32_t chunk) {
  const PoolChunk& c = b.chunks[chunk];
  if (c.finished) return Outcome::kPending;
  if (c.remaining == 0) return Outcome::kComplete;
  if (c.failing && c.in_flight == 0) return Outcome::kFailed;
  return Outcome::kPending;
}

void Router::DropHolder(PoolBatch* b, uint32_t chunk, int tier) {
  PoolChunk& c = b->chunks[chunk];
  if (c.holders & (1u << tier)) {
    c.holders &= ~(1u << tier);
    // Blocks pinned to the lost tier may now go to any remaining holder.
    for (uint32_t k = 0; k < c.block_count; ++k) {
      PoolBlock& blk = b->blocks[c.first_block + k];
      if (blk.state == BlockState::kUnclaimed && blk.pinned == tier) {
        blk.pinned = -1;
        b->retry.push_back(c.first_block + k);
      }
    }
    if (c.holders == 0 && c.remaining > 0) c.failing = true;
  }
}

void Router::Fail(BlockRef ref, int tier) {
  PoolBlock& blk = ref.batch->blocks[ref.block];
  PoolChunk& c = ref.batch->chunks[blk.chunk];
  blk.state = BlockState::kUnclaimed;
  blk.pinned = -1;
  --c.in_flight;
  ref.batch->retry.push_back(ref.block);
  DropHolder(ref.batch, blk.chunk, tier);
}

void Router::Finish(PoolBatch* b, uint32_t chunk) {
  PoolChunk& c = b->chunks[chunk];
  if (c.finished) return;
  c.finished = true;
  --b->unfinished;
}

}  // namespace kvstream
