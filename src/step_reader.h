// StepReader: runs steps on the tiers. It places a step (looks every chunk up in the index and
// pins the version it found), claims blocks from the step pool whenever a tier has a free read
// slot, reads each block into the caller's destination (or through a bounce buffer when that is
// not aligned for O_DIRECT), verifies it against its segment checksum, fails over to another
// holder when a read fails or a checksum does not match (dropping a replica that is really bad),
// and delivers each chunk's result as soon as its last block is in. Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "aligned_buffer.h"
#include "index.h"
#include "kvstream/config.h"
#include "kvstream/store.h"
#include "reactor.h"
#include "step_pool.h"
#include "step_record.h"
#include "tier.h"

namespace kvstream {

// A step as the reader runs it: the pool's Step plus what its caller asked and gets back.
struct ReadStep : Step {
  std::vector<ChunkRead> reads;
  std::vector<ChunkResult> results;
  std::vector<std::shared_ptr<const ChunkMeta>> metas;  // the version placed; null if finished at placement
  std::vector<std::string> stems;
  std::vector<std::string> errors;  // last block error per chunk, for the failure message
  ChunkCallback on_chunk;
  std::function<void(StepRecord)> on_done;
  int64_t start_ns = 0;
  int64_t end_ns = 0;   // set when the last chunk is delivered
  uint32_t eligible = 0;  // tiers holding at least one chunk of the step
  uint32_t reads_in_flight = 0;
  std::vector<TierUse> use;  // per tier
  Policies policies;         // the ones it was placed under
};

class StepReader {
 public:
  // Called for each finished step with its record, before the step's own on_done.
  using StepFinished = std::function<void(StepRecord*)>;

  StepReader(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, StepPool* pool,
             Reactor* reactor, StoreCounters* counters, StepFinished on_step_finished);

  // Allocates the bounce buffers (registered for fixed-buffer reads where the device can).
  absl::Status Init();

  // Places a step: finishes misses, bad keys and too small destinations at once, pins the
  // versions found against eviction and queues the rest in the pool.
  void Place(std::unique_ptr<ReadStep> step, const Policies& policies);
  // Claims and issues reads while `tier` has free read slots.
  void Schedule(int tier);
  // A read issued by this reader completed on `tier`.
  void Complete(int tier, const IoCompletion& completion);
  // Frees the steps that are finished and have no read in flight.
  void Sweep();

  bool idle() const { return steps_.empty(); }
  bool reads_pending() const { return !pool_->empty(); }

 private:
  struct ReadSlot : IoRequest {
    BlockRef ref;
    uint8_t* dst = nullptr;     // where the payload belongs
    uint32_t payload = 0;       // payload bytes of the block
    uint8_t* bounce = nullptr;  // this slot's bounce buffer, block_size bytes
    AlignedBuffer oversized;    // bounce for blocks larger than block_size (older chunks)
  };
  struct TierSlots {
    std::vector<ReadSlot> slots;
    std::vector<uint32_t> free;
    AlignedBuffer bounce_pool;  // read_depth x block_size
  };

  void Issue(int tier, BlockRef ref);
  void BlockFailed(int tier, ReadStep* step, BlockRef ref, std::string why, bool bad_copy);
  void DropReplica(ReadStep* step, uint32_t chunk, int tier);
  void Settle(ReadStep* step, uint32_t chunk);
  void Deliver(ReadStep* step, uint32_t chunk, absl::Status status);
  void Finish(ReadStep* step);

  const StoreConfig& config_;
  const Tiers& tiers_;
  GuardedIndex* index_;
  StepPool* pool_;
  Reactor* reactor_;
  StoreCounters* counters_;
  StepFinished on_step_finished_;
  std::vector<std::string> tier_names_;
  std::vector<TierSlots> slots_;  // per tier
  std::vector<std::unique_ptr<ReadStep>> steps_;
};

}  // namespace kvstream
