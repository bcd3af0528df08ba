// StepReader: runs steps on the tiers. It places a step (looks every chunk up in the index and
// pins the version it found), claims blocks from the step pool whenever a tier has a free read
// slot, reads each block into the caller's destination (or through a bounce buffer when that is
// not aligned for O_DIRECT, is memory a device pinned: ChunkRead::bounce, or is registered memory
// whose pages are not pinned yet: MemoryRegions::Pending), verifies it against its segment
// checksum, fails over to another
// holder when a read fails or a checksum does not match (dropping a replica that is really bad),
// (on the verify threads, read/block_verifier.h: the loop only issues and reaps reads), and delivers
// each chunk's result as soon as its last block is in and verified. A read is bound to the
// version it was placed against: when the key is rewritten meanwhile (so a tier's file now holds
// other bytes), the chunk is placed again as the new version instead of blaming the tier.
//
// No step waits on one tier without bound (the rules: read/read_deadlines.h; applied in
// read/step_reader_deadlines.cc): a read in flight past its tier's deadline (4x the tier's recent
// read time, clamped to the configured floor and cap) marks the tier stalled, so it claims nothing
// new until that read lands, and its block is read again from another holder (a hedge; not before
// that holder could read a block, so a briefly late fast tier is not replaced by a much slower
// one). At the end of a step under completion routing, a tier leaves the last blocks to the others
// when they would read them all before its own read would land, and an idle tier takes over a block
// that a much slower tier would finish later than it could read it (looked at again when such a
// read becomes overdue, even if nothing lands). A hedged read is abandoned: its completion is
// ignored, and it can no longer be seen because it targets a bounce buffer or memory the store took
// back (memory/memory_regions.h). A read straight into other memory is never hedged: it is waited
// for. A destination in client memory that may shrink (ChunkRead::dst_fd) is copied into (bounced
// blocks) and hashed only under a SIGBUS guard (memory/client_memory.h); a destination that
// vanished fails only its chunk. A block that hashes wrong there says nothing of its tier (the
// client may have truncated its memory and grown it back under the read, or written into it): it is
// read again through a bounce buffer and judged in the store's own memory, the only verdict that
// counts against a tier. A chunk whose newest version is still in staging (persisted, not yet
// written: write/write_stager.h) is copied from there at placement and delivered at once, served by
// no tier. Loop thread only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "index/index.h"
#include "io/aligned_buffer.h"
#include "io/reactor.h"
#include "io/tier.h"
#include "kvstream/config.h"
#include "kvstream/store.h"
#include "memory/memory_regions.h"
#include "read/block_verifier.h"
#include "read/depth_tuner.h"
#include "read/read_deadlines.h"
#include "read/step_pool.h"
#include "read/step_record.h"
#include "write/write_stager.h"

namespace kvstream {

// One chunk of a step as the reader runs it: what its caller asked, what it gets back, and what
// the reader keeps while it reads it. The pool's view of the same chunk is Step::chunks[i].
struct ReadChunk {
  ChunkRead request;   // as the caller asked it; its destination is the caller's
  ChunkResult result;  // handed to the step's on_chunk once delivered
  std::shared_ptr<const ChunkMeta> meta;  // the version placed; null if finished at placement
  std::string stem;                       // its file name on the tiers
  uint32_t placements = 1;                // versions placed (a rewrite places the chunk again)
  std::string error;                      // the last block error, for the failure message
  // The tiers whose replica was another node's file (shared tiers) at placement; whether such a
  // replica turned out missing (removed or replaced by its owner, or bad), and whether a read
  // failed for any other reason. A chunk that failed only for missing foreign replicas is a miss
  // (NotFound): nothing of this node's was lost.
  uint32_t foreign = 0;
  bool foreign_missing = false;
  bool real_failure = false;
  // Reads that went straight into its destination and were abandoned (the chunk placed again,
  // failed or its destination gone) in memory the store could not take back, so they still land
  // there. The chunk is neither delivered nor placed again, and the step does not end, until they
  // have landed (a late one would overwrite newer bytes, or memory the caller reused).
  uint32_t held = 0;
  bool place_when_landed = false;  // the chunk was rewritten: placed again once they land
  // A block of it hashed wrong in client memory: its reads go through bounce buffers from then on.
  bool bounce = false;
};

// A step as the reader runs it: the pool's Step plus what its caller asked and gets back.
struct ReadStep : Step {
  // One ReadChunk per request, in the caller's order.
  explicit ReadStep(std::vector<ChunkRead> requests);

