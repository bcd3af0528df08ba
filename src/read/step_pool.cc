#include "read/step_pool.h"

#include <algorithm>
#include <cassert>

namespace kvstream {

uint32_t Step::AddChunk(uint32_t holders, uint32_t block_count) {
  StepChunk c;
  c.first_block = static_cast<uint32_t>(blocks.size());
  c.block_count = holders ? block_count : 0;
  c.holders = holders;
  c.remaining = c.block_count;
  const uint32_t index = static_cast<uint32_t>(chunks.size());
  for (uint32_t s = 0; s < c.block_count; ++s) blocks.push_back({index, s, -1, BlockState::kUnclaimed});
  chunks.push_back(c);
  ++unfinished;
  unclaimed += c.block_count;
  return index;
}

bool Step::Claimable(uint32_t index, int tier) const {
  const StepBlock& blk = blocks[index];
  const StepChunk& c = chunks[blk.chunk];
  return blk.state == BlockState::kUnclaimed && !c.failing && !c.finished && (c.holders & (1u << tier)) &&
         (blk.pinned < 0 || blk.pinned == tier);
}

StepPool::StepPool(int tiers, RoutingPolicy routing, BatchingPolicy batching)
    : routing_(tiers, routing), batching_(batching) {}

void StepPool::SetPolicies(RoutingPolicy routing, BatchingPolicy batching) {
  assert(empty());
  routing_ = Routing(routing_.tiers(), routing);
  batching_ = batching;
}

void StepPool::Add(Step* s) {
  routing_.Place(s);
  s->serial_chunk = 0;
  steps_.push_back(s);
}

void StepPool::Remove(Step* s) { steps_.erase(std::remove(steps_.begin(), steps_.end(), s), steps_.end()); }

void StepPool::Take(Step* s, uint32_t index, BlockRef* out) {
  StepBlock& blk = s->blocks[index];
  blk.state = BlockState::kInFlight;
  ++s->chunks[blk.chunk].in_flight;
  --s->unclaimed;
  *out = {s, index};
}

bool StepPool::Unclaim(BlockRef ref, int tier) {
  Step* s = ref.step;
  StepBlock& blk = s->blocks[ref.block];
  assert(blk.state == BlockState::kInFlight);
  blk.state = BlockState::kUnclaimed;
  --s->chunks[blk.chunk].in_flight;
  ++s->unclaimed;
  s->retry.push_back(ref.block);  // the claiming tier's cursor has moved past it
  const bool again = blk.left_by & (1u << tier);
  blk.left_by |= 1u << tier;
  return again;
}

uint64_t StepPool::unclaimed() const {
  uint64_t n = 0;
  for (const Step* s : steps_) n += s->unclaimed;
  return n;
}

bool StepPool::ClaimSerial(Step* s, int tier, BlockRef* out) {
  while (s->serial_chunk < s->chunks.size() && s->chunks[s->serial_chunk].finished) ++s->serial_chunk;
  if (s->serial_chunk == s->chunks.size()) return false;
  const StepChunk& c = s->chunks[s->serial_chunk];
  for (uint32_t k = 0; k < c.block_count; ++k) {
    const uint32_t index = routing_.from_back(tier) ? c.first_block + c.block_count - 1 - k : c.first_block + k;
    if (s->Claimable(index, tier)) {
      Take(s, index, out);
      return true;
    }
  }
  return false;
}

bool StepPool::ClaimFrom(Step* s, int tier, BlockRef* out) {
  for (size_t i = 0; i < s->retry.size(); ++i) {
    const uint32_t index = s->retry[i];
    if (!s->Claimable(index, tier)) continue;
    s->retry[i] = s->retry.back();
    s->retry.pop_back();
    Take(s, index, out);
    return true;
  }
  if (batching_ == BatchingPolicy::kSerial) return ClaimSerial(s, tier, out);
  const int64_t index = routing_.Next(s, tier);
  if (index < 0) return false;
  Take(s, static_cast<uint32_t>(index), out);
  return true;
}

bool StepPool::Claim(int tier, BlockRef* out) {
  if (batching_ == BatchingPolicy::kSerial) {
    // Request after request: only the oldest unfinished step.
    for (Step* s : steps_) {
      if (s->unfinished > 0) return ClaimFrom(s, tier, out);
    }
    return false;
  }
  for (Step* s : steps_) {
    if (ClaimFrom(s, tier, out)) return true;
  }
  return false;
}

void StepPool::Done(BlockRef ref) {
  StepBlock& blk = ref.step->blocks[ref.block];
  StepChunk& c = ref.step->chunks[blk.chunk];
  blk.state = BlockState::kDone;
  --c.in_flight;
  --c.remaining;
}

StepPool::Outcome StepPool::ChunkOutcome(const Step& s, uint32_t chunk) {
  const StepChunk& c = s.chunks[chunk];
  if (c.finished) return Outcome::kPending;
  if (c.remaining == 0) return Outcome::kComplete;
  if (c.failing && c.in_flight == 0) return Outcome::kFailed;
  return Outcome::kPending;
}

void StepPool::DropHolder(Step* s, uint32_t chunk, int tier) {
  StepChunk& c = s->chunks[chunk];
  if (!(c.holders & (1u << tier))) return;
  c.holders &= ~(1u << tier);
  for (uint32_t k = 0; k < c.block_count; ++k) {  // blocks pinned to the lost tier go to any holder
    StepBlock& blk = s->blocks[c.first_block + k];
    if (blk.state == BlockState::kUnclaimed && blk.pinned == tier) {
      blk.pinned = -1;
      s->retry.push_back(c.first_block + k);
    }
  }
  if (c.holders == 0 && c.remaining > 0) c.failing = true;
}

void StepPool::ReleasePins(int tier) {
  for (Step* s : steps_) ReleasePins(s, tier);
}

void StepPool::ReleasePins(Step* s, int tier) {
  for (uint32_t i = 0; i < s->blocks.size(); ++i) {
    StepBlock& blk = s->blocks[i];
    if (blk.state != BlockState::kUnclaimed || blk.pinned != tier) continue;
    if ((s->chunks[blk.chunk].holders & ~(1u << tier)) == 0) continue;  // nobody else can read it
    blk.pinned = -1;
    s->retry.push_back(i);
  }
}

void StepPool::ReplaceChunk(Step* s, uint32_t chunk, uint32_t holders, uint32_t block_count) {
  // Every block of the chunk, including fresh copies appended by Reissue past its range.
  for (StepBlock& blk : s->blocks) {
    if (blk.chunk != chunk) continue;
    if (blk.state == BlockState::kInFlight) blk.state = BlockState::kAbandoned;
    if (blk.state == BlockState::kUnclaimed) {
      blk.state = BlockState::kDone;  // never claimed now
      --s->unclaimed;
    }
  }
  StepChunk& c = s->chunks[chunk];
  c.first_block = static_cast<uint32_t>(s->blocks.size());
  c.block_count = block_count;
  c.holders = holders;
  c.remaining = block_count;
  c.in_flight = 0;
  c.failing = holders == 0 && block_count > 0;
  s->unclaimed += block_count;
  for (uint32_t k = 0; k < block_count; ++k) {
    s->blocks.push_back({chunk, k, -1, BlockState::kUnclaimed});
    s->retry.push_back(c.first_block + k);  // the tiers' cursors never reach appended blocks
  }
}

void StepPool::Reissue(BlockRef ref, [[maybe_unused]] int tier) {
  Step* s = ref.step;
  StepBlock& old = s->blocks[ref.block];
  old.state = BlockState::kAbandoned;
  const uint32_t chunk = old.chunk, segment = old.segment;
  --s->chunks[chunk].in_flight;
  // The fresh copy lives past the chunk's range (in-flight reads keep their block indices); the
  // retry list, checked first by every claim, is how tiers find it.
  s->retry.push_back(static_cast<uint32_t>(s->blocks.size()));
  s->blocks.push_back({chunk, segment, -1, BlockState::kUnclaimed});
  ++s->unclaimed;
}

void StepPool::Abandon(BlockRef ref, int tier) {
  StepBlock& blk = ref.step->blocks[ref.block];
  blk.state = BlockState::kAbandoned;
  --ref.step->chunks[blk.chunk].in_flight;
  DropHolder(ref.step, blk.chunk, tier);
}

void StepPool::DropTier(int tier, Step* step, std::vector<std::pair<Step*, uint32_t>>* failing) {
  auto drop = [&](Step* s) {
    for (uint32_t chunk = 0; chunk < s->chunks.size(); ++chunk) {
      const StepChunk& c = s->chunks[chunk];
      if (c.finished || !(c.holders & (1u << tier))) continue;
      DropHolder(s, chunk, tier);
      if (c.failing) failing->emplace_back(s, chunk);
    }
  };
  if (step != nullptr) {
    drop(step);
  } else {
    for (Step* s : steps_) drop(s);
  }
}

void StepPool::Fail(BlockRef ref, int tier) {
  Retry(ref);
  DropHolder(ref.step, ref.step->blocks[ref.block].chunk, tier);
}

void StepPool::Retry(BlockRef ref) {
  StepBlock& blk = ref.step->blocks[ref.block];
  blk.state = BlockState::kUnclaimed;
  blk.pinned = -1;
  --ref.step->chunks[blk.chunk].in_flight;
  ++ref.step->unclaimed;
  ref.step->retry.push_back(ref.block);
}

void StepPool::Finish(Step* s, uint32_t chunk) {
  StepChunk& c = s->chunks[chunk];
  if (c.finished) return;
  c.finished = true;
  --s->unfinished;
}

}  // namespace kvstream
