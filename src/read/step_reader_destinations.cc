// StepReader (step_reader.h): what becomes of a chunk's destination while it is read. Bounced
// blocks are copied into client memory that may shrink under a SIGBUS guard, a destination that
// vanished fails only its chunk, and a block that hashed wrong there is read again into the
// store's own memory before any tier is judged; a chunk rewritten meanwhile is placed again as
// the new version, but only once every read abandoned straight into its destination (in memory
// the store could not take back) has landed.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "memory/client_memory.h"
#include "read/step_reader.h"
#include "spdlog/spdlog.h"

namespace kvstream {

bool StepReader::CopyIn(ReadStep* step, uint32_t chunk, const ReadSlot& slot) {
  const ChunkRead& read = step->reads[chunk].request;
  if (read.dst_fd < 0) {
    std::memcpy(slot.dst, slot.buffer, slot.payload);
    return true;
  }
  absl::Status copied = GuardedCopy(slot.dst, slot.buffer, slot.payload);
  if (copied.ok()) return true;
  DestinationGone(step, chunk, std::move(copied));
  return false;
}

void StepReader::DestinationGone(ReadStep* step, uint32_t chunk, absl::Status why) {
  HoldOrTakeBack(step, chunk);
  pool_->ReplaceChunk(step, chunk, 0, 0);  // abandons its other blocks in flight
  Deliver(step, chunk, std::move(why));
  if (step->unfinished == 0) Finish(step);
}

void StepReader::ReadAgainBounced(int t, ReadStep* step, BlockRef ref) {
  const uint32_t chunk = step->blocks[ref.block].chunk;
  if (PlaceAgainIfRewritten(step, chunk)) return;  // the bytes were another version's
  spdlog::debug("tier {}: '{}': block {} hashed wrong in the client's memory (changed under the read?): "
                "read again through a bounce buffer",
                tiers_[t]->name, step->reads[chunk].request.key, step->blocks[ref.block].segment);
  step->reads[chunk].bounce = true;
  pool_->Retry(ref);
  Settle(step, chunk);  // its other blocks may have failed meanwhile, waiting for this one
}

bool StepReader::PlaceAgainIfRewritten(ReadStep* step, uint32_t chunk) {
  ReadChunk& c = step->reads[chunk];
  const ChunkRead& read = c.request;
  std::shared_ptr<const ChunkMeta> current;
  uint32_t holders = 0;
  {
    absl::MutexLock lock(&index_->mu());
    const IndexEntry* e = index_->get().FindLive(read.key);
    if (e == nullptr || e->meta == c.meta) return false;
    current = e->meta;
    holders = e->tiers;
  }
  const uint32_t given_up = deadlines_.given_up_mask();
  if (holders != 0 && (holders & ~given_up) == 0) {  // only tiers that have stopped answering
    c.error = absl::StrCat("the tiers holding its new version have not answered a read in ",
                           config_.read_give_up_seconds, " s");
    c.real_failure = true;
    HoldOrTakeBack(step, chunk);
    pool_->ReplaceChunk(step, chunk, 0, 1);  // no holder: fails once nothing is in flight
    Settle(step, chunk);
    return true;
  }
  holders &= ~given_up;
  if (++c.placements > kMaxPlacements) {
    c.error = absl::StrCat("rewritten ", kMaxPlacements, " times while being read");
    HoldOrTakeBack(step, chunk);
    pool_->ReplaceChunk(step, chunk, 0, 1);  // no holder: fails once nothing is in flight
    Settle(step, chunk);
    return true;
  }
  if (read.dst_capacity < current->payload_size) {
    HoldOrTakeBack(step, chunk);
    pool_->ReplaceChunk(step, chunk, 0, 0);
    Deliver(step, chunk, absl::OutOfRangeError(absl::StrCat("'", read.key, "' was rewritten as ", current->payload_size,
                                                            " bytes, more than its destination of ",
                                                            read.dst_capacity)));
    if (step->unfinished == 0) Finish(step);
    return true;
  }
  if (HoldOrTakeBack(step, chunk) > 0) {
    // Reads of the old version still land in the destination: the new one is read once they have.
    --c.placements;  // counted when it is placed
    c.place_when_landed = true;
    pool_->ReplaceChunk(step, chunk, 0, 0);
    return true;
  }
  c.meta = current;
  c.result.size = current->payload_size;
  c.result.tier_mask = 0;
  step->eligible |= holders;
  pool_->ReplaceChunk(step, chunk, holders, current->segment_count());
  return true;
}

uint32_t StepReader::HoldOrTakeBack(ReadStep* step, uint32_t chunk) {
  uint32_t held = 0;
  for (size_t t = 0; t < reads_.size(); ++t) {
    for (ReadSlot& slot : reads_[t].slots) {
      if (slot.state == ReadState::kFree || slot.held || slot.ref.step != step || slot.buffer != slot.dst) continue;
      const StepBlock& blk = step->blocks[slot.ref.block];
      if (blk.chunk != chunk || blk.state != BlockState::kInFlight) continue;
      if (MayAbandon(static_cast<int>(t), &slot)) {
        tiers_[t]->device->Abandon(&slot);  // lands in pages nobody maps any more, or nowhere
        continue;
      }
      slot.held = true;
      ++step->reads[chunk].held;
      ++step->held_total;
      ++held;
    }
  }
  return held;
}

void StepReader::HeldReadLanded(ReadStep* step, uint32_t chunk) {
  ReadChunk& c = step->reads[chunk];
  --step->held_total;
  if (--c.held == 0) {
    if (c.place_when_landed) {
      c.place_when_landed = false;
      if (!PlaceAgainIfRewritten(step, chunk)) {  // removed meanwhile
        c.error = "rewritten, then removed, while being read";
        pool_->ReplaceChunk(step, chunk, 0, 1);  // no holder: fails now (nothing in flight)
        Settle(step, chunk);
      }
    } else if (!step->chunks[chunk].finished) {
      Settle(step, chunk);
    }
  }
  if (step->unfinished == 0) Finish(step);
}

}  // namespace kvstream
