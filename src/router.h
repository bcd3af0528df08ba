// Router: the step pool (M1) and completion-driven routing (M4) as pure logic, without I/O.
//
// Every pending retrieval is a PoolBatch of chunks split into blocks (one block per checksummed
// segment). Whenever a tier has a free slot the engine asks Claim(tier) for the next block that
// tier may read: with two tiers, the first claims from the front of the batch and the second from
// the back, so they meet wherever their bandwidths put the boundary. Batches are served oldest
// first. A block is claimable only by tiers holding its chunk, and under `static:g` and `fastest`
// only by the tier placement pinned it to (until that tier fails for the chunk).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kvstream/config.h"

namespace kvstream {

enum class BlockState : uint8_t { kUnclaimed, kInFlight, kDone };

struct PoolBlock {
  uint32_t chunk = 0;
  uint32_t segment = 0;
  int8_t pinned = -1;  // tier that must read it, or -1 for any holder
  BlockState state = BlockState::kUnclaimed;
};

struct PoolChunk {
  uint32_t first_block = 0;
  uint32_t block_count = 0;
  uint32_t holders = 0;     // tiers that may still serve it
  uint32_t remaining = 0;   // blocks not yet done
  uint32_t in_flight = 0;
  bool failing = false;     // no holder left; fails once in_flight reaches 0
  bool finished = false;    // result delivered (set by the engine through Finish)
};

struct PoolBatch {
  std::vector<PoolChunk> chunks;
  std::vector<PoolBlock> blocks;
  // Router state.
  std::vector<int64_t> cursor;      // per tier: next block index to examine
  std::vector<uint32_t> retry;      // blocks unclaimed again after a failure
  uint32_t serial_chunk = 0;        // kSerial: the one chunk being read
  uint32_t unfinished = 0;

  // Adds a chunk of `blocks` blocks held by `holders`; 0 blocks or no holder = finished at once.
  uint32_t AddChunk(uint32_t holders, uint32_t blocks);
};

struct BlockRef {
  PoolBatch* batch = nullptr;
  uint32_t block = 0;
};

class Router {
 public:
  Router(int tiers, RoutingPolicy routing, BatchingPolicy batching);

  // Pins blocks for static/fastest routing, sets cursors and enqueues the batch (oldest first).
  void Add(PoolBatch* batch);
  // REQUIRES: every chunk of the batch is finished.
  void Remove(PoolBatch* batch);
  bool empty() const { return batches_.empty(); }
  // REQUIRES: empty(). Batches added from now on are placed and claimed under these policies.
  void SetPolicy(RoutingPolicy routing, BatchingPolicy batching);

  // The next block `tier` should read, marked in flight. False when it has nothing to claim.
  bool Claim(int tier, BlockRef* out);
  // The block arrived intact.
  void Done(BlockRef ref);
  // The block failed on `tier` (read error or checksum): the tier stops serving the chunk and
  // the block goes back to the pool for another holder.
  void Fail(BlockRef ref, int tier);
  // Removes `tier` as a holder of the chunk (its replica is gone); blocks pinned to it may go to
  // any remaining holder.
  void DropHolder(PoolBatch* batch, uint32_t chunk, int tier);

  enum class Outcome { kPending, kComplete, kFailed };
  // kComplete: every block arrived. kFailed: no holder is left and nothing is in flight.
  // The engine then delivers the result and calls Finish.
  static Outcome ChunkOutcome(const PoolBatch& batch, uint32_t chunk);
  void Finish(PoolBatch* batch, uint32_t chunk);


 private:
  bool Claimable(const PoolBatch& b, const PoolBlock& blk, int tier) const;
  bool ClaimFrom(PoolBatch* b, int tier, BlockRef* out);
  void Take(PoolBatch* b, uint32_t index, BlockRef* out);
  void Place(PoolBatch* b);

  int tiers_;
  RoutingPolicy routing_;
  BatchingPolicy batching_;
  std::vector<bool> back_;  // tier claims from the back
  std::deque<PoolBatch*> batches_;
};

}  // namespace kvstream