  std::vector<ReadChunk> reads;  // per chunk (Step::chunks is the pool's, at the same index)
  uint32_t held_total = 0;
  ChunkCallback on_chunk;
  std::function<void(StepRecord)> on_done;
  int64_t start_ns = 0;
  int64_t end_ns = 0;   // set when the last chunk is delivered
  uint32_t eligible = 0;  // tiers holding at least one chunk of the step
  uint32_t reads_in_flight = 0;
  uint32_t verifying = 0;  // blocks read and being verified (BlockVerifier); the step waits for them
  std::vector<TierUse> use;  // per tier
  Policies policies;         // the ones it was placed under
  double estimate_seconds = std::numeric_limits<double>::quiet_NaN();  // the load estimate at its start
};

class StepReader {
 public:
  // Called for each finished step with its record, before the step's own on_done.
  using StepFinished = std::function<void(StepRecord*)>;

  static constexpr int64_t kNoDeadline = INT64_MAX;

  StepReader(const StoreConfig& config, const Tiers& tiers, GuardedIndex* index, const WriteStager* staging,
             StepPool* pool, MemoryRegions* regions, Reactor* reactor, StoreCounters* counters,
             StepFinished on_step_finished);

  // Allocates the bounce buffers (registered for fixed-buffer reads where the device can) and
  // starts the verify threads.
  absl::Status Init();

  // Places a step: finishes misses, bad keys, too small destinations and chunks served from
  // staging at once, pins the versions found against eviction and queues the rest in the pool.
  void Place(std::unique_ptr<ReadStep> step, const Policies& policies) ABSL_LOCKS_EXCLUDED(index_->mu());
  // Claims and issues reads while `tier` has free read slots (none while it is stalled); when it
  // still has room, takes over the stragglers of slower tiers. Returns when to call it again if
  // no read lands before (a read of a slower tier is overdue then), or kNoDeadline.
  int64_t Schedule(int tier);
  // Marks the reads past their deadline late (their tiers stalled) and hedges their blocks.
  // Returns the next deadline of a read in flight, or kNoDeadline.
  int64_t CheckDeadlines();
  // A read issued by this reader completed on `tier`: its block goes to the verifier.
  void Complete(int tier, const IoCompletion& completion);
  // Applies the blocks the verifier finished (delivers chunks whose last block is in). Returns
  // whether there were any.
  bool TakeVerified();
  // Frees the steps that are finished and have no read in flight.
  void Sweep();
  // Publishes each tier's usual read time and oldest read in flight (Tier) for the load estimate.
  // Returns the reads in flight on every tier.
  uint64_t PublishLoad();

  // Called (loop thread) for each chunk delivered from another node's file on a shared tier while
  // this node holds no copy of its own that the step's replication policy wants: its bytes are
  // in the destination until the step's on_done, so they can be staged for the node's tiers.
  using ForeignRead = std::function<void(const ChunkRead& read, const ChunkMeta& meta)>;
  void set_on_foreign_read(ForeignRead fn) { on_foreign_read_ = std::move(fn); }
  // Called (loop thread) when another node's file on shared tier `tier` failed its checksum, so
  // lookups stop finding that file.
  using ForeignBad = std::function<void(int tier, const ChunkMeta& meta)>;
  void set_on_foreign_bad(ForeignBad fn) { on_foreign_bad_ = std::move(fn); }

  bool idle() const { return steps_.empty(); }
  int verify_threads() const { return verifier_->threads(); }
  // The verification's throughput while it is the bottleneck (any thread may ask): the bytes its
  // threads verified with a backlog (every thread busy, others queued) over the time they took on
  // them (wall time, so cores shared with others count), times the threads; moving averages as a
  // tier's reference, over the steps that finished since the verifier last had no backlog. 0 when
  // it had none since the last step finished (not the bound now) and with inline verification (no
  // threads: tests on a virtual clock).
  double verify_bps() const { return verify_bps_.load(std::memory_order_relaxed); }
  // A step is pending and a tier that is not stalled is reading for it (deferred writes wait for
  // these; never for a stalled tier, nor for hedged reads of finished steps).
  bool reads_pending() const;

