// StepPool (M1): every pending read of every step of every session in one queue, as blocks. A
// step's chunks are split into blocks (one per checksummed segment); whenever a tier has a free
// read slot the loop asks Claim(tier) for the next block that tier should read. Steps are served
// oldest first; under `serial` batching only the oldest step's current chunk is claimable (one
// request after another, as LMCache reads). Which block of a step a tier claims is the routing
// policy's decision (read/routing.h, M4). Pure logic over plain data: no I/O, no clock, no locks (the
// loop thread owns it).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kvstream/policies.h"
#include "read/routing.h"

namespace kvstream {

// kAbandoned: the block's read is in flight but its result is no longer wanted (its chunk was
// placed again); the reader ignores it when it lands.
enum class BlockState : uint8_t { kUnclaimed, kInFlight, kDone, kAbandoned };

struct StepBlock {
  uint32_t chunk = 0;
  uint32_t segment = 0;
  int8_t pinned = -1;  // tier that must read it (static/fastest routing), or -1 for any holder
  BlockState state = BlockState::kUnclaimed;
  uint32_t left_by = 0;  // tiers that gave it back unread at the end of the step (StepPool::Unclaim)
};

struct StepChunk {
  uint32_t first_block = 0;
  uint32_t block_count = 0;
  uint32_t holders = 0;     // tiers that may still serve it
  uint32_t remaining = 0;   // blocks not yet done
  uint32_t in_flight = 0;
  bool failing = false;     // no holder left; fails once in_flight reaches 0
  bool finished = false;    // result delivered (Finish)
};

// The pool's view of one step: its chunks as blocks, and where each tier's claims stand.
struct Step {
  std::vector<StepChunk> chunks;
  std::vector<StepBlock> blocks;
  std::vector<int64_t> cursor;    // per tier: the next block index its routing examines
  std::vector<uint32_t> retry;    // blocks unclaimed again after a failure
  uint32_t serial_chunk = 0;      // serial batching: the one chunk being read
  uint32_t unfinished = 0;
  uint32_t unclaimed = 0;         // blocks in state kUnclaimed (a failed chunk's count until the step goes)

  // Adds a chunk of `blocks` blocks held by `holders`; 0 blocks or no holder = finished at once.
  uint32_t AddChunk(uint32_t holders, uint32_t blocks);
  // May `tier` claim block `index` now: unclaimed, its chunk still wanted and held by `tier`, and
  // not pinned to another tier.
  bool Claimable(uint32_t index, int tier) const;
};

struct BlockRef {
  Step* step = nullptr;
  uint32_t block = 0;
};

class StepPool {
 public:
  StepPool(int tiers, RoutingPolicy routing, BatchingPolicy batching);

  // Places the step (routing pins and cursors) and enqueues it behind the older ones.
  void Add(Step* step);
  // REQUIRES: every chunk of the step is finished.
  void Remove(Step* step);
  bool empty() const { return steps_.empty(); }
  // REQUIRES: empty(). Steps added from now on are placed and claimed under these policies.
  void SetPolicies(RoutingPolicy routing, BatchingPolicy batching);

  // The next block `tier` should read, marked in flight. False when it has nothing to claim.
  bool Claim(int tier, BlockRef* out);
  // `tier` gives a block it just claimed back unread: claimable again at once, by any holder.
  // Returns whether `tier` gave this block back before.
  bool Unclaim(BlockRef ref, int tier);
  // Blocks of the queued steps not yet claimed (an upper bound of what is left to read).
  uint64_t unclaimed() const;
  // The block arrived intact.
  void Done(BlockRef ref);
  // The block failed on `tier` (read error or checksum): the tier stops serving the chunk and
  // the block goes back to the pool for another holder.
  void Fail(BlockRef ref, int tier);
  // The block's read landed but says nothing of its tier (it hashed wrong in memory its owner may
  // change under it): back in the pool, claimable at once by any holder, every holder kept.
  void Retry(BlockRef ref);
  // Removes `tier` as a holder of the chunk (its replica is gone); blocks pinned to it may go to
  // any remaining holder.
  void DropHolder(Step* step, uint32_t chunk, int tier);
  // `tier` is stalled: its unclaimed blocks pinned to it (static or fastest routing) go to any
  // other holder, in every step queued (or in `step` only). Blocks only it holds stay pinned.
  void ReleasePins(int tier);
  void ReleasePins(Step* step, int tier);
  // Reads the chunk again from scratch as `block_count` new blocks held by `holders` (another
  // version of it was placed): its blocks in flight are abandoned, those already read are
  // forgotten, and the new blocks are claimable by any holder at once.
  void ReplaceChunk(Step* step, uint32_t chunk, uint32_t holders, uint32_t block_count);
  // Puts a block in flight on `tier` back in the pool (a hedge: `tier` is late): the read in
  // flight is abandoned and a fresh copy of the block is claimable at once, by any holder (a late
  // tier claims nothing while it is stalled, and still holds the chunk once it answers).
  void Reissue(BlockRef ref, int tier);
  // Gives up a block in flight on `tier` that no other tier holds: the read in flight is
  // abandoned (it lands unseen) and the chunk loses the tier, so it fails once nothing of it is
  // in flight.
  void Abandon(BlockRef ref, int tier);
  // Removes `tier` as a holder of every chunk of `step` (every pending step when null) and
  // appends the chunks no tier holds any more to `failing`.
  void DropTier(int tier, Step* step, std::vector<std::pair<Step*, uint32_t>>* failing);

  enum class Outcome { kPending, kComplete, kFailed };
  // kComplete: every block arrived. kFailed: no holder is left and nothing is in flight.
  // The caller then delivers the result and calls Finish.
  static Outcome ChunkOutcome(const Step& step, uint32_t chunk);
  void Finish(Step* step, uint32_t chunk);

 private:
  bool ClaimFrom(Step* step, int tier, BlockRef* out);
  bool ClaimSerial(Step* step, int tier, BlockRef* out);
  void Take(Step* step, uint32_t index, BlockRef* out);

  Routing routing_;
  BatchingPolicy batching_;
  std::deque<Step*> steps_;  // oldest first
};

}  // namespace kvstream