 private:
  struct ReadSlot : IoRequest {
    BlockRef ref;
    uint8_t* dst = nullptr;     // where the payload belongs
    uint32_t payload = 0;       // payload bytes of the block
    uint8_t* bounce = nullptr;  // this slot's bounce buffer, block_size bytes
    AlignedBuffer oversized;    // bounce for blocks larger than block_size (older chunks)
    ReadState state = ReadState::kFree;  // against its deadline (read/read_deadlines.h)
    // Abandoned while straight into memory not taken back (ReadChunk::held): apart from `state`,
    // because a read on time and a late one alike can be held when their chunk is placed again.
    bool held = false;
    int64_t issued_ns = 0;
  };
  // A tier's read slots. Whether it is stalled or given up is ReadDeadlines'.
  struct TierReads {
    std::vector<ReadSlot> slots;  // the tier's most reads in flight
    std::vector<uint32_t> free;
    DepthTuner depth{1, 1};       // how many of the slots it takes now
    uint32_t settled_depth = 0;   // the depth last logged as settled
    AlignedBuffer bounce_pool;  // read_depth x block_size
  };

  // A chunk rewritten more often than this while one step reads it fails (Aborted-like DataLoss).
  static constexpr uint32_t kMaxPlacements = 16;

  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // The newest staged version of `key` when it is at least as new as the `indexed` one (or
  // nothing live is indexed), else null.
  const StagedChunk* NewerInStaging(const IndexEntry* indexed, std::string_view key) const
      ABSL_SHARED_LOCKS_REQUIRED(index_->mu());
  // Copies the staged chunk's payload into the chunk's destination (guarded for client memory
  // that may shrink): its result, OK or why the destination is gone.
  absl::Status CopyStaged(ReadStep* step, uint32_t chunk, const StagedChunk& staged);
  // False when the tier's file system did not answer the open: the block is given back unread.
  bool Issue(int tier, BlockRef ref);
  // A read of `bytes` landed on `tier`: its depth measured, perhaps changed (and logged).
  void TuneDepth(int tier, uint32_t bytes, int64_t now);
  void FreeSlot(int tier, uint32_t slot) { reads_[tier].free.push_back(slot); }
  // Whether `tier` may take another read now (its depth not reached).
  bool HasRoom(int tier) const {
    const TierReads& tr = reads_[tier];
    return tr.slots.size() - tr.free.size() < tr.depth.depth();
  }
  // A block's verification finished: accepted, failed over, or ignored (abandoned meanwhile).
  void Verified(const VerifyJob& job);
  // The block arrived intact: counted, and its chunk delivered once complete.
  void Accept(int tier, BlockRef ref, uint32_t payload);
  // What the deadline rules read of each tier now, one entry per tier (refreshed at each call).
  std::span<const TierPace> Pace();
  void ReadLate(int tier, ReadSlot* slot, int64_t now);
  void ReadLanded(int tier, ReadSlot* slot, int64_t now);
  // Whether the slot's read may be abandoned now without its bytes being seen: it lands in a bounce
  // buffer, or its device writes nothing more once Abandon returns (abandon_is_final), or the
  // pages it reads into are taken back from it.
  bool MayAbandon(int tier, ReadSlot* slot);
  // Abandons the slot's read and gives its block to another holder; false when that is unsafe
  // (a read straight into memory that cannot be taken back) or nobody else holds the chunk.
  bool Hedge(int tier, ReadSlot* slot);
  // How long after its issue the late read's block is read again from another holder
  // (ReadDeadlines::HedgeAfter, over the other holders of its chunk).
  int64_t HedgeAfter(int tier, const ReadSlot& slot);
  // Hedges the late read now if HedgeAfter has passed, else leaves it pending for CheckDeadlines;
  // a read nobody else can take over is left to GiveUp (reads.give_up).
  void MaybeHedge(int tier, ReadSlot* slot, int64_t now);
  // Fails the chunk of a late read no other tier holds, abandoning the read where its landing
  // cannot be seen (its bounce buffer, memory taken back); else its step keeps waiting.
  void GiveUp(int tier, ReadSlot* slot);
  // The tiers given up (a read in flight for reads.give_up) stop holding the chunks of `step`
  // (every pending step when null); those no other tier holds fail. May finish (free) steps.
  void DropGivenUpTiers(Step* step);
  // Why a chunk only `tier` holds failed once the tier was given up.
  std::string GivenUpWhy(int tier) const;
  // `tier` has room and nothing to claim: takes over the straggler of another tier that it can
  // read well before that tier would deliver it; false when there is none. Lowers `recheck` to
  // when a read in flight elsewhere that is not a straggler yet would become one.
  bool HedgeTail(int tier, int64_t* recheck);
  // Completion routing's end of a step: `tier` just claimed `ref`, but the other holders would
  // read everything they have in flight, every unclaimed block and this one before a read of
  // `tier` issued now would land (its usual read time): the block is better left to them. Never
  // while `tier` has no read in flight.
  bool LeavesToOthers(int tier, BlockRef ref);
  // How a read of the placed version failed (ReadFailed).
  enum class ReadFault : uint8_t {
    kError,     // an I/O error, or the file could not be opened for another reason
    kAbsent,    // the file is not there (ENOENT, ESTALE) or holds another version
    kMismatch,  // its bytes did not match the segment checksum (or a shared tier's tag)
  };
  // A read of the placed version failed on `tier` with `kind` as `fault`. If the key was
  // rewritten since placement, the chunk is read again as the current version and nothing counts
  // against the tier; otherwise the tier stops serving the chunk, the failure is counted, and a
  // replica that is really bad (kMismatch, or IsBadCopy(kind)) is dropped. kAbsent on another
  // node's file is its owner's doing, not a fault of the tier. Never on a block hashed in its
  // destination (its owner may have written into it): that one is read again (ReadAgainBounced).
  void ReadFailed(int tier, ReadStep* step, BlockRef ref, std::string why, IoStatus kind, ReadFault fault);
  // A block read straight into its destination (memory its owner can change under the store: an
  // arena, a client region) hashed wrong there: it is read again, by any holder, through a bounce
  // buffer (as is the rest of its chunk), and nothing counts against `tier`.
  void ReadAgainBounced(int tier, ReadStep* step, BlockRef ref);
  // Copies a bounced block into its destination (guarded for client memory that may shrink).
  // False when the destination is gone: the chunk has failed (DestinationGone).
  bool CopyIn(ReadStep* step, uint32_t chunk, const ReadSlot& slot);
  // The chunk's destination in client memory shrank away: the chunk fails with `why`, its other
  // blocks are abandoned, and nothing counts against a tier.
  void DestinationGone(ReadStep* step, uint32_t chunk, absl::Status why);
  // Places the chunk again if the index holds another version of it than the one placed (once
  // the reads of the old version still landing in its destination have landed).
  bool PlaceAgainIfRewritten(ReadStep* step, uint32_t chunk) ABSL_LOCKS_EXCLUDED(index_->mu());
  // Before the chunk's blocks in flight are abandoned: the pages under each read that went
  // straight into its destination are taken back (memory/memory_regions.h); a read whose pages cannot be
  // is held (ReadChunk::held). Returns how many were held.
  uint32_t HoldOrTakeBack(ReadStep* step, uint32_t chunk);
  // A held read of the chunk landed: once none is left, the chunk is placed again or settled.
  void HeldReadLanded(ReadStep* step, uint32_t chunk);
  // Removes the chunk's bad replica on `tier` from the index and the tier (unless the key was
  // rewritten since placement).
  void DropReplica(ReadStep* step, uint32_t chunk, int tier) ABSL_LOCKS_EXCLUDED(index_->mu());
  // Delivers the chunk once its outcome is known (every block in, or no holder left and nothing
  // in flight), and finishes the step after its last chunk.
  void Settle(ReadStep* step, uint32_t chunk);
  // Hands the chunk's result to the step's on_chunk and unpins its version.
  void Deliver(ReadStep* step, uint32_t chunk, absl::Status status) ABSL_LOCKS_EXCLUDED(index_->mu());
  void Finish(ReadStep* step);

  const StoreConfig& config_;
  const Tiers& tiers_;
  GuardedIndex* index_;
  const WriteStager* staging_;
  StepPool* pool_;
  MemoryRegions* regions_;
  Reactor* reactor_;
  StoreCounters* counters_;
  StepFinished on_step_finished_;
  ForeignRead on_foreign_read_;
  ForeignBad on_foreign_bad_;
  std::vector<std::string> tier_names_;
  std::vector<TierReads> reads_;  // per tier
  ReadDeadlines deadlines_;
  std::vector<TierPace> pace_;    // Pace()'s, per tier
  std::vector<ReferenceRate> reference_;  // per tier: its bytes and busy time in recent steps (Tier::reference_bps)
  ReferenceRate verify_reference_;  // verify_bps: the backlogged jobs' bytes and time (per thread) in recent steps
  double verify_bytes_ = 0;         // of backlogged jobs since the last step finished
  double verify_seconds_ = 0;       // their time
  std::atomic<double> verify_bps_{0};
  std::vector<std::unique_ptr<ReadStep>> steps_;
  std::vector<VerifyJob> verified_;  // TakeVerified's batch, reused
  std::unique_ptr<BlockVerifier> verifier_;  // last: its threads stop before the steps go
};

}  // namespace kvstream
